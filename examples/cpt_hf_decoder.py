"""Continued pretraining of a Hugging Face decoder into an encoder, end to end: any folder or GGUF file that
tools/convert_from_hf.py imports (Llama 1-3.2, Mistral, Qwen2/2.5, Qwen3, Gemma 3, SmolLM, EuroBERT).

    python examples/cpt_hf_decoder.py --model /models/Llama-3.2-1B --workdir runs/cpt-llama3.2-1b
    python examples/cpt_hf_decoder.py --model /models/Qwen2.5-0.5B --workdir runs/cpt-qwen2.5-0.5b
    python examples/cpt_hf_decoder.py --model /models/Qwen3-0.6B --workdir runs/cpt-qwen3-0.6b
    python examples/cpt_hf_decoder.py --model /models/gemma-3-270m --workdir runs/cpt-gemma3-270m

1. import the model as a megamlm checkpoint (a mask token is chosen or added, the vocabulary padded to a
   multiple of 128; attention biases, head_dim, RoPE scaling and tied embeddings carry over);
2. show that megamlm's causal loss on an Austen paragraph equals transformers' own;
3. tokenize part of the bundled Austen corpus with the imported tokenizer (Megatron .bin/.idx);
4. run --steps MLM steps with `pretrain.py --init-from` the imported checkpoint (on a GPU when one is visible);
5. export the result as its default encoder (tools/convert_to_hf.py) and fill a masked word: a native EuroBERT
   (AutoModelForMaskedLM, `pipeline("fill-mask")`), or for Gemma 3 a bidirectional Gemma 3 (its MLM logits from
   AutoModelForCausalLM on the bidirectional config; AutoModelForSequenceClassification loads it too). A Qwen3
   encoder has no Hugging Face encoder class (EuroBERT has no query/key norms): the masked word is filled by
   megamlm's own model from the run folder, and the refusal names the alternatives.

A few steps on Austen show the plumbing, not a good encoder: for a real run, tokenize your corpus with the
imported tokenizer and call pretrain.py with the flags this script prints. examples/cpt_smollm2.py runs it on
the SmolLM2-135M GGUF in ../shared.
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

from megamlm.log import quiet_imports  # noqa: E402

quiet_imports()  # before transformers is imported: known third-party import noise (megamlm/log.py)

CORPUS = REPO / "megamlm" / "assets" / "austen" / "austen.jsonl.gz"
SENTENCE = "Elizabeth and her {mask} Jane walked to Netherfield."


def austen_paragraphs(count: int) -> list[str]:
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    return texts[:count]


def load_transformers_model(model: Path):
    """The causal model as transformers loads it (a GGUF file dequantized to float32)."""
    import torch
    from transformers import AutoModelForCausalLM

    from megamlm.hf.hf_source import open_source

    source = open_source(model)
    return AutoModelForCausalLM.from_pretrained(str(source.folder), dtype=torch.float32, trust_remote_code=False,
                                                **source.loader_kwargs).eval()


def causal_losses(hf_model, ckpt: Path, text: str) -> dict:
    """Mean next-token loss of ``text`` (no BOS, cut to the model's context) under transformers' model and the
    imported megamlm model, both over the source model's vocabulary less the rows the import initialised (an
    added mask token's row starts at the mean row)."""
    import torch
    import torch.nn.functional as F

    from megamlm.checkpoint import load_model_weights
    from megamlm.data import load_tokenizer
    from megamlm.hf.megamlm_checkpoint import read_record
    from megamlm.model.transformer import Transformer

    record = read_record(ckpt)
    ids = torch.tensor([load_tokenizer(ckpt / "tokenizer").encode(text)[: record.model_args.max_seq_length]])
    added = [record.tokenizer["mask_id"]] if record.config["imported_from"]["mask_added"] else []
    keep = [i for i in range(hf_model.config.vocab_size) if i not in added]
    model = Transformer(record.model_args).eval()
    load_model_weights(ckpt, model)
    with torch.no_grad():
        theirs = hf_model(input_ids=ids).logits[0, :-1, keep]
        ours = model.logits(model(ids, causal=True))[0, :-1, keep]
    targets = torch.tensor([keep.index(i) for i in ids[0, 1:].tolist()])
    return {"tokens": ids.shape[1], "transformers": F.cross_entropy(theirs, targets).item(),
            "megamlm": F.cross_entropy(ours, targets).item()}


def tokenize_corpus(ckpt: Path, prefix: Path, paragraphs: int) -> int:
    from megamlm.data import IndexedDatasetWriter, best_dtype, load_tokenizer

    tokenizer = load_tokenizer(ckpt / "tokenizer")
    tokens = 0
    with IndexedDatasetWriter(prefix, best_dtype(tokenizer.vocab_size)) as writer:
        for ids in tokenizer.encode_batch(austen_paragraphs(paragraphs)):
            writer.add_document(ids + [tokenizer.eos_id])
            tokens += len(ids) + 1
    return tokens


def continued_pretraining(ckpt: Path, data_prefix: Path, save: Path, steps: int, seq_length: int,
                          micro_batch_size: int = 2, lr: float = 1e-4, device: str = "auto") -> dict:
    from megamlm.hf.importer import pretrain_flags
    from megamlm.hf.megamlm_checkpoint import read_record

    batch = str(micro_batch_size)
    command = [sys.executable, str(REPO / "pretrain.py"), *pretrain_flags(read_record(ckpt).model_args, ckpt),
               "--data-path", str(data_prefix), "--seq-length", str(seq_length), "--objective", "mlm",
               "--train-iters", str(steps), "--micro-batch-size", batch, "--global-batch-size", batch,
               "--lr", str(lr), "--lr-warmup-iters", str(max(steps // 10, 1)),
               "--lr-wsd-decay-iters", str(max(steps // 5, 1)), "--weight-decay", "0.0", "--device", device,
               "--log-interval", "1", "--save", str(save)]
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


def export_encoder(run: Path, work: Path) -> dict:
    """The run's default encoder export (EuroBERT, or the bidirectional Gemma 3 for a Gemma 3 model); where none
    holds the model (Qwen3's query/key norms) the refusal is printed and nothing is exported."""
    from megamlm.hf import export_checkpoint
    from megamlm.hf.hf_config import default_arch, export_problem
    from megamlm.hf.megamlm_checkpoint import read_record

    args = read_record(run).model_args
    arch = default_arch(args)
    problem = export_problem(arch, args)
    if problem:
        print(f"no encoder export: {problem}", flush=True)
        return {"arch": arch, "folder": None, "refused": problem}
    folder = export_checkpoint(run, work / f"hf-{arch}", arch=arch, force=True)
    return {"arch": arch, "folder": str(folder)}


def _top(probabilities, tokenizer, k: int = 5) -> list[dict]:
    scores, ids = probabilities.topk(k)
    return [{"token": tokenizer.decode([int(i)]).strip(), "score": float(s)} for s, i in zip(scores, ids)]


def fill_mask(hf_dir: Path, arch: str = "eurobert") -> list[dict]:
    import torch
    from transformers import (
        AutoModelForCausalLM,
        AutoModelForMaskedLM,
        AutoModelForSequenceClassification,
        AutoTokenizer,
        pipeline,
    )

    tokenizer = AutoTokenizer.from_pretrained(str(hf_dir), trust_remote_code=False)
    if arch == "gemma3_encoder":  # no masked-LM class: the causal-LM class on the bidirectional config
        _, info = AutoModelForSequenceClassification.from_pretrained(str(hf_dir), num_labels=2, trust_remote_code=False,
                                                                      output_loading_info=True)
        print("AutoModelForSequenceClassification: missing", sorted(info["missing_keys"]), "unexpected",
              sorted(info["unexpected_keys"]), flush=True)
        model = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32, trust_remote_code=False).eval()
        ids = tokenizer(SENTENCE.format(mask=tokenizer.mask_token), return_tensors="pt")["input_ids"]
        position = (ids[0] == tokenizer.mask_token_id).nonzero()[0, 0]
        with torch.no_grad():
            return _top(model(input_ids=ids).logits[0, position].softmax(-1), tokenizer)
    model = AutoModelForMaskedLM.from_pretrained(str(hf_dir), trust_remote_code=False)
    fill = pipeline("fill-mask", model=model, tokenizer=tokenizer, device="cpu")
    return [{"token": p["token_str"], "score": p["score"]}
            for p in fill(SENTENCE.format(mask=tokenizer.mask_token), top_k=5)]


def fill_mask_megamlm(run: Path) -> list[dict]:
    """The masked word as megamlm's own model (the run's newest checkpoint) predicts it, bidirectionally."""
    import torch
    from transformers import AutoTokenizer

    from megamlm.hf.megamlm_checkpoint import load_model, read_record

    record = read_record(run)
    model = load_model(record).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(Path(record.tokenizer_path()).parent), trust_remote_code=False)
    ids = tokenizer(SENTENCE.format(mask=tokenizer.mask_token), return_tensors="pt",
                    add_special_tokens=False)["input_ids"]
    position = (ids[0] == tokenizer.mask_token_id).nonzero()[0, 0]
    with torch.no_grad():
        return _top(model.logits(model(ids, causal=False))[0, position].softmax(-1), tokenizer)


def build_parser(description: str = __doc__.split("\n\n")[0], model: bool = True) -> argparse.ArgumentParser:
    """This script's flags; ``model=False`` leaves out --model (examples/cpt_smollm2.py fixes the model)."""
    parser = argparse.ArgumentParser(allow_abbrev=False, description=description)
    if model:
        parser.add_argument("--model", required=True,
                            help="Hugging Face model folder (config.json, safetensors, tokenizer) or a .gguf file")
    parser.add_argument("--workdir", required=True, help="folder for the checkpoints, data and export")
    parser.add_argument("--steps", type=int, default=20, help="MLM continued-pretraining steps")
    parser.add_argument("--seq-length", type=int, default=64)
    parser.add_argument("--micro-batch-size", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-4, help="peak learning rate of the MLM steps")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--paragraphs", type=int, default=300, help="Austen paragraphs to tokenize for training")
    parser.add_argument("--report", help="write the figures of the run to this JSON file")
    return parser


def run(model: Path, args: argparse.Namespace) -> dict:
    from megamlm.hf import import_hf
    from megamlm.hf.hf_source import open_source

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    report, timings = {}, {}
    start = time.perf_counter()

    def lap(name: str) -> None:
        timings[name] = round(time.perf_counter() - start - sum(timings.values()), 1)
        print(f"--- {name}: {timings[name]} s", flush=True)

    if open_source(model).gguf_file:  # dequantize once: the import reuses the tensors transformers loaded
        hf_model = load_transformers_model(model)
        ckpt = import_hf(model, work / "imported", force=True, hf_state=hf_model.state_dict())
    else:  # stream the safetensors shards into the checkpoint, then load the model for the comparison
        ckpt = import_hf(model, work / "imported", force=True)
        hf_model = load_transformers_model(model)
    lap("import")
    report["causal_loss"] = causal_losses(hf_model, ckpt, austen_paragraphs(1)[0])
    del hf_model
    print("causal loss on the first Austen paragraph:", report["causal_loss"])
    lap("causal_loss")
    data = work / "data" / "austen"
    report["train_tokens"] = tokenize_corpus(ckpt, data, args.paragraphs)
    lap("tokenize")
    report["cpt"] = continued_pretraining(ckpt, data, work / "cpt", args.steps, args.seq_length,
                                          args.micro_batch_size, args.lr, args.device)
    lap("cpt")
    report["export"] = export_encoder(work / "cpt", work)
    lap("export")
    report["fill_mask"] = (fill_mask(work / f"hf-{report['export']['arch']}", report["export"]["arch"])
                           if report["export"]["folder"] else fill_mask_megamlm(work / "cpt"))
    print("fill-mask:", SENTENCE.format(mask="___"))
    for p in report["fill_mask"]:
        print(f"  {p['token']!r:>14} {p['score']:.3f}")
    lap("fill_mask")
    report["timings_s"] = {**timings, "total": round(time.perf_counter() - start, 1)}
    print("timings (s):", report["timings_s"])
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2, default=str))
    return report


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run(Path(args.model), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
