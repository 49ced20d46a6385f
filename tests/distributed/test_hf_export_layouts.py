"""A Hugging Face export does not depend on the parallel layout that saved the checkpoint: TP=2 and PP=2
checkpoints of the same weights export to the same bytes as the single-process checkpoint."""

from __future__ import annotations

import pytest
from harness import spawn
from hf_export_workers import reference_model, save, save_layout

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def single_process_export(tmp_path_factory):
    from megamlm.hf.export import export_checkpoint

    root = tmp_path_factory.mktemp("tp1")
    save(reference_model(), str(root / "ckpt"))
    return export_checkpoint(root / "ckpt", root / "hf", log=lambda *_: None)


@pytest.mark.parametrize("layout", [dict(tp=2), dict(pp=2)], ids=["tp2", "pp2"])
def test_parallel_checkpoint_exports_like_single_process(layout, single_process_export, tmp_path):
    from safetensors.torch import load_file

    from megamlm.hf.export import export_checkpoint

    spawn(save_layout, 2, layout, str(tmp_path / "ckpt"))
    out = export_checkpoint(tmp_path / "ckpt", tmp_path / "hf", log=lambda *_: None)
    ours = load_file(str(out / "model.safetensors"))
    reference = load_file(str(single_process_export / "model.safetensors"))
    assert sorted(ours) == sorted(reference)
    for name, tensor in reference.items():
        assert ours[name].dtype == tensor.dtype and ours[name].shape == tensor.shape, name
        assert ours[name].equal(tensor), name
    assert (out / "config.json").read_text() == (single_process_export / "config.json").read_text()
