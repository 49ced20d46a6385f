"""Continued pretraining of a decoder into an encoder, end to end, on a CPU.

    python examples/cpt_smollm2.py --workdir /tmp/cpt-smollm2 [--report report.json]

1. import SmolLM2-135M-Instruct (a Llama-architecture GGUF in ../shared/models/) as a megamlm checkpoint
   (tools/convert_from_hf.py; a mask token is added and the vocabulary grows to a multiple of 128);
2. show that megamlm's causal loss on an Austen paragraph equals transformers' own;
3. tokenize part of the bundled Austen corpus with the imported tokenizer (Megatron .bin/.idx);
4. run 20 MLM steps with `pretrain.py --init-from` the imported checkpoint;
5. export the result as a EuroBERT model (tools/convert_to_hf.py), load it with AutoModelForMaskedLM
   and fill a masked word with `pipeline("fill-mask")`.

The weights are 4-bit quantized and dequantized on load, so this shows the plumbing, not quality.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
MODEL_DIR = REPO / ".." / "shared" / "models" / "smollm2-135m-instruct"
CORPUS = REPO / "megamlm" / "assets" / "austen" / "austen.jsonl.gz"
SENTENCE = "Elizabeth and her {mask} Jane walked to Netherfield."


def austen_paragraphs(count: int) -> list[str]:
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    return texts[:count]


def load_transformers_model():
    """SmolLM2 as transformers loads it from the GGUF file (dequantized to float32)."""
    import torch
    from transformers import AutoModelForCausalLM

    gguf = next(MODEL_DIR.glob("*.gguf"))
    return AutoModelForCausalLM.from_pretrained(str(MODEL_DIR), gguf_file=gguf.name, dtype=torch.float32).eval()


def causal_losses(hf_model, ckpt: Path, text: str) -> dict:
    """Mean next-token loss of ``text`` (no BOS) under transformers' model and the imported megamlm model."""
    import torch
    import torch.nn.functional as F

    from megamlm.checkpoint import load_model_weights
    from megamlm.data import load_tokenizer
    from megamlm.hf.megamlm_checkpoint import read_record
    from megamlm.model.transformer import Transformer

    ids = torch.tensor([load_tokenizer(ckpt / "tokenizer").encode(text)])
    with torch.no_grad():
        theirs = hf_model(input_ids=ids, labels=ids).loss.item()
    model = Transformer(read_record(ckpt).model_args).eval()
    load_model_weights(ckpt, model)
    with torch.no_grad():
        logits = model.logits(model(ids, causal=True))
        ours = F.cross_entropy(logits[0, :-1], ids[0, 1:]).item()
    return {"tokens": ids.shape[1], "transformers": theirs, "megamlm": ours}


def tokenize_corpus(ckpt: Path, prefix: Path, paragraphs: int) -> int:
    from megamlm.data import IndexedDatasetWriter, best_dtype, load_tokenizer

    tokenizer = load_tokenizer(ckpt / "tokenizer")
    tokens = 0
    with IndexedDatasetWriter(prefix, best_dtype(tokenizer.vocab_size)) as writer:
        for ids in tokenizer.encode_batch(austen_paragraphs(paragraphs)):
            writer.add_document(ids + [tokenizer.eos_id])
            tokens += len(ids) + 1
    return tokens


def continued_pretraining(ckpt: Path, data_prefix: Path, save: Path, steps: int, seq_length: int) -> dict:
    from megamlm.hf.importer import pretrain_flags
    from megamlm.hf.megamlm_checkpoint import read_record

    command = [sys.executable, str(REPO / "pretrain.py"), *pretrain_flags(read_record(ckpt).model_args, ckpt),
               "--data-path", str(data_prefix), "--seq-length", str(seq_length), "--objective", "mlm",
               "--train-iters", str(steps), "--micro-batch-size", "2", "--global-batch-size", "2",
               "--lr", "1e-4", "--lr-warmup-iters", "2", "--lr-wsd-decay-iters", "4", "--weight-decay", "0.0",
               "--device", "cpu", "--precision", "fp32", "--log-interval", "1", "--save", str(save)]
    print("$", " ".join(command), flush=True)
    output = []
    with subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as run:
        for line in run.stdout:  # streamed, so progress shows while it trains
            sys.stdout.write(line)
            output.append(line)
    if run.returncode != 0:
        raise SystemExit(f"pretrain.py failed with exit code {run.returncode}")
    losses = {int(m.group(1)): float(m.group(2))
              for m in re.finditer(r"step (\d+)/\d+ \| objective mlm \| loss ([0-9.]+)", "".join(output))}
    return {"losses": losses, "command": command}


def fill_mask(hf_dir: Path) -> list[dict]:
    from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

    tokenizer = AutoTokenizer.from_pretrained(str(hf_dir))
    model = AutoModelForMaskedLM.from_pretrained(str(hf_dir))
    fill = pipeline("fill-mask", model=model, tokenizer=tokenizer, device="cpu")
    return [{"token": p["token_str"], "score": p["score"]}
            for p in fill(SENTENCE.format(mask=tokenizer.mask_token), top_k=5)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True, help="folder for the checkpoints, data and export")
    parser.add_argument("--steps", type=int, default=20, help="MLM continued-pretraining steps")
    parser.add_argument("--seq-length", type=int, default=64)
    parser.add_argument("--paragraphs", type=int, default=300, help="Austen paragraphs to tokenize for training")
    parser.add_argument("--report", help="write the figures of the run to this JSON file")
    args = parser.parse_args(argv)
    if not next(MODEL_DIR.glob("*.gguf"), None):
        raise SystemExit(f"no GGUF model in {MODEL_DIR}; see ../shared/ASSETS.md")

    from megamlm.hf import export_checkpoint, import_hf

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    report, timings = {}, {}
    start = time.perf_counter()

    def lap(name: str) -> None:
        timings[name] = round(time.perf_counter() - start - sum(timings.values()), 1)
        print(f"--- {name}: {timings[name]} s", flush=True)

    hf_model = load_transformers_model()
    lap("load_gguf")
    # The same as `python tools/convert_from_hf.py --input MODEL_DIR --output work/imported`, reusing the
    # tensors already in memory instead of dequantizing the GGUF file a second time.
    ckpt = import_hf(MODEL_DIR, work / "imported", force=True, hf_state=hf_model.state_dict())
    lap("import")
    report["causal_loss"] = causal_losses(hf_model, ckpt, austen_paragraphs(1)[0])
    del hf_model
    print("causal loss on the first Austen paragraph:", report["causal_loss"])
    lap("causal_loss")
    report["train_tokens"] = tokenize_corpus(ckpt, work / "data" / "austen_smollm2", args.paragraphs)
    lap("tokenize")
    report["cpt"] = continued_pretraining(ckpt, work / "data" / "austen_smollm2", work / "cpt", args.steps,
                                          args.seq_length)
    lap("cpt")
    export_checkpoint(work / "cpt", work / "hf-eurobert", arch="eurobert", force=True)
    lap("export")
    report["fill_mask"] = fill_mask(work / "hf-eurobert")
    print("fill-mask:", SENTENCE.format(mask="___"))
    for p in report["fill_mask"]:
        print(f"  {p['token']!r:>14} {p['score']:.3f}")
    lap("fill_mask")
    report["timings_s"] = {**timings, "total": round(time.perf_counter() - start, 1)}
    print("timings (s):", report["timings_s"])
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
