"""Corpus -> Megatron `.bin/.idx`: the engine behind tools/preprocess_data.py.

Documents are encoded the way Megatron's tools/preprocess_data.py encodes them, so the same
tokenizer gives the same bytes: a text field that is a string becomes one sequence, a list
of strings one sequence per non-empty string; `append_eod` adds the eod (eos) token to the
last sequence of a non-empty document; an empty text makes a document with no sequence.

Tokenizer types and what each does per text, as Megatron's tokenizer of that name does:
HuggingFaceTokenizer `tokenizer(text).input_ids` (the tokenizer.json post-processor applies),
GPTSentencePieceTokenizer `encode_as_ids(text)`, Llama2Tokenizer `[bos] + encode(text)`.
`TiktokenBPE` (megamlm's name: Megatron's TikTokenizer reads a JSON vocabulary shifted past its
special tokens, another format) encodes with a tiktoken BPE text file's own ranks.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import multiprocessing
import os
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
from tqdm import tqdm

from megamlm import extras
from megamlm.data.indexed import DataError, IndexedDataset, IndexedDatasetWriter, best_dtype
from megamlm.data.sidecar import SIDECAR_SUFFIX, write_sidecar
from megamlm.data.tokenizer import load_tokenizer
from megamlm.errors import os_error_text

# --tokenizer-type names accepted, and the tokenizer kind each maps to (see the module docstring).
TOKENIZER_TYPES = {
    "HuggingFaceTokenizer": "huggingface",
    "GPTSentencePieceTokenizer": "sentencepiece",
    "Llama2Tokenizer": "sentencepiece",
    "TiktokenBPE": "tiktoken",
}
# Megatron types whose encoding megamlm does not reproduce, with what to use instead.
UNSUPPORTED_TYPES = {
    "TikTokenizer": "TiktokenBPE (a tiktoken BPE text file, ids as ranked in the file)",
    "SentencePieceTokenizer": "GPTSentencePieceTokenizer (Megatron's SentencePieceTokenizer adds its own special ids)",
    "GPT2BPETokenizer": "HuggingFaceTokenizer with a tokenizer.json",
    "BertWordPieceLowerCase": "HuggingFaceTokenizer with a tokenizer.json",
    "BertWordPieceCase": "HuggingFaceTokenizer with a tokenizer.json",
}
INPUT_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst", ".parquet")
CHUNK_DOCUMENTS = 256


@dataclass
class PreprocessSettings:
    inputs: list[str]
    output_prefix: str
    tokenizer_model: str
    tokenizer_type: str = "HuggingFaceTokenizer"
    json_keys: list[str] = field(default_factory=lambda: ["text"])
    append_eod: bool = False
    prepend_bos: bool = False
    workers: int = 1
    shard_documents: int | None = None
    log_interval: int = 1000  # documents between rate updates (Megatron's --log-interval)
    progress: bool = True
    force: bool = False  # replace existing outputs at --output-prefix (refused otherwise)


def check_settings(s: PreprocessSettings) -> None:
    """Every user error, raised before any work starts."""
    if s.tokenizer_type in UNSUPPORTED_TYPES:
        raise DataError(f"--tokenizer-type {s.tokenizer_type} is not supported; use "
                        f"{UNSUPPORTED_TYPES[s.tokenizer_type]}")
    if s.tokenizer_type not in TOKENIZER_TYPES:
        raise DataError(
            f"--tokenizer-type {s.tokenizer_type} is not supported; use one of {', '.join(TOKENIZER_TYPES)}"
        )
    if not s.inputs:
        raise DataError("no --input given")
    for path in s.inputs:
        if not os.path.isfile(path):
            raise DataError(f"input {path} not found")
        if not path.endswith(INPUT_SUFFIXES):
            raise DataError(f"input {path}: expected one of {', '.join(INPUT_SUFFIXES)}")
        if path.endswith(".zst"):
            _require("zstandard", path)
        if path.endswith(".parquet"):
            _require("pyarrow", path)
    if not os.path.exists(s.tokenizer_model):
        raise DataError(f"--tokenizer-model {s.tokenizer_model} not found")
    if s.workers < 1:
        raise DataError(f"--workers must be at least 1, got {s.workers}")
    if s.shard_documents is not None and s.shard_documents < 1:
        raise DataError(f"--shard-documents must be at least 1, got {s.shard_documents}")
    if not s.json_keys:
        raise DataError("--json-keys is empty")
    folder = Path(s.output_prefix).parent
    blocker = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise DataError(f"--output-prefix {s.output_prefix}: {blocker} is a file, not a folder; choose another "
                        "--output-prefix")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataError(f"cannot create the folder of --output-prefix {s.output_prefix}: {os_error_text(err)}; "
                        "choose another --output-prefix") from None
    if not os.access(folder, os.W_OK):
        raise DataError(f"cannot write to {folder}; choose another --output-prefix")
    existing = existing_outputs(s)
    if existing and not s.force:
        raise DataError(f"output {existing[0]} already exists; pass --force to replace it, or choose another "
                        "--output-prefix")


def _require(module: str, path: str) -> None:
    extras.require(module, f"reading {path}")


def output_prefix(base: str, key: str, shard: int | None) -> str:
    """Megatron's name `<prefix>_<key>_document`, with `_<shard>` before the key when sharded."""
    if shard is None:
        return f"{base}_{key}_document"
    return f"{base}_{shard:05d}_{key}_document"


