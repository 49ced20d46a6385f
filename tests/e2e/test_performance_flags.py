"""The performance flags reach the run: kernel/attention backends, document masks, torch.compile."""

import importlib.util

import pytest

from megamlm.config import ConfigError, parse_args

SHORT = ["--train-iters", "3", "--objective", "clm_then_mlm", "--switch", "0.34"]


def test_document_mask_changes_what_tokens_see(run):
    """Bundled paragraphs are shorter than a 64-token window, so masking at document boundaries must matter."""
    plain = run(*SHORT)
    masked = run(*SHORT, "--document-mask")
    assert plain.sample_ids == masked.sample_ids
    for step in (1, 3):  # a CLM step and an MLM step
        assert masked.losses[step] != plain.losses[step]


def test_kernel_backends_agree(run, monkeypatch):
    import megamlm.kernels as K

    seen: list[str] = []
    real = K.resolve_backend

    def spy(op, *tensors, backend="auto"):
        seen.append(backend)
        return real(op, *tensors, backend=backend)

    monkeypatch.setattr(K, "resolve_backend", spy)
    reference = run(*SHORT, "--kernel-backend", "reference")
    assert set(seen) == {"reference"}  # the flag reached every kernel call: the model's and the loss's
    seen.clear()
    chunked = run(*SHORT, "--kernel-backend", "chunked")
    assert set(seen) == {"chunked"}
    for step in reference.losses:
        assert chunked.losses[step] == pytest.approx(reference.losses[step], rel=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("flags", [["--compile"], ["--compile", "model"]])
def test_compiled_runs_match_eager(run, flags):
    eager = run(*SHORT)
    compiled = run(*SHORT, *flags)
    for step in eager.losses:
        assert compiled.losses[step] == pytest.approx(eager.losses[step], rel=1e-3)


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed")
def test_fp8_reaches_the_run(run):
    """The blocks' matmuls run in float8 (emulated on CPU): the losses move, by a little."""
    plain = run(*SHORT)
    fp8 = run(*SHORT, "--fp8")
    assert plain.sample_ids == fp8.sample_ids
    for step in plain.losses:
        assert fp8.losses[step] != plain.losses[step]
        assert fp8.losses[step] == pytest.approx(plain.losses[step], rel=0.05)


def test_attention_auto_is_sdpa_on_cpu(run):
    assert run(*SHORT, "--attention-backend", "auto").losses == run(*SHORT).losses


@pytest.mark.parametrize("argv,message", [
    (["--kernel-backend", "cuda"], "argument --kernel-backend: invalid choice"),
    (["--attention-backend", "xformers"], "argument --attention-backend: invalid choice"),
    (["--optimizer-impl", "sgd"], "argument --optimizer-impl: invalid choice"),
])
def test_unknown_backends_are_refused(argv, message):
    with pytest.raises(ConfigError, match=message):
        parse_args(argv)


def test_absent_optional_extras_are_named(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("flash_attn", "apex")
                        else real(name, *a))
    with pytest.raises(ConfigError, match="needs the flash-attn package"):
        parse_args(["--attention-backend", "flash"])
    with pytest.raises(ConfigError, match="needs the apex package"):
        parse_args(["--optimizer-impl", "apex"])
