import numpy as np
import pytest

from megamlm.data import DataError, GlobalBatchSampler, IndexedDataset, IndexedDatasetWriter, MicroBatchLoader
from megamlm.data.samples import PackedSampleDataset


def flatten(global_batch):
    return [k for micro in global_batch for k in micro]


def test_global_batches_and_data_parallel_slices():
    gbs, mbs, dp = 12, 2, 3
    samplers = [GlobalBatchSampler(60, gbs, mbs, dp_rank=r, dp_size=dp) for r in range(dp)]
    per_rank = [list(s) for s in samplers]
    assert all(len(batches) == 5 for batches in per_rank)
    for b in range(5):
        micro = per_rank[0][b]
        assert len(micro) == gbs // dp // mbs and all(len(m) == mbs for m in micro)
        union = [k for r in range(dp) for k in flatten(per_rank[r][b])]
        assert union == list(range(b * gbs, (b + 1) * gbs))  # rank r holds the r-th contiguous slice
    assert [s.state_dict() for s in samplers] == [{"consumed_samples": 60}] * 3


def test_resume_continues_the_same_sequence():
    full = [flatten(b) for b in GlobalBatchSampler(64, 8, 2)]
    sampler = GlobalBatchSampler(64, 8, 2)
    it = iter(sampler)
    first = [flatten(next(it)) for _ in range(3)]
    state = sampler.state_dict()
    assert state == {"consumed_samples": 24}
    resumed = GlobalBatchSampler(64, 8, 2)
    resumed.load_state_dict(state)
    assert len(resumed) == 5
    assert first + [flatten(b) for b in resumed] == full
    assert [flatten(b) for b in GlobalBatchSampler(64, 8, 2, consumed_samples=24)] == full[3:]


def test_micro_batch_size_does_not_change_the_global_batches():
    for mbs in (1, 2, 4):
        assert [flatten(b) for b in GlobalBatchSampler(32, 8, mbs, dp_rank=1, dp_size=2)] == [
            list(range(b * 8 + 4, b * 8 + 8)) for b in range(4)
        ]


def test_bad_settings():
    with pytest.raises(DataError, match="not divisible"):
        GlobalBatchSampler(100, 10, 4)
    with pytest.raises(DataError, match="multiple of 8"):
        GlobalBatchSampler(100, 12, 4, dp_size=2)
    with pytest.raises(DataError, match="outside"):
        GlobalBatchSampler(100, 8, 4, dp_rank=2, dp_size=2)
    with pytest.raises(DataError, match="whole number of global batches"):
        GlobalBatchSampler(100, 8, 4, consumed_samples=12)


@pytest.fixture
def dataset(tmp_path, make_documents):
    with IndexedDatasetWriter(tmp_path / "d", np.uint16) as writer:
        for doc in make_documents():
            writer.add_document(doc)
    return PackedSampleDataset(IndexedDataset(tmp_path / "d"), 16, 48, seed=0)


def collect(loader):
    return [[{k: v.clone() for k, v in micro.items()} for micro in batch] for batch in loader]


def test_loader_order_is_independent_of_workers(dataset):
    plain = collect(MicroBatchLoader(dataset, GlobalBatchSampler(48, 8, 2)))
    workers = collect(MicroBatchLoader(dataset, GlobalBatchSampler(48, 8, 2), num_workers=2))
    assert len(plain) == 6 and len(plain[0]) == 4
    for batch_a, batch_b in zip(plain, workers):
        for a, b in zip(batch_a, batch_b):
            assert a.keys() == b.keys() == {"tokens", "document_ids", "sample_ids"}
            for key in a:
                assert (a[key] == b[key]).all()
    first = plain[1][0]
    assert first["sample_ids"].tolist() == [8, 9]
    assert (first["tokens"][0].numpy() == dataset[8]).all()
    assert (first["document_ids"][1].numpy() == dataset.document_ids(9)).all()


def test_loader_advances_consumed_samples_per_delivered_batch(dataset):
    sampler = GlobalBatchSampler(48, 8, 2)
    seen = []
    for batch in MicroBatchLoader(dataset, sampler, num_workers=2):
        seen.append(sampler.state_dict()["consumed_samples"])
        if len(seen) == 2:
            break
    assert seen == [8, 16]
    rest = collect(MicroBatchLoader(dataset, GlobalBatchSampler(48, 8, 2, consumed_samples=16)))
    assert rest[0][0]["sample_ids"].tolist() == [16, 17]


def test_loader_needs_enough_samples(dataset):
    with pytest.raises(DataError, match="num_samples"):
        MicroBatchLoader(dataset, GlobalBatchSampler(96, 8, 2))