OUTPUT_SUFFIXES = (".bin", ".idx", SIDECAR_SUFFIX)


def existing_outputs(s: PreprocessSettings) -> list[str]:
    """Files at --output-prefix this run would write or leave beside its own: every key's pair and sidecar, all
    shards of a sharded output (another shard count leaves none of an earlier run's shards behind)."""
    found = []
    for key in s.json_keys:
        if s.shard_documents:
            pattern = glob.escape(s.output_prefix) + f"_[0-9][0-9][0-9][0-9][0-9]_{glob.escape(key)}_document"
            prefixes = sorted({p[: -len(suffix)] for suffix in OUTPUT_SUFFIXES for p in glob.glob(pattern + suffix)})
        else:
            prefixes = [output_prefix(s.output_prefix, key, None)]
        found += [prefix + suffix for prefix in prefixes for suffix in OUTPUT_SUFFIXES
                  if os.path.exists(prefix + suffix)]
    return found


# ---- reading --------------------------------------------------------------------------------


def _open_binary(path: str):
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    if path.endswith(".zst"):
        zstandard = extras.require("zstandard", f"reading {path}")

        return io.BufferedReader(zstandard.open(path, "rb"))
    return open(path, "rb")


def _decode(path: str, number: int, line: bytes) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path} line {number} is not UTF-8 text (byte 0x{line[err.start]:02x} at column "
                        f"{err.start + 1}); re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8) or drop "
                        "that line") from None


def read_chunks(paths: list[str], json_keys: list[str]) -> Iterator[tuple[str, int, list]]:
    """(file, line number of the first record, records): jsonl lines stay strings (parsed in
    the workers); parquet rows become dicts of the json keys. A damaged input is a DataError naming it."""
    for path in paths:
        try:
            yield from _file_chunks(path, json_keys)
        except DataError:
            raise
        except OSError as err:
            if err.errno is not None:  # an I/O error of the file system (entry points name it with its errno)
                raise
            raise _damaged_input(path, err) from None
        except Exception as err:
            if not _is_damage(err):
                raise
            raise _damaged_input(path, err) from None


def _is_damage(err: Exception) -> bool:
    """What a corrupt .gz / .zst / parquet raises while it is read (gzip's EOFError and zlib.error, zstandard's
    ZstdError, pyarrow's ArrowException)."""
    return isinstance(err, (EOFError, zlib.error)) or type(err).__module__.split(".")[0] in (
        "pyarrow", "zstd", "zstandard")


def _damaged_input(path: str, err: Exception) -> DataError:
    first_line = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
    name = type(err).__name__ if type(err).__name__ != "error" else f"{type(err).__module__}.error"  # zlib.error
    kind = "parquet" if path.endswith(".parquet") else "gzip" if path.endswith(".gz") else \
        "zstandard" if path.endswith(".zst") else "jsonl"
    return DataError(f"{path} is not a readable {kind} file ({name}: {first_line}); it is truncated "
                     "or damaged: copy or download it again, or drop it from --input")


def _file_chunks(path: str, json_keys: list[str]) -> Iterator[tuple[str, int, list]]:
    if path.endswith(".parquet"):
        pq = extras.require("pyarrow", f"reading {path}").parquet
        table = pq.ParquetFile(path)
        missing = [k for k in json_keys if k not in table.schema_arrow.names]
        if missing:
            raise DataError(f"{path} has no column {missing[0]!r}; columns are {table.schema_arrow.names}")
        row = 1
        for batch in table.iter_batches(batch_size=CHUNK_DOCUMENTS, columns=json_keys):
            records = batch.to_pylist()
            yield path, row, records
            row += len(records)
        return
    with _open_binary(path) as f:
        chunk, first = [], 1
        for number, raw in enumerate(f, 1):
            line = _decode(path, number, raw)
            if not line.strip():
                continue
            if not chunk:
                first = number
            chunk.append(line)
            if len(chunk) == CHUNK_DOCUMENTS:
                yield path, first, chunk
                chunk = []
        if chunk:
            yield path, first, chunk


