"""Which tokenizer made a dataset: the small file tools/preprocess_data.py writes beside each .bin/.idx pair.

``<prefix>.megamlm.json`` holds the tokenizer's fingerprint (a hash of its vocabulary, see
``Tokenizer.fingerprint``), vocabulary size, file and type, the preprocessing settings and the counts. The
``.bin``/``.idx`` files stay byte-identical to Megatron's; data without a sidecar (tokenized by Megatron or an
older megamlm) trains as before, checked only by its largest token id.

``check_dataset_files`` runs before a run builds anything: every dataset opens, and data with a sidecar was made
by the tokenizer the run was given (``--tokenizer-model``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from megamlm.data.blending import parse_data_path
from megamlm.data.indexed import DataError, IndexedDataset, require_dataset_files, strip_suffix
from megamlm.data.tokenizer import Tokenizer

SIDECAR_SUFFIX = ".megamlm.json"
SIDECAR_FORMAT = 1


def sidecar_path(prefix: str | os.PathLike) -> Path:
    return Path(strip_suffix(prefix) + SIDECAR_SUFFIX)


def describe_tokenizer(tokenizer: Tokenizer) -> dict:
    return {"fingerprint": tokenizer.fingerprint(), "vocab_size": tokenizer.vocab_size, "path": str(tokenizer.path),
            "kind": tokenizer.kind}


def write_sidecar(prefix: str | os.PathLike, tokenizer: Tokenizer, settings: dict, documents: int,
                  tokens: int) -> Path:
    return _write(prefix, {"format": SIDECAR_FORMAT, "tokenizer": describe_tokenizer(tokenizer),
                           "settings": settings, "documents": documents, "tokens": tokens})


def write_merged_sidecar(inputs: list[str], output: str | os.PathLike) -> Path | None:
    """The sidecar of a merge of ``inputs``: written when every input has one and one tokenizer made them all."""
    records = [read_sidecar(prefix) for prefix in inputs]
    if not records or any(r is None for r in records):
        return None
    if len({r["tokenizer"].get("fingerprint") for r in records}) != 1:
        return None
    return _write(output, {"format": SIDECAR_FORMAT, "tokenizer": records[0]["tokenizer"],
                           "settings": {"tool": "tools/merge_datasets.py",
                                        "inputs": [os.path.basename(strip_suffix(p)) for p in inputs]},
                           "documents": sum(r.get("documents", 0) for r in records),
                           "tokens": sum(r.get("tokens", 0) for r in records)})


def check_one_tokenizer(prefixes: list[str]) -> None:
    """Datasets to be combined (merged) were made by one tokenizer, where their sidecars say; a DataError naming
    two that differ. Data without a sidecar cannot be checked and passes."""
    first = None
    for prefix in prefixes:
        record = read_sidecar(prefix)
        if record is None:
            continue
        if first is None:
            first = (prefix, record["tokenizer"])
        elif record["tokenizer"].get("fingerprint") != first[1].get("fingerprint"):
            a, b = first[1], record["tokenizer"]
            raise DataError(f"{strip_suffix(first[0])} was tokenized by {a.get('path')} ({a.get('vocab_size')} ids, "
                            f"fingerprint {a.get('fingerprint')}) and {strip_suffix(prefix)} by {b.get('path')} "
                            f"({b.get('vocab_size')} ids, {b.get('fingerprint')}): their token ids mean other tokens "
                            "and cannot be combined; re-tokenize one of them with the other's tokenizer")


def _write(prefix: str | os.PathLike, record: dict) -> Path:
    """Written to a temporary name, then renamed: a reader sees no sidecar or a whole one."""
    path = sidecar_path(prefix)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
    os.replace(tmp, path)
    return path


def read_sidecar(prefix: str | os.PathLike) -> dict | None:
    path = sidecar_path(prefix)
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise DataError(f"{path} is unreadable ({err}); delete it (the data then trains unchecked) or re-run "
                        "tools/preprocess_data.py") from None
    if not isinstance(record, dict) or not isinstance(record.get("tokenizer"), dict):
        raise DataError(f"{path} is not a megamlm dataset record; delete it or re-run tools/preprocess_data.py")
    return record


def sidecar_tokenizer(data_path: list[str]) -> tuple[str, str] | None:
    """(tokenizer path, the dataset whose sidecar names it) when every dataset of ``data_path`` has a sidecar, all
    name the same tokenizer file and it exists here; None otherwise (``--tokenizer-model`` is then needed)."""
    _, prefixes = parse_data_path(data_path)
    named = {tokenizer.get("path") for _, tokenizer in sidecar_tokenizers(data_path)}
    if len(sidecar_tokenizers(data_path)) != len(prefixes) or len(named) != 1 or not next(iter(named)):
        return None
    path = next(iter(named))
    return (path, strip_suffix(prefixes[0])) if os.path.exists(path) else None


def sidecar_tokenizers(data_path: list[str]) -> list[tuple[str, dict]]:
    """(dataset, the tokenizer record of its sidecar) of each dataset of ``data_path`` that has a sidecar; a missing
    .idx/.bin is named first (the problem to name, not the tokenizer it would need)."""
    _, prefixes = parse_data_path(data_path)
    found = []
    for prefix in prefixes:
        require_dataset_files(prefix)
        record = read_sidecar(prefix)
        if record is not None:
            found.append((strip_suffix(prefix), record["tokenizer"]))
    return found


def check_dataset_files(data_path: list[str], tokenizer: Tokenizer) -> None:
    """Every dataset of ``data_path`` opens (IndexedDataset names a missing or unreadable file), and each one with a
    sidecar was made by ``tokenizer``."""
    _, prefixes = parse_data_path(data_path)
    for prefix in prefixes:
        IndexedDataset(prefix, validate=False)
        record = read_sidecar(prefix)
        if record is None:
            continue
        made_by = record["tokenizer"]
        if made_by.get("fingerprint") != tokenizer.fingerprint():
            raise DataError(
                f"{strip_suffix(prefix)} was tokenized by {made_by.get('path')} ({made_by.get('vocab_size')} ids, "
                f"vocabulary fingerprint {made_by.get('fingerprint')}; {sidecar_path(prefix).name}), not by "
                f"--tokenizer-model {tokenizer.path} ({tokenizer.vocab_size} ids, {tokenizer.fingerprint()}): its "
                f"token ids mean other tokens. Re-tokenize it with tools/preprocess_data.py --tokenizer-model "
                f"{tokenizer.path}, or pass the tokenizer it was made with as --tokenizer-model")
