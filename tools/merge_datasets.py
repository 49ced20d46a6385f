"""Merge several .bin/.idx pairs (e.g. the shards of tools/preprocess_data.py) into one.

    python tools/merge_datasets.py --input out/corpus_00000_text_document out/corpus_00001_text_document \\
        --output-prefix out/corpus_text_document
    python tools/merge_datasets.py --input out/shards/ --output-prefix out/corpus_text_document

A folder as --input merges every .idx/.bin pair in it, in name order (Megatron's merge tool does
the same). Documents keep their order; all inputs must share one token dtype.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.log import quiet_imports  # noqa: E402

quiet_imports()  # before transformers is imported: known third-party import noise (megamlm/log.py)

from megamlm.errors import UserError  # noqa: E402
from megamlm.data.indexed import DataError, IndexedDataset, IndexedDatasetWriter, strip_suffix  # noqa: E402
from megamlm.data.sidecar import write_merged_sidecar  # noqa: E402


def input_prefixes(inputs: list[str]) -> list[str]:
    prefixes = []
    for item in inputs:
        if os.path.isdir(item):
            found = sorted(str(p.with_suffix("")) for p in Path(item).glob("*.idx"))
            if not found:
                raise DataError(f"folder {item} holds no .idx files to merge")
            prefixes.extend(found)
        else:
            prefixes.append(strip_suffix(item))
    return prefixes


def merge(prefixes: list[str], output_prefix: str) -> IndexedDataset:
    datasets = [IndexedDataset(p) for p in prefixes]  # opens and checks every input first
    if strip_suffix(output_prefix) in {d.prefix for d in datasets}:
        raise DataError(f"--output-prefix {output_prefix} is one of the inputs; choose a new name")
    dtypes = {d.dtype for d in datasets}
    if len(dtypes) > 1:
        raise DataError(
            f"inputs have different token dtypes ({', '.join(sorted(map(str, dtypes)))}); "
            f"they were tokenized with different vocabularies and cannot be merged"
        )
    with IndexedDatasetWriter(output_prefix, datasets[0].dtype) as writer:
        for dataset in datasets:
            writer.add_index(dataset.prefix)
    write_merged_sidecar([d.prefix for d in datasets], output_prefix)  # when one tokenizer made every input
    return IndexedDataset(output_prefix)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", nargs="+", required=True, help="dataset prefixes, or folders of .bin/.idx pairs")
    parser.add_argument("--output-prefix", required=True, help="writes <prefix>.bin and <prefix>.idx")
    args = parser.parse_args(argv)
    try:
        prefixes = input_prefixes(args.input)
        merged = merge(prefixes, args.output_prefix)
    except UserError as error:  # a missing optional package too
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"merged {len(prefixes)} datasets: {len(merged):,} sequences, {merged.num_documents:,} documents, "
          f"{merged.num_tokens:,} tokens -> {merged.prefix}.bin/.idx")
    return 0


if __name__ == "__main__":
    sys.exit(main())
