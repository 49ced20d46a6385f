"""The profile summary: kernel and operator names sorted into categories, host gaps measured, from real and
hand-made Chrome traces."""

import pytest
import torch

from megamlm.training.profiling import (
    STEP_MARK,
    categorize,
    profile_steps,
    summarize_trace,
)


@pytest.mark.parametrize("name,category", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matmul"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", "matmul"),
    ("triton_tem_fused_mm_0", "matmul"),
    ("aten::addmm", "matmul"),
    ("flash_fwd_kernel", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_knob_7", "attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention"),
    ("void at::native::multi_tensor_apply_kernel<...>", "optimizer"),
    ("aten::_fused_adamw_", "optimizer"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "communication"),
    ("triton_poi_fused_mul_silu_0", "element-wise"),
    ("_rms_norm_fwd_kernel", "element-wise"),
])
def test_names_fall_into_their_category(name, category):
    assert categorize(name) == category


def _event(name, cat, ts, dur, tid=1):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def test_gpu_shares_come_from_kernels_and_idle_time_is_a_host_gap():
    trace = {"traceEvents": [
        _event(STEP_MARK, "user_annotation", 0, 100),
        _event("sm90_xmma_gemm", "kernel", 0, 40, tid=7),
        _event("flash_fwd_kernel", "kernel", 40, 20, tid=7),
        _event("ncclDevKernel_AllReduce", "kernel", 50, 20, tid=8),  # overlaps the attention kernel
        _event("multi_tensor_apply_kernel", "kernel", 80, 10, tid=7),
        _event("sm90_xmma_gemm", "kernel", 150, 40, tid=7),  # outside the step: not counted
    ]}
    summary = summarize_trace(trace)
    assert summary.source == "gpu kernels" and summary.steps == 1
    assert summary.shares["matmul"] == pytest.approx(0.4)
    assert summary.shares["attention"] == pytest.approx(0.2)
    assert summary.shares["communication"] == pytest.approx(0.2)
    assert summary.shares["optimizer"] == pytest.approx(0.1)
    assert summary.shares["host gaps"] == pytest.approx(0.2)  # 70-80 and 90-100: no kernel ran
    assert summary.top[0][:3] == ("sm90_xmma_gemm", pytest.approx(40e-6), 1)


def test_cpu_shares_use_self_times_and_callers_lend_their_category():
    trace = {"traceEvents": [
        _event(STEP_MARK, "user_annotation", 0, 100),
        _event("aten::linear", "cpu_op", 0, 30),
        _event("aten::mm", "cpu_op", 2, 25),  # linear's own time: 5
        _event("Optimizer.step#AdamW.step", "user_annotation", 40, 40),
        _event("aten::_foreach_mul_", "cpu_op", 41, 30),
        _event("aten::mul_", "cpu_op", 42, 20),  # element-wise by name, the optimizer's by its caller
        _event("aten::silu", "cpu_op", 85, 5),
    ]}
    summary = summarize_trace(trace)
    assert summary.source == "cpu operators"
    assert summary.shares["matmul"] == pytest.approx(0.30)
    assert summary.shares["optimizer"] == pytest.approx(0.30)
    assert summary.shares["element-wise"] == pytest.approx(0.05)
    assert summary.shares["host gaps"] == pytest.approx(0.35)
    assert ("aten::mul_", pytest.approx(20e-6), 1, "optimizer") in summary.top


def test_a_trace_without_steps_is_refused():
    with pytest.raises(ValueError, match="no 'megamlm_step' annotation"):
        summarize_trace({"traceEvents": [_event("aten::mm", "cpu_op", 0, 1)]})


def test_a_real_cpu_profile_of_a_few_training_steps(tmp_path):
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)

    def step():
        model(torch.randn(32, 64)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    trace = profile_steps(step, 2, tmp_path / "trace.json", torch.device("cpu"))
    summary = summarize_trace(trace)
    assert summary.steps == 2 and summary.step_seconds > 0
    assert summary.shares["matmul"] > 0 and summary.shares["optimizer"] > 0
    assert sum(summary.shares.values()) == pytest.approx(1.0, abs=1e-6)
    assert "matmul" in summary.format() and "host gaps" in summary.format()
