"""examples/cpt_hf_decoder.py (the README's Llama 3.2 1B and Qwen2.5 0.5B commands) on a tiny local Qwen2.5-shaped
model: import, the causal loss against transformers', MLM steps through pretrain.py, EuroBERT export, fill-mask."""

import json
import math
import sys
from pathlib import Path

import pytest
from decoder_families import FAMILIES, QK_NORM_FAMILIES, build

REPO = Path(__file__).resolve().parents[2]
pytest.importorskip("transformers")


def _example():
    sys.path.insert(0, str(REPO / "examples"))
    try:
        import cpt_hf_decoder
    finally:
        sys.path.remove(str(REPO / "examples"))
    return cpt_hf_decoder


@pytest.mark.parametrize("name", ["qwen3", "gemma3"])
def test_the_example_continues_qwen3_and_gemma3(tmp_path, name):
    """The README's Qwen3-0.6B and Gemma-3-270m commands, on tiny random models of those families: the MLM loss
    falls over the steps; Gemma 3 exports as a bidirectional Gemma 3, Qwen3 (no EuroBERT for q/k norms) fills the
    mask with megamlm's own model and says why it was not exported."""
    build(QK_NORM_FAMILIES[name], tmp_path / name)
    report_file = tmp_path / "report.json"
    assert _example().main(["--model", str(tmp_path / name), "--workdir", str(tmp_path / "work"),
                            "--steps", "12", "--seq-length", "32", "--paragraphs", "40", "--device", "cpu",
                            "--lr", "3e-3", "--report", str(report_file)]) == 0
    report = json.loads(report_file.read_text())
    loss = report["causal_loss"]
    assert abs(loss["megamlm"] - loss["transformers"]) < 1e-4, loss
    losses = [report["cpt"]["losses"][str(step)] for step in range(1, 13)]
    assert sum(losses[-3:]) < sum(losses[:3]), losses
    assert "--qk-norm" in report["cpt"]["command"] and len(report["fill_mask"]) == 5
    if name == "gemma3":
        assert report["export"]["arch"] == "gemma3_encoder"
        config = json.loads((tmp_path / "work" / "hf-gemma3_encoder" / "config.json").read_text())
        assert config["use_bidirectional_attention"] is True
        for flag in ("--sublayer-output-norms", "--scale-embeddings", "--mlp-activation", "--layer-types"):
            assert flag in report["cpt"]["command"]
        import transformers

        folder = str(tmp_path / "work" / "hf-gemma3_encoder")
        _, info = transformers.AutoModelForSequenceClassification.from_pretrained(folder, num_labels=2,
                                                                                  output_loading_info=True)
        assert info["missing_keys"] == {"score.weight"} and not info["unexpected_keys"], info
        from sentence_transformers import SentenceTransformer  # a test dependency (pyproject's [test] extra)

        embeddings = SentenceTransformer(folder, device="cpu").encode(["Elinor said that"])
        assert embeddings.shape == (1, config["hidden_size"])
    else:
        assert report["export"]["folder"] is None and "query/key norms" in report["export"]["refused"]


def test_the_example_continues_a_qwen2_folder_into_a_eurobert_encoder(tmp_path):
    cpt_hf_decoder = _example()
    build(FAMILIES["qwen2.5"], tmp_path / "qwen")
    report_file = tmp_path / "report.json"
    assert cpt_hf_decoder.main(["--model", str(tmp_path / "qwen"), "--workdir", str(tmp_path / "work"),
                                "--steps", "2", "--seq-length", "32", "--paragraphs", "40", "--device", "cpu",
                                "--report", str(report_file)]) == 0
    report = json.loads(report_file.read_text())
    loss = report["causal_loss"]
    assert abs(loss["megamlm"] - loss["transformers"]) < 1e-4, loss
    assert sorted(report["cpt"]["losses"]) == ["1", "2"]
    assert all(math.isfinite(v) for v in report["cpt"]["losses"].values())
    assert "--attention-bias" in report["cpt"]["command"] and "--tie-word-embeddings" in report["cpt"]["command"]
    assert report["export"]["arch"] == "eurobert"
    config = json.loads((tmp_path / "work" / "hf-eurobert" / "config.json").read_text())
    assert (config["model_type"], config["attention_bias"], config["tie_word_embeddings"]) == ("eurobert", True, True)
    assert config["rope_parameters"]["rope_type"] == "yarn"
    assert len(report["fill_mask"]) == 5
