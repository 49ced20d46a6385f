"""Importing a multi-shard safetensors checkpoint streams it: the peak memory of the import stays near one shard
plus the float32 model, not the two full copies (the loaded state dict and its converted copy) of a naive import.

Measured in a subprocess through Linux's peak-RSS counter (VmHWM, reset by /proc/self/clear_refs), after a
warm-up import of a tiny model so that code loaded on first use is not counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
REPO = Path(__file__).resolve().parents[3]

MEASURE = """
import json, sys
from pathlib import Path
from megamlm.hf.importer import import_hf

def mib(key):
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(key + ":"))
    return int(line.split()[1]) / 1024

warm, big, out = sys.argv[1:4]
import_hf(warm, out + "-warm", log=lambda *_: None)
Path("/proc/self/clear_refs").write_text("5")
before = mib("VmRSS")
import_hf(big, out, log=lambda *_: None)
print(json.dumps({"growth_mib": mib("VmHWM") - before}))
"""


def _can_reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return "VmHWM" in Path("/proc/self/status").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not _can_reset_peak_rss(), reason="needs Linux's /proc/self/clear_refs to reset the peak RSS")
def test_import_peak_memory_is_one_shard_plus_the_model(tmp_path, kit):
    from transformers import LlamaConfig, LlamaForCausalLM

    # 22.8M parameters (91 MiB in float32), stored in bfloat16 as real checkpoints are, in shards of at most 12 MB.
    config = LlamaConfig(vocab_size=32000, hidden_size=256, intermediate_size=704, num_hidden_layers=8,
                         num_attention_heads=4, max_position_embeddings=64, tie_word_embeddings=False)
    torch.manual_seed(0)
    source = LlamaForCausalLM(config).to(torch.bfloat16)
    source.save_pretrained(str(tmp_path / "big"), max_shard_size="12MB")
    kit.word_tokenizer().save_pretrained(str(tmp_path / "big"))
    shards = sorted((tmp_path / "big").glob("model-*.safetensors"))
    assert len(shards) >= 4
    kit.save_tiny_llama(tmp_path / "warm")

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-c", MEASURE, str(tmp_path / "warm"), str(tmp_path / "big"),
                          str(tmp_path / "ckpt")], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    growth = json.loads(run.stdout.strip().splitlines()[-1])["growth_mib"]

    model_mib = sum(p.numel() for p in source.parameters()) * 4 / 2**20
    shard_mib = max(s.stat().st_size for s in shards) / 2**20
    # One float32 model, one shard being read, and a quarter of the model for everything else; a second
    # float32 copy of the state dict alone would exceed it.
    print(f"import peak growth {growth:.0f} MiB; model {model_mib:.0f} MiB in float32, largest shard {shard_mib:.0f} "
          "MiB")
    assert growth < model_mib + shard_mib + 0.25 * model_mib, (growth, model_mib, shard_mib)

    from megamlm.hf.megamlm_checkpoint import load_model, read_record

    imported = load_model(read_record(tmp_path / "ckpt"))
    assert torch.equal(imported.layers["7"].mlp.down_proj.weight, source.model.layers[7].mlp.down_proj.weight.float())
    mask_row = len(kit.word_tokenizer())  # the added mask token's row starts at the mean row; every other is copied
    assert torch.equal(imported.lm_head.weight[:mask_row], source.lm_head.weight[:mask_row].float())
    assert torch.equal(imported.lm_head.weight[mask_row + 1:], source.lm_head.weight[mask_row + 1:].float())
