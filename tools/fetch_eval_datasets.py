"""Download the paper's evaluation datasets into the Hugging Face cache (run it where the network is,
e.g. a cluster's login node), or also write `save_to_disk` copies for tools/evaluate.py --hf-datasets-dir.

    python tools/fetch_eval_datasets.py sst2,squad,msmarco
    python tools/fetch_eval_datasets.py all --save-to /data/hf_datasets
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.log import quiet_imports  # noqa: E402

quiet_imports()  # before transformers is imported: known third-party import noise (megamlm/log.py)

from megamlm.errors import exit_line  # noqa: E402
from megamlm.eval.paper_datasets import PAPER_DATASETS  # noqa: E402
from megamlm.extras import MissingExtra, require  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    p.add_argument("names", help=f"comma-separated dataset names, or all ({', '.join(PAPER_DATASETS)})")
    p.add_argument("--save-to", type=Path, help="also write save_to_disk copies here, one folder per Hub "
                                                "dataset/config")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    names = list(PAPER_DATASETS) if args.names == "all" else [n.strip() for n in args.names.split(",") if n.strip()]
    unknown = [n for n in names if n not in PAPER_DATASETS]
    if unknown:
        print(f"error: unknown datasets {unknown}; use names from: {', '.join(PAPER_DATASETS)}", file=sys.stderr)
        return 2
    try:
        datasets = require("datasets", "downloading the paper's datasets")
    except MissingExtra as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    groups: dict[tuple, dict] = {}
    for name in names:
        for source in PAPER_DATASETS[name].sources:
            print(f"{name}: {source.call()}", flush=True)
            split = datasets.load_dataset(source.path, source.name, split=source.split)
            groups.setdefault((source.path, source.name, source.folder_name()), {})[source.split] = split
    try:
        for (_, _, folder), splits in (groups.items() if args.save_to else ()):
            target = args.save_to / folder
            tmp = target.with_name(target.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            datasets.DatasetDict(splits).save_to_disk(str(tmp))
            shutil.rmtree(target, ignore_errors=True)
            tmp.rename(target)
            print(f"wrote {target}", flush=True)
    except OSError as error:
        return exit_line(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