# ---- encoding (runs in worker processes) ------------------------------------------------------

_worker: dict = {}


def _init_worker(settings: PreprocessSettings) -> None:
    if _worker.get("settings") == settings:
        return  # a forked worker inherits the tokenizer the parent loaded
    tokenizer = load_tokenizer(settings.tokenizer_model, kind=TOKENIZER_TYPES[settings.tokenizer_type])
    _worker["tokenizer"] = tokenizer
    _worker["settings"] = settings
    _worker["dtype"] = best_dtype(tokenizer.vocab_size)


def _encode_chunk(task):
    path, first, records = task
    settings: PreprocessSettings = _worker["settings"]
    tokenizer = _worker["tokenizer"]
    add_special = settings.tokenizer_type == "HuggingFaceTokenizer"  # Megatron calls tokenizer(text)
    texts, owners, text_bytes = [], [], 0
    for i, record in enumerate(records):
        if isinstance(record, str):
            text_bytes += len(record.encode("utf-8"))
            try:
                record = json.loads(record)
            except ValueError as error:
                return DataError(f"{path} record at line {first + i}: not valid JSON ({error}); fix or drop that line")
        for key in settings.json_keys:
            if not isinstance(record, dict) or key not in record:
                return DataError(f"{path} record at line/row {first + i} has no {key!r} field; set --json-keys to the "
                                 "text field")
            text = record[key]
            sentences = text if isinstance(text, list) else [text]
            if not all(isinstance(t, str) for t in sentences):
                return DataError(f"{path} record at line/row {first + i}: field {key!r} is not text")
            if not isinstance(records[i], str):
                text_bytes += sum(len(t.encode("utf-8")) for t in sentences)
            texts.extend(sentences)
            owners.append((i, key, len(sentences)))
    encoded_all = tokenizer.encode_batch(texts, add_special)  # one call: the tokenizer batches internally
    if settings.tokenizer_type == "Llama2Tokenizer":  # Megatron's Llama2Tokenizer.tokenize(s, bos=True)
        encoded_all = [[tokenizer.bos_id, *ids] for ids in encoded_all]
    documents = [dict() for _ in records]
    position = 0
    for i, key, count in owners:
        encoded = [ids for ids in encoded_all[position : position + count] if ids]
        position += count
        if settings.prepend_bos and encoded:
            encoded[0] = [tokenizer.bos_id, *encoded[0]]
        if settings.append_eod and encoded:
            encoded[-1] = [*encoded[-1], tokenizer.eos_id]
        lengths = [len(ids) for ids in encoded]
        flat = (np.concatenate([np.asarray(ids, dtype=np.int64) for ids in encoded]) if encoded
                else np.zeros(0, np.int64))
        documents[i][key] = (flat.astype(_worker["dtype"]), lengths)
    return documents, text_bytes


# ---- driver -----------------------------------------------------------------------------------


def sidecar_settings(settings: PreprocessSettings) -> dict:
    """What the sidecar records of the run that made a dataset (megamlm.data.sidecar)."""
    return {"tool": "tools/preprocess_data.py", "inputs": [os.path.basename(p) for p in settings.inputs],
            "tokenizer_type": settings.tokenizer_type, "json_keys": list(settings.json_keys),
            "append_eod": settings.append_eod, "prepend_bos": settings.prepend_bos}


@dataclass
class Summary:
    documents: int = 0
    empty_documents: int = 0
    tokens: int = 0
    input_bytes: int = 0
    output_bytes: int = 0
    seconds: float = 0.0
    """Wall time from the start (``started``) to the last output finalized."""
    outputs: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def elapsed(self) -> float:
        """Seconds since the start: the one clock of the progress bar's rates and the summary's."""
        return self.seconds or time.perf_counter() - self.started

    def rates(self) -> str:
        """``574,000 tok/s, 3.1 MB/s``: tokens and input text per second of ``elapsed`` (one definition)."""
        seconds = max(self.elapsed(), 1e-9)
        return f"{self.tokens / seconds:,.0f} tok/s, {self.input_bytes / seconds / 1e6:,.1f} MB/s"

    def line(self) -> str:
        rate = max(self.seconds, 1e-9)
        return (
            f"{self.documents:,} documents ({self.empty_documents:,} empty), {self.tokens:,} tokens, "
            f"{self.input_bytes / 1e6:,.1f} MB text -> {self.output_bytes / 1e6:,.1f} MB in {len(self.outputs)} "
            f"file pair(s), {self.seconds:.1f} s: {self.documents / rate:,.0f} docs/s, {self.rates()}"
        )


