"""Continue a ModernBERT as a user would, every step a command: tools/convert_from_hf.py on a ModernBertForMaskedLM
folder, the pretrain.py command it prints (run as printed, with data, a length and a place to save added), and
tools/convert_to_hf.py, whose folder transformers loads as ModernBertForMaskedLM with no weight warning."""

import json
import random
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_dataset
from modernbert_folders import SMALL_WINDOW, save_modernbert, word_tokenizer

REPO = Path(__file__).resolve().parents[2]
transformers = pytest.importorskip("transformers")


def _command(*argv: str, cwd=REPO) -> str:
    done = subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_printed_command_continues_a_modernbert_and_exports_it(tmp_path):
    save_modernbert(tmp_path / "ModernBERT-tiny", SMALL_WINDOW)
    tokenizer, rng = word_tokenizer(), random.Random(0)
    words = [w for w in tokenizer.get_vocab() if not w.startswith("[")]
    write_dataset(tmp_path / "words_text_document",
                  [tokenizer(" ".join(rng.choice(words) for _ in range(rng.randint(8, 30))))["input_ids"]
                   for _ in range(60)], "int32")
    printed = _command("tools/convert_from_hf.py", "--input", str(tmp_path / "ModernBERT-tiny"), "--output",
                       str(tmp_path / "ckpt"))
    command = next(line.strip() for line in printed.splitlines() if line.strip().startswith("python pretrain.py"))
    argv = shlex.split(command.split(" --data-path ")[0])[1:]  # the printed flags, up to the placeholder
    for flag in ("--norm-type", "--embedding-norm", "--prediction-head", "--sliding-window", "--layer-types"):
        assert flag in argv, command
    _command(*argv, "--data-path", str(tmp_path / "words_text_document"), "--data-cache-path", str(tmp_path / "cache"),
             "--objective", "mlm", "--seq-length", "32", "--train-iters", "10", "--micro-batch-size", "2",
             "--global-batch-size", "2", "--device", "cpu", "--save", str(tmp_path / "run"))
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert max(m.get("step", 0) for m in metrics) == 10
    _command("tools/convert_to_hf.py", "--input", str(tmp_path / "run"), "--output", str(tmp_path / "hf"))
    model, info = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "hf"), output_loading_info=True)
    assert type(model).__name__ == "ModernBertForMaskedLM" and not any(info.values()), info
    assert len(transformers.pipeline("fill-mask", model=str(tmp_path / "hf"))("she [MASK] that")) == 5
