"""``--attention-backend auto``: the fastest measured backend per attention mode, carried by the model."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_args

from megamlm.model import attention_backends, attention_probe
from megamlm.model.attention_probe import (
    AttentionInputs,
    candidate_backends,
    choose_attention_backends,
    resolve_auto_attention,
    synthetic_documents,
    time_attention,
)
from megamlm.model.config import Backends
from megamlm.model.transformer import Transformer

ARGS = tiny_args(vocab_size=64, num_layers=1, hidden_size=64, ffn_hidden_size=96)
CPU = torch.device("cpu")
CUDA = torch.device("cuda")


def test_on_cpu_auto_is_sdpa_for_both_modes_without_timing_anything(monkeypatch):
    monkeypatch.setattr(attention_probe, "time_attention", lambda *a, **k: pytest.fail("nothing to time on CPU"))
    backends = resolve_auto_attention(Backends(attention="auto"), CPU, ARGS, micro_batch=2)
    assert backends.auto_attention == ("sdpa", "sdpa")
    assert backends.attention_for(True) == backends.attention_for(False) == "sdpa"


def test_explicit_backends_are_left_alone():
    assert resolve_auto_attention(Backends(attention="flex"), CUDA, ARGS, 2) == Backends(attention="flex")


def test_gpu_candidates_cover_sdpa_kernels_flex_and_flash_when_installed(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "flash_attn" else real(name, *a))
    assert candidate_backends(CUDA, 64, torch.bfloat16, False) == ["sdpa", "sdpa_flash", "sdpa_cudnn", "flex", "flash"]
    assert candidate_backends(CUDA, 64, torch.bfloat16, True) == ["flex", "flash"]  # no dense mask on GPU
    assert candidate_backends(CUDA, 8, torch.float32, False) == ["sdpa", "sdpa_flash", "sdpa_cudnn"]
    assert candidate_backends(CPU, 64, torch.bfloat16, True) == ["sdpa"]


def test_the_fastest_backend_that_ran_is_chosen_per_mode(monkeypatch):
    measured = {(False, "sdpa"): 3.0, (False, "sdpa_flash"): 2.0, (False, "sdpa_cudnn"): None, (False, "flex"): 2.5,
                (True, "sdpa"): 1.0, (True, "sdpa_flash"): 1.5, (True, "sdpa_cudnn"): 4.0, (True, "flex"): None}
    calls = []

    def fake(name, inputs, causal, device, dtype):
        calls.append((name, inputs.batch, inputs.seq, inputs.heads, inputs.kv_heads, inputs.head_dim))
        return measured[(causal, name)]

    monkeypatch.setattr(attention_probe, "time_attention", fake)
    monkeypatch.setattr(attention_probe, "candidate_backends", lambda *a: ["sdpa", "sdpa_flash", "sdpa_cudnn", "flex"])
    choice, timings = choose_attention_backends(CUDA, AttentionInputs(2, 16, 4, 2, 16), torch.bfloat16)
    assert choice == ("sdpa_flash", "sdpa")
    assert timings["bidirectional"]["sdpa_cudnn"] is None and timings["causal"]["sdpa"] == 1.0
    # Under tensor parallelism each rank measures its own share of the heads.
    calls.clear()
    backends = resolve_auto_attention(Backends(attention="auto"), CUDA, ARGS, micro_batch=3, tp=2)
    assert backends.auto_attention == ("sdpa_flash", "sdpa")
    assert {c[1:] for c in calls} == {(3, 16, 2, 1, 16)}


def test_the_model_dispatches_each_mode_to_its_chosen_backend(monkeypatch):
    seen = []
    real = attention_backends.attention

    def spy(q, k, v, causal, document_ids=None, backend="sdpa", **features):  # window, scale
        seen.append((causal, backend))
        return real(q, k, v, causal, document_ids, backend="sdpa", **features)

    monkeypatch.setattr("megamlm.model.transformer.attention", spy)
    model = Transformer(ARGS, Backends(attention="auto", auto_attention=("sdpa_cudnn", "flex")))
    tokens = torch.randint(0, 64, (2, 16))
    model(tokens, causal=False)
    model(tokens, causal=True)
    assert seen == [(False, "sdpa_cudnn"), (True, "flex")]
    with pytest.raises(ValueError, match="concrete backends"):
        Backends(attention="auto", auto_attention=("auto", "sdpa"))


def test_timing_runs_forward_and_backward_and_refusals_count_as_absent():
    documents = AttentionInputs(1, 16, 4, 2, 16, documents=True)
    assert time_attention("sdpa", documents, True, CPU, torch.float32, warmup=1, reps=1) > 0
    assert time_attention("flex", AttentionInputs(1, 16, 4, 2, 16), True, CPU, torch.float32, warmup=1, reps=1) is None


def test_synthetic_documents_pack_several_documents_per_window():
    ids = synthetic_documents(2, 2048, CPU)
    assert ids.shape == (2, 2048)
    assert all(1 < len(torch.unique(row)) < 64 for row in ids)
