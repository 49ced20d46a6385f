"""examples/cpt_hf_decoder.py (the README's Llama 3.2 1B and Qwen2.5 0.5B commands) on a tiny local Qwen2.5-shaped
model: import, the causal loss against transformers', MLM steps through pretrain.py, EuroBERT export, fill-mask."""

import json
import math
import sys
from pathlib import Path

import pytest

from decoder_families import FAMILIES, build

REPO = Path(__file__).resolve().parents[2]
pytest.importorskip("transformers")


def test_the_example_continues_a_qwen2_folder_into_a_eurobert_encoder(tmp_path):
    sys.path.insert(0, str(REPO / "examples"))
    try:
        import cpt_hf_decoder
    finally:
        sys.path.remove(str(REPO / "examples"))
    build(FAMILIES["qwen2.5"], tmp_path / "qwen")
    report_file = tmp_path / "report.json"
    assert cpt_hf_decoder.main(["--model", str(tmp_path / "qwen"), "--workdir", str(tmp_path / "work"),
                                "--steps", "2", "--seq-length", "32", "--paragraphs", "40", "--device", "cpu",
                                "--report", str(report_file)]) == 0
    report = json.loads(report_file.read_text())
    loss = report["causal_loss"]
    assert abs(loss["megamlm"] - loss["transformers"]) < 1e-4, loss
    assert sorted(report["cpt"]["losses"]) == ["1", "2"] and all(math.isfinite(v) for v in report["cpt"]["losses"].values())
    assert "--attention-bias" in report["cpt"]["command"] and "--tie-word-embeddings" in report["cpt"]["command"]
    config = json.loads((tmp_path / "work" / "hf-eurobert" / "config.json").read_text())
    assert (config["model_type"], config["attention_bias"], config["tie_word_embeddings"]) == ("eurobert", True, True)
    assert config["rope_parameters"]["rope_type"] == "yarn"
    assert len(report["fill_mask"]) == 5
