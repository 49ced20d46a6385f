"""Weighted blends of corpora with Megatron's `--data-path 0.7 a 0.3 b` syntax."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from megamlm.data._helpers_loader import helpers_for
from megamlm.data.index_cache import INDEX_FORMAT_VERSION, CacheEntry, cached_entries, in_range
from megamlm.data.indexed import DataError


def parse_data_path(data_path: Sequence[str]) -> tuple[list[float] | None, list[str]]:
    """Split Megatron's --data-path list into (weights or None, prefixes).

    `["a"]` and `["a", "b"]` (no weights) are one corpus, its files concatenated;
    `["0.7", "a", "0.3", "b"]` is a blend; weights need not sum to 1.
    """
    items = [str(x) for x in data_path]
    if not items:
        raise DataError("--data-path is empty; give a dataset prefix, or weight/prefix pairs such as 0.7 a 0.3 b")

    def is_number(text: str) -> bool:
        try:
            float(text)
            return True
        except ValueError:
            return False

    if not any(is_number(x) for x in items):
        return None, items
    if len(items) % 2 or not all(is_number(w) for w in items[0::2]):
        raise DataError(
            f"--data-path {' '.join(items)} does not parse: a blend alternates weight and prefix "
            f"(e.g. 0.7 corpusA_text_document 0.3 corpusB_text_document)"
        )
    weights = [float(w) for w in items[0::2]]
    prefixes = items[1::2]
    if any(not np.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
        raise DataError(f"blend weights {weights} must be finite, non-negative and not all zero")
    return weights, prefixes


def normalize_weights(weights: Sequence[float]) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    return w / w.sum()


def build_blend_index_numpy(weights: Sequence[float], num_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """(dataset of each blended sample, its sample number within that dataset).

    Dataset d's n-th sample is due at time (n + 0.5) / w_d; blended samples follow due times,
    ties going to the lower dataset number. After i samples every dataset has had
    round(w_d * i) of them, give or take one. The order is prefix-stable: the first m entries
    built for any num_samples >= m are the same.
    """
    w = normalize_weights(weights)
    times, owners, numbers = [], [], []
    for d, weight in enumerate(w):
        if weight == 0:
            continue
        # Enough candidates: the first num_samples due times all lie below num_samples + len(w) / 2.
        count = min(num_samples, int(np.ceil(weight * (num_samples + len(w)))) + 2)
        n = np.arange(count, dtype=np.int64)
        times.append((n + 0.5) / weight)
        owners.append(np.full(count, d, dtype=np.int16))
        numbers.append(n)
    order = np.argsort(np.concatenate(times), kind="stable")[:num_samples]
    return np.concatenate(owners)[order], np.concatenate(numbers)[order]


def build_blend_index(weights: Sequence[float], num_samples: int, use_cpp: bool | None = None):
    """`build_blend_index_numpy`'s arrays, from the C++ helper when it is built."""
    helpers = helpers_for(use_cpp)
    if helpers is not None:
        owner = np.empty(num_samples, dtype=np.int16)
        number = np.empty(num_samples, dtype=np.int64)
        helpers.build_blend_index(normalize_weights(weights), owner, number)
        return owner, number
    return build_blend_index_numpy(weights, num_samples)


def load_or_build_blend_index(weights, num_samples, cache_dir=None, rank=None, barrier=None, use_cpp=None):
    """The first `num_samples` entries of the blend interleave, cached like the sample index.

    The interleave is a function of the normalized weights alone and prefix-stable (entry i does
    not depend on how many entries are built), so the cache entry is named by the weights only:
    an entry at least `num_samples` long is reused (its first `num_samples` entries), a shorter
    one is rebuilt to `num_samples`.
    """
    num_samples = int(num_samples)
    description = {
        "format_version": INDEX_FORMAT_VERSION,
        "weights": [float(w) for w in normalize_weights(weights)],
    }

    def valid(arrays) -> bool:
        owner, number = arrays
        return (owner.ndim == 1 and owner.shape == number.shape
                and in_range(owner, 0, len(description["weights"])) and in_range(number, 0, len(owner)))

    entry = CacheEntry(description, lambda: build_blend_index(weights, num_samples, use_cpp=use_cpp), valid,
                       enough=lambda arrays: len(arrays[0]) >= num_samples)
    [(owner, number)] = cached_entries(cache_dir, "blend", ("owner", "number"), [entry], rank, barrier)
    return owner[:num_samples], number[:num_samples]


class SampleLocator:
    """A dataset whose samples are held by other datasets: ``_locate(k)`` says which holds sample k, and where."""

    def _locate(self, k: int):
        raise NotImplementedError

    def __getitem__(self, k: int) -> np.ndarray:
        dataset, j = self._locate(int(k))
        return dataset[j]

    def document_ids(self, k: int) -> np.ndarray:
        dataset, j = self._locate(int(k))
        return dataset.document_ids(j)

    def sample_documents(self, k: int):
        dataset, j = self._locate(int(k))
        return dataset.sample_documents(j)


class BlendedDataset(SampleLocator):
    """Sample k of the blend is sample `sample_in_dataset[k]` of `datasets[dataset_of[k]]`.

    Each component is a PackedSampleDataset, whose sample j depends only on its files, the seed
    and seq_length; with the prefix-stable interleave, blended sample k is the same whatever the
    number of samples a run asks for.
    """

    def __init__(self, datasets: Sequence, dataset_of: np.ndarray, sample_in_dataset: np.ndarray, seq_length: int):
        self.datasets = list(datasets)
        self.dataset_of = dataset_of
        self.sample_in_dataset = sample_in_dataset
        self.seq_length = seq_length

    def __len__(self) -> int:
        return len(self.dataset_of)

    def first_pass_samples(self) -> int:
        """How many leading samples (of those built) come from the first epoch of their corpus."""
        repeated = [np.flatnonzero((self.dataset_of == d) & (self.sample_in_dataset >= part.windows_per_epoch))
                    for d, part in enumerate(self.datasets) if part is not None]
        return min([len(self), *(int(r[0]) for r in repeated if len(r))])

    def _locate(self, k: int):
        if not 0 <= k < len(self):
            raise IndexError(f"sample {k} out of range for {len(self)} samples")
        return self.datasets[int(self.dataset_of[k])], int(self.sample_in_dataset[k])
