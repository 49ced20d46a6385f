"""The sample contract across phases (megamlm/data/phase_streams.py): one segment is the one-phase stream bitwise; a
corpus read again continues its stream where the earlier phases left it, at the same or another sequence length,
with no token read twice within an epoch; the stream is a pure function of the recipe (built twice, or for a longer
run, the same samples)."""

import numpy as np
import pytest

from megamlm.data import PackedSampleDataset, StreamSpec, build_train_dataset
from megamlm.data.indexed import IndexedDataset
from megamlm.data.phase_streams import RecipeStreamSpec, StreamSegment, build_recipe_dataset
from tests.helpers import write_dataset

SEED = 7


def unique_corpus(path, first_id: int, count: int, seed: int) -> str:
    """Documents of 3-40 tokens whose token ids are all different (an id names its place in the corpus)."""
    rng = np.random.default_rng(seed)
    docs, next_id = [], first_id
    for _ in range(count):
        length = int(rng.integers(3, 40))
        docs.append(np.arange(next_id, next_id + length))
        next_id += length
    return write_dataset(path, docs, np.int32)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("phases")
    return {name: unique_corpus(folder / name, 1_000_000 * (i + 1), 200, i) for i, name in enumerate("ABC")}


def build(*segments):
    return build_recipe_dataset(RecipeStreamSpec(tuple(segments), SEED))


def samples(dataset, first, end):
    return [dataset[k] for k in range(first, end)]


def tokens_of(arrays) -> list[int]:
    return [int(t) for a in arrays for t in a]


def test_one_segment_is_the_one_phase_stream_bitwise(corpora):
    blend = ("0.6", corpora["A"], "0.4", corpora["B"])
    recipe = build(StreamSegment(blend, 16, 0, 120))
    plain = build_train_dataset(StreamSpec(blend, 16, 120, SEED))
    assert type(recipe) is type(plain)
    assert all(np.array_equal(a, b) for a, b in zip(samples(recipe, 0, 120), samples(plain, 0, 120)))


def test_a_corpus_read_again_at_the_same_length_continues_its_stream(corpora):
    a = corpora["A"]
    recipe = build(StreamSegment((a,), 16, 0, 30), StreamSegment(("0.5", a, "0.5", corpora["B"]), 16, 30, 70))
    own = PackedSampleDataset(IndexedDataset(a), 16, 100, SEED)
    second = [recipe[k] for k in range(30, 70)]
    from_a = [s for s in second if s[0] < 2_000_000]
    assert len(from_a) == 20
    assert all(np.array_equal(s, own[30 + n]) for n, s in enumerate(from_a))  # samples 30, 31, ... of A's stream


def test_another_length_reads_the_rest_of_the_epoch_then_the_next_epochs(corpora):
    a = corpora["A"]
    own16 = PackedSampleDataset(IndexedDataset(a), 16, 1, SEED)
    own64 = PackedSampleDataset(IndexedDataset(a), 64, 400, SEED)
    recipe = build(StreamSegment((a,), 16, 0, 100), StreamSegment((a,), 64, 100, 300))
    total = own16.tokens_per_epoch
    first, later = tokens_of(samples(recipe, 0, 100)), samples(recipe, 100, 300)
    # The rest of epoch 0: windows of 64 from documents that no window of 16 touched, then epoch 1 at 64 as is.
    head = next(i for i in range(len(later)) if np.array_equal(later[i], own64[own64.windows_per_epoch]))
    epoch0 = first + tokens_of(later[:head])
    assert len(epoch0) == len(set(epoch0)), "a token of epoch 0 read twice"
    assert len(epoch0) > 0.6 * total  # most of the epoch is read before the next one starts
    assert all(np.array_equal(s, own64[own64.windows_per_epoch + n]) for n, s in enumerate(later[head:]))


def test_three_lengths_and_a_corpus_in_between_never_repeat_a_token_within_the_epoch(corpora):
    a, b = corpora["A"], corpora["B"]
    recipe = build(StreamSegment((a,), 16, 0, 60), StreamSegment(("0.5", a, "0.5", b), 32, 60, 100),
                   StreamSegment((a,), 64, 100, 120))
    read = [t for t in tokens_of(samples(recipe, 0, 120)) if t < 2_000_000]
    assert len(read) == len(set(read))
    b_read = [t for t in tokens_of(samples(recipe, 60, 100)) if t >= 2_000_000]
    assert len(b_read) == 20 * 32


def test_the_stream_is_a_pure_function_of_the_recipe(corpora):
    a, b, c = corpora["A"], corpora["B"], corpora["C"]
    segments = [StreamSegment((a,), 16, 0, 40), StreamSegment(("0.7", a, "0.3", b), 64, 40, 80)]
    once = samples(build(*segments, StreamSegment((c,), 64, 80, 100)), 0, 100)
    again = samples(build(*segments, StreamSegment((c,), 64, 80, 100)), 0, 100)
    longer = samples(build(*segments, StreamSegment((c,), 64, 80, 160)), 0, 100)  # a longer run: the same prefix
    assert all(np.array_equal(x, y) and np.array_equal(x, z) for x, y, z in zip(once, again, longer))
