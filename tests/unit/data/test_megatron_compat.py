"""Byte-level compatibility with megatron-core's IndexedDataset (a test dependency: pip install megatron-core)."""

import json
import warnings

import numpy as np
import pytest
from helpers import write_dataset

from megamlm.data import IndexedDataset, IndexedDatasetWriter, best_dtype
from megamlm.data.preprocess import PreprocessSettings, preprocess

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    mcore = pytest.importorskip("megatron.core.datasets.indexed_dataset", reason="megatron-core is not installed")
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("ignore")  # megatron-core warns about optional accelerators


@pytest.fixture
def documents(make_documents):
    docs = make_documents(vocab=60000, max_len=300)
    docs.append(np.arange(200000) % 60000)  # a very long document
    return docs


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_megamlm_files_open_in_megatron(tmp_path, documents, dtype):
    write_dataset(tmp_path / "ours", documents, dtype)
    theirs = mcore.IndexedDataset(str(tmp_path / "ours"))
    assert len(theirs) == len(documents)
    assert theirs.index.dtype == dtype
    np.testing.assert_array_equal(theirs.document_indices, np.arange(len(documents) + 1))
    for i, doc in enumerate(documents):
        np.testing.assert_array_equal(theirs[i], doc)
    np.testing.assert_array_equal(theirs.get(len(documents) - 1, offset=1000, length=50), documents[-1][1000:1050])


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_megatron_files_open_in_megamlm_and_bytes_match(tmp_path, documents, dtype):
    builder = mcore.IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=dtype)
    for doc in documents:
        builder.add_document(torch.tensor(np.asarray(doc, dtype=np.int64)), [len(doc)])
    builder.add_item(torch.tensor([1, 2, 3]))  # a document of two sequences, Megatron's add_item style
    builder.add_item(torch.tensor([4]))
    builder.end_document()
    builder.finalize(str(tmp_path / "theirs.idx"))
    ours = IndexedDataset(tmp_path / "theirs")
    assert len(ours) == len(documents) + 2 and ours.num_documents == len(documents) + 1
    for i, doc in enumerate(documents):
        np.testing.assert_array_equal(ours[i], doc)
    assert ours[len(documents)].tolist() == [1, 2, 3]

    with IndexedDatasetWriter(tmp_path / "ours", dtype) as writer:
        for doc in documents:
            writer.add_document(doc)
        writer.add_item([1, 2, 3])
        writer.add_item([4])
        writer.end_document()
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"ours{suffix}").read_bytes() == (tmp_path / f"theirs{suffix}").read_bytes()


def test_dtype_choice_matches_megatron():
    for vocab in (256, 8192, 65499, 65500, 128256, None):
        assert best_dtype(vocab) == mcore.DType.optimal_dtype(vocab)


def test_preprocess_writes_megatron_bytes(tmp_path, llama3_dir, austen_jsonl):
    """Our tool against the encoding loop of Megatron's tools/preprocess_data.py (HuggingFaceTokenizer:
    AutoTokenizer(text).input_ids, eod = eos appended, IndexedDatasetBuilder) on the same records."""
    transformers = pytest.importorskip("transformers")
    with open(austen_jsonl) as f:
        records = [json.loads(next(f)) for _ in range(200)]
    records[3]["text"] = ""
    records[4]["text"] = " ".join(r["text"] for r in records[:60])  # a long document
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(llama3_dir))
    eod = tokenizer.eos_token_id
    dtype = mcore.DType.optimal_dtype(len(tokenizer))
    builder = mcore.IndexedDatasetBuilder(str(tmp_path / "megatron_text_document.bin"), dtype=dtype)
    for record in records:
        ids = tokenizer(record["text"]).input_ids
        lengths = [len(ids)] if ids else []
        if ids:
            ids.append(eod)
            lengths[-1] += 1
        builder.add_document(torch.tensor(ids, dtype=torch.int64), lengths)
    builder.finalize(str(tmp_path / "megatron_text_document.idx"))

    preprocess(PreprocessSettings(
        inputs=[str(source)], output_prefix=str(tmp_path / "ours"), tokenizer_model=str(llama3_dir),
        tokenizer_type="HuggingFaceTokenizer", append_eod=True, workers=2, progress=False,
    ))
    for suffix in (".bin", ".idx"):
        ours = (tmp_path / f"ours_text_document{suffix}").read_bytes()
        assert ours == (tmp_path / f"megatron_text_document{suffix}").read_bytes()
