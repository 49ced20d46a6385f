"""Merge several .bin/.idx pairs (e.g. the shards of tools/preprocess_data.py) into one.

    python tools/merge_datasets.py --input out/corpus_00000_text_document out/corpus_00001_text_document \\
        --output-prefix out/corpus_text_document
    python tools/merge_datasets.py --input out/shards/ --output-prefix out/corpus_text_document

A folder as --input merges every .idx/.bin pair in it, in name order (Megatron's merge tool does
the same). Documents keep their order; all inputs must share one token dtype, and inputs whose sidecars name
different tokenizers are refused. An existing output is replaced only with --force (the new files are renamed
into place once whole).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.log import quiet_imports  # noqa: E402

quiet_imports()  # before transformers is imported: known third-party import noise (megamlm/log.py)

from megamlm.data.indexed import DataError, IndexedDataset, IndexedDatasetWriter, strip_suffix  # noqa: E402
from megamlm.data.sidecar import check_one_tokenizer, sidecar_path, write_merged_sidecar  # noqa: E402
from megamlm.errors import UserError, exit_line  # noqa: E402


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


def merge(prefixes: list[str], output_prefix: str, force: bool = False) -> IndexedDataset:
    datasets = [IndexedDataset(p) for p in prefixes]  # opens and checks every input first
    if strip_suffix(output_prefix) in {d.prefix for d in datasets}:
        raise DataError(f"--output-prefix {output_prefix} is one of the inputs; choose a new name")
    output = strip_suffix(output_prefix)
    existing = [path for path in (output + ".bin", output + ".idx", str(sidecar_path(output))) if os.path.exists(path)]
    if existing and not force:
        raise DataError(f"output {existing[0]} already exists; pass --force to replace it, or choose another "
                        "--output-prefix")
    check_one_tokenizer([d.prefix for d in datasets])
    dtypes = {d.dtype for d in datasets}
    if len(dtypes) > 1:
        raise DataError(
            f"inputs have different token dtypes ({', '.join(sorted(map(str, dtypes)))}); "
            f"they were tokenized with different vocabularies and cannot be merged"
        )
    with IndexedDatasetWriter(output_prefix, datasets[0].dtype) as writer:
        for dataset in datasets:
            writer.add_index(dataset.prefix)
    if write_merged_sidecar([d.prefix for d in datasets], output_prefix) is None:  # inputs without sidecars
        sidecar_path(output).unlink(missing_ok=True)  # --force: the replaced dataset's record does not describe this
    return IndexedDataset(output_prefix)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--input", nargs="+", required=True, help="dataset prefixes, or folders of .bin/.idx pairs")
    parser.add_argument("--output-prefix", required=True, help="writes <prefix>.bin and <prefix>.idx")
    parser.add_argument("--force", action="store_true", help="replace an existing dataset at --output-prefix")
    args = parser.parse_args(argv)
    try:
        prefixes = input_prefixes(args.input)
        merged = merge(prefixes, args.output_prefix, force=args.force)
    except (UserError, OSError) as error:
        return exit_line(error)
    print(f"merged {len(prefixes)} datasets: {len(merged):,} sequences, {merged.num_documents:,} documents, "
          f"{merged.num_tokens:,} tokens -> {merged.prefix}.bin/.idx")
    return 0


if __name__ == "__main__":
    sys.exit(main())
