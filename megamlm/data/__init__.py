"""Data: Megatron's indexed format, tokenizers, packed samples, blending and the batch sampler.

The package's face, one line each (the modules hold the rest):

    IndexedDataset, IndexedDatasetWriter, best_dtype   Megatron's .bin/.idx files (indexed.py)
    DataError                                          a bad or mismatched data file; the message names the fix
    load_tokenizer                                     tokenizer.json, tiktoken and sentencepiece files (tokenizer.py)
    prepare_embedded_corpus                            the bundled Austen corpus, tokenized once (embedded.py)
    StreamSpec, build_train_dataset,                   the sample streams of a run from its --data-path (build.py)
      build_validation_dataset
    PackedSampleDataset, BlendedDataset                one corpus's samples (samples.py); a blend (blending.py)
    GlobalBatchSampler, MicroBatchLoader               each rank's share of each global batch (sampler.py)
"""

from megamlm.data.blending import BlendedDataset
from megamlm.data.build import StreamSpec, build_train_dataset, build_validation_dataset
from megamlm.data.embedded import prepare_embedded_corpus
from megamlm.data.indexed import DataError, IndexedDataset, IndexedDatasetWriter, best_dtype
from megamlm.data.sampler import GlobalBatchSampler, MicroBatchLoader
from megamlm.data.samples import PackedSampleDataset
from megamlm.data.tokenizer import load_tokenizer

__all__ = [
    "BlendedDataset",
    "DataError",
    "GlobalBatchSampler",
    "IndexedDataset",
    "IndexedDatasetWriter",
    "MicroBatchLoader",
    "PackedSampleDataset",
    "StreamSpec",
    "best_dtype",
    "build_train_dataset",
    "build_validation_dataset",
    "load_tokenizer",
    "prepare_embedded_corpus",
]