class _Progress:
    """A tqdm bar over documents; tokens/s and MB/s are refreshed every `interval` documents."""

    def __init__(self, enabled: bool, interval: int):
        self.bar = None
        self.interval = max(1, interval)
        self.next_update = self.interval
        if enabled:
            self.bar = tqdm(unit="doc", file=sys.stderr, mininterval=1.0, dynamic_ncols=True)

    def update(self, documents: int, summary: Summary) -> None:
        if self.bar is None:
            return
        self.bar.update(documents)
        if summary.documents >= self.next_update:
            self.bar.set_postfix_str(summary.rates(), refresh=False)
            self.next_update = summary.documents + self.interval

    def close(self, summary: Summary) -> None:
        """Close the bar showing the final rates, the summary line's."""
        if self.bar is not None:
            self.bar.set_postfix_str(summary.rates(), refresh=False)
            self.bar.close()


def preprocess(settings: PreprocessSettings) -> Summary:
    check_settings(settings)
    replaced = existing_outputs(settings)  # with --force: what an earlier run left at --output-prefix
    _init_worker(settings)  # also loads the tokenizer once here, so a bad file fails before the pool starts
    dtype = _worker["dtype"]
    summary = Summary()
    shard = 0 if settings.shard_documents else None
    writers: dict[str, IndexedDatasetWriter] = {}
    finished: list[IndexedDatasetWriter] = []

    def open_writers():
        for key in settings.json_keys:
            writers[key] = IndexedDatasetWriter(output_prefix(settings.output_prefix, key, shard), dtype)

    pool = None
    tasks = read_chunks(settings.inputs, settings.json_keys)
    # Pool.imap would read the whole input ahead into memory; this bounds the chunks in flight.
    in_flight = threading.BoundedSemaphore(4 * settings.workers)

    def bounded(iterator):
        for task in iterator:
            in_flight.acquire()
            yield task

    if settings.workers > 1:
        context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
        pool = context.Pool(settings.workers, initializer=_init_worker, initargs=(settings,))
        results = pool.imap(_encode_chunk, bounded(tasks), chunksize=1)
    else:
        results = map(_encode_chunk, bounded(tasks))
    progress = _Progress(settings.progress, settings.log_interval)
    open_writers()
    in_shard = 0
    try:
        for result in results:
            in_flight.release()
            if isinstance(result, DataError):
                raise result
            documents, text_bytes = result
            summary.input_bytes += text_bytes
            for document in documents:
                if settings.shard_documents and in_shard == settings.shard_documents:
                    finished.extend(writers.values())
                    for writer in writers.values():
                        writer.finalize()
                    shard += 1
                    in_shard = 0
                    open_writers()
                for key, (ids, lengths) in document.items():
                    writers[key].add_document(ids, lengths)
                    summary.tokens += len(ids)
                summary.documents += 1
                in_shard += 1
                summary.empty_documents += all(len(ids) == 0 for ids, _ in document.values())
            progress.update(len(documents), summary)
        if summary.tokens == 0:
            raise DataError(f"{', '.join(settings.inputs)} gave no tokens ({summary.documents} documents, all empty or "
                            f"without text in --json-keys {' '.join(settings.json_keys)}): nothing to train on; "
                            "check the input files and --json-keys")
        for writer in writers.values():
            writer.finalize()
        finished.extend(writers.values())
        summary.seconds = time.perf_counter() - summary.started
    except BaseException:
        for writer in writers.values():
            writer.abort()
        for writer in finished:  # the shards written before the failure: no partial dataset is left
            for suffix in (".bin", ".idx"):
                if os.path.exists(writer.prefix + suffix):
                    os.remove(writer.prefix + suffix)
        raise
    finally:
        progress.close(summary)
        if pool is not None:
            pool.terminate()
            pool.join()
    tokenizer = _worker["tokenizer"]
    for writer in finished:
        dataset = IndexedDataset(writer.prefix)
        write_sidecar(writer.prefix, tokenizer, sidecar_settings(settings), dataset.num_documents, dataset.num_tokens)
    written = {w.prefix + suffix for w in finished for suffix in OUTPUT_SUFFIXES}
    for path in set(replaced) - written:  # --force: shards of an earlier run beyond this one's count
        os.remove(path)
    summary.outputs = [w.prefix for w in finished]
    summary.output_bytes = sum(os.path.getsize(w.prefix + ".bin") + os.path.getsize(w.prefix + ".idx")
                               for w in finished)
    return summary


