"""The bundled Austen corpus split by book: one Megatron dataset per novel, in the bundled tokenizer, for recipes
whose phases read other data (examples/recipes/tiny_three_phase.yaml).

    python examples/recipes/austen_books.py --output data/austen

writes data/austen/<book>_text_document.bin/.idx (sense_and_sensibility, pride_and_prejudice, mansfield_park, emma,
northanger_abbey, persuasion), each document one paragraph and its eos token, the same token ids as the bundled
corpus's (its documents, taken by the corpus file's ``book`` field), with a sidecar naming the tokenizer.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

from megamlm.data import IndexedDataset, IndexedDatasetWriter, load_tokenizer, prepare_embedded_corpus
from megamlm.data.embedded import CORPUS_FILE
from megamlm.data.sidecar import write_sidecar


def book_name(title: str) -> str:
    """``Pride & Prejudice`` -> ``pride_and_prejudice``."""
    return re.sub(r"[^a-z]+", "_", title.lower().replace("&", "and")).strip("_")


def split_by_book(output: Path, cache_dir: str | None = None) -> dict[str, str]:
    """One dataset per book under ``output``; returns {book name: dataset prefix}."""
    prefix, tokenizer_path = prepare_embedded_corpus(cache_dir)
    corpus, tokenizer = IndexedDataset(prefix), load_tokenizer(tokenizer_path)
    with gzip.open(CORPUS_FILE, "rt", encoding="utf-8") as f:
        books = [json.loads(line)["book"] for line in f if line.strip()]
    if len(books) != len(corpus):
        raise SystemExit(f"the bundled corpus has {len(corpus)} documents but its file {len(books)} lines; "
                         "reinstall megamlm (pip install -e .)")
    output.mkdir(parents=True, exist_ok=True)
    prefixes = {}
    for title in dict.fromkeys(books):
        name = book_name(title)
        prefixes[name] = str(output / f"{name}_text_document")
        documents = [i for i, book in enumerate(books) if book == title]
        with IndexedDatasetWriter(prefixes[name], corpus.dtype) as writer:
            for i in documents:
                writer.add_document(corpus[i])
        write_sidecar(prefixes[name], tokenizer, {"source": f"the bundled Austen corpus, {title}"}, len(documents),
                      int(sum(len(corpus[i]) for i in documents)))
    return prefixes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--output", required=True, help="folder for the datasets (created)")
    args = parser.parse_args(argv)
    for name, prefix in split_by_book(Path(args.output)).items():
        print(f"{name}: {prefix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
