"""Corpus encoding throughput of the retrieval evaluation, megamlm's path against a plain reference.

    python benchmarks/eval_encoding.py --preset tiny --documents 2048
    python benchmarks/eval_encoding.py --preset 210m --documents 192 --max-length 512

The encoder is a randomly initialised EuroBERT (transformers) with the preset's shape; the corpus is the
first `--documents` paragraphs of the packaged Austen corpus, tokenized with the packaged tokenizer.
megamlm's side is the retrieval task's own corpus pass (`Retrieval._evaluate_group`: blocks sorted by
length, running top-10 against `--queries` queries). The reference encodes the documents in corpus order
in batches of the same size and ranks with one dense score matrix, as a plain sentence-transformers
`encode` + `similarity` evaluation does. Both sides run in this process, alternating, `--repeats` times
each; medians are reported. (That the streaming top-10 equals the dense one is tested in
tests/unit/eval/test_ranking.py; here the reference's top-10 is computed and discarded.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from megamlm.eval.austen_tasks import austen_paragraphs  # noqa: E402
from megamlm.eval.examples import RetrievalSplit, TaskData  # noqa: E402
from megamlm.eval.heads import BiEncoder  # noqa: E402
from megamlm.eval.tasks import TaskSettings, build_task  # noqa: E402
from megamlm.eval.tasks.base import encode_batch  # noqa: E402
from megamlm.model.config import PRESETS  # noqa: E402

TOKENIZER = ROOT / "megamlm" / "assets" / "austen" / "tokenizer.json"


def build_encoder(preset: str, max_length: int):
    import transformers

    shape = PRESETS[preset]
    config = transformers.EuroBertConfig(
        vocab_size=shape["vocab_size"] or 8192, hidden_size=shape["hidden_size"], num_hidden_layers=shape["num_layers"],
        num_attention_heads=shape["num_attention_heads"], num_key_value_heads=shape["num_query_groups"],
        intermediate_size=shape["ffn_hidden_size"], max_position_embeddings=max(max_length, shape["max_seq_length"]),
        pad_token_id=2, bos_token_id=0, eos_token_id=1, mask_token_id=3)
    torch.manual_seed(0)
    return BiEncoder(transformers.EuroBertModel(config)).eval()


def load_tokenizer():
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER), bos_token="<|bos|>", eos_token="<|eos|>",
                                   pad_token="<|pad|>", mask_token="<|mask|>")


def reference_pass(model, tokenizer, queries, documents, batch_size, max_length):
    """Corpus order, fixed-size batches, one dense (queries x documents) score matrix."""
    def embed(texts):
        out = []
        for start in range(0, len(texts), batch_size):
            ids = tokenizer(texts[start:start + batch_size], truncation=True, max_length=max_length)["input_ids"]
            batch = encode_batch(ids, tokenizer.pad_token_id)
            out.append(model(batch["input_ids"], batch["attention_mask"]))
        return torch.cat(out)
    q = embed(queries)
    started = time.perf_counter()
    d = embed(documents)
    (q @ d.T).topk(10, dim=1)
    return time.perf_counter() - started


def main(argv=None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=["tiny", "210m"], default="tiny")
    p.add_argument("--documents", type=int, default=2048)
    p.add_argument("--queries", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads; 0 = torch's default")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    paragraphs = [r["text"] for r in austen_paragraphs()]
    documents = paragraphs[:args.documents]
    queries = [t.split(". ")[0] for t in paragraphs[-args.queries:]]
    tokenizer = load_tokenizer()
    model = build_encoder(args.preset, args.max_length)
    corpus = {f"d{i}": t for i, t in enumerate(documents)}
    split = RetrievalSplit({f"q{i}": t for i, t in enumerate(queries)}, corpus,
                           {f"q{i}": {"d0": 1} for i in range(len(queries))})
    data = TaskData("bench", "retrieval", {"train": split, "validation": split, "test": split})
    task = build_task(data, tokenizer, TaskSettings(max_length=args.max_length, eval_batch_size=args.batch_size,
                                                    eurobert_inputs=False))
    task.log = lambda *_: None
    tokens = sum(len(x) for x in tokenizer(documents, truncation=True, max_length=args.max_length)["input_ids"])
    ours, reference = [], []
    with torch.no_grad():
        for _ in range(args.repeats):
            result = task._evaluate_group(model, ["test"], torch.device("cpu"))["test"]
            ours.append(len(documents) / result["corpus_docs_per_s"])
            reference.append(reference_pass(model, tokenizer, queries, documents, args.batch_size, args.max_length))
    ours_s, ref_s = statistics.median(ours), statistics.median(reference)
    figures = {"preset": args.preset, "documents": len(documents), "tokens": tokens, "max_length": args.max_length,
               "batch_size": args.batch_size, "threads": torch.get_num_threads(),
               "megamlm_docs_per_s": len(documents) / ours_s, "reference_docs_per_s": len(documents) / ref_s,
               "megamlm_tokens_per_s": tokens / ours_s, "reference_tokens_per_s": tokens / ref_s,
               "speedup": ref_s / ours_s, "repeats": args.repeats}
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
