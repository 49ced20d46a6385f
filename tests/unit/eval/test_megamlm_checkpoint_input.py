"""A megamlm checkpoint given to tools/evaluate.py is exported once (megamlm.hf) and then evaluated."""

import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]
AUSTEN_TOKENIZER = ROOT / "megamlm" / "assets" / "austen" / "tokenizer.json"


def _write_megamlm_checkpoint(save_dir: Path, steps=(1,)) -> None:
    from helpers import tiny_args

    from megamlm.checkpoint import save_checkpoint
    from megamlm.config import Config
    from megamlm.model.transformer import Transformer

    args = tiny_args(vocab_size=8192, num_layers=1, num_attention_heads=2, max_seq_length=64)
    torch.manual_seed(0)
    model = Transformer(args)
    record = {"config": Config().to_dict(), "model_args": args.to_dict(), "seq_length": 64,
              "tokenizer": {"path": str(AUSTEN_TOKENIZER), "vocab_size": 8192, "bos_id": 0, "eos_id": 1,
                            "pad_id": 2, "mask_id": 3}}
    for step in steps:
        save_checkpoint(save_dir, step, model, torch.optim.AdamW(model.parameters()), {"consumed_samples": 0}, record)


def test_megamlm_checkpoint_is_exported_then_evaluated(tmp_path, capsys):
    if not AUSTEN_TOKENIZER.is_file():
        pytest.skip("megamlm/assets/austen/tokenizer.json is not present")
    _write_megamlm_checkpoint(tmp_path / "ckpt")
    task = tmp_path / "reviews"
    task.mkdir()
    rows = "\n".join(json.dumps({"text": t, "label": label}) for t, label in
                     [("she said it was good", "pos"), ("he was not good", "neg")] * 2)
    for split in ("train", "validation", "test"):
        (task / f"{split}.jsonl").write_text(rows + "\n")
    from helpers import load_tool

    cli = load_tool("evaluate")
    out = tmp_path / "out"
    args = ["--model", f"mlm={tmp_path / 'ckpt'}", "--tasks", f"sequence_classification:{task}", "--output", str(out),
            "--lrs", "1e-3", "--seeds", "0", "--max-steps", "1", "--batch-size", "2", "--no-plots"]
    assert cli.main(args) == 0
    exported = out / "hf_exports" / "mlm-step1"  # a run folder: every checkpoint, named by its step
    assert json.loads((exported / "config.json").read_text())["model_type"] == "eurobert"
    result = json.loads((out / "runs" / "mlm-step1" / "reviews" / "lr0.001_seed0.json").read_text())
    assert result["model_input"] == str(tmp_path / "ckpt" / "iter_0000001")
    assert result["settings"]["model_path"] == str(exported)
    assert "exporting megamlm checkpoint" in capsys.readouterr().out
    assert cli.main(args) == 0  # the export is reused, the run skipped
    assert "exporting" not in capsys.readouterr().out


def test_a_run_folder_evaluates_each_checkpoint_exported_once(tmp_path, capsys):
    if not AUSTEN_TOKENIZER.is_file():
        pytest.skip("megamlm/assets/austen/tokenizer.json is not present")
    from megamlm.eval.model_source import resolve_models

    run = tmp_path / "run"
    _write_megamlm_checkpoint(run, steps=(2, 4))
    (run / "iter_0000006.tmp").mkdir()  # an interrupted save is not a checkpoint
    exports = tmp_path / "exports"
    logged = []
    models = resolve_models("mlm", run, exports, log=logged.append)
    assert [(m.name, m.path.name) for m in models] == [("mlm-step2", "iter_0000002"), ("mlm-step4", "iter_0000004")]
    assert all((m.hf_path / "config.json").is_file() for m in models)
    assert sum(line.startswith("exporting") for line in logged) == 2
    logged.clear()
    assert [m.name for m in resolve_models("mlm", run, exports, log=logged.append)] == ["mlm-step2", "mlm-step4"]
    assert not any(line.startswith("exporting") for line in logged)  # each exported once
    (latest,) = resolve_models("mlm", run, exports, checkpoints="latest", log=logged.append)
    assert latest.name == "mlm" and latest.hf_path == exports / "mlm"
