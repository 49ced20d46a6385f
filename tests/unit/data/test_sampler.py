import pytest
from helpers import write_dataset

from megamlm.data import DataError, GlobalBatchSampler, IndexedDataset, MicroBatchLoader
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


@pytest.mark.parametrize("new_gbs", [2, 4, 8])
@pytest.mark.parametrize("dp", [1, 2])
def test_resume_with_another_global_batch_size_continues_the_stream(new_gbs, dp):
    """GBS 4 for 3 steps, then resume with GBS 2, 4 or 8: no sample repeated, none skipped."""
    first = GlobalBatchSampler(3 * 4, 4, 2 // dp, dp_rank=0, dp_size=dp)
    consumed_before = [k for batch in first for k in flatten(batch)]
    state = first.state_dict()
    assert state == {"consumed_samples": 12}
    remaining_steps = 5
    total = state["consumed_samples"] + remaining_steps * new_gbs  # what the trainer passes
    ranks = [GlobalBatchSampler(total, new_gbs, 1, dp_rank=r, dp_size=dp, consumed_samples=12) for r in range(dp)]
    per_rank = [[flatten(b) for b in sampler] for sampler in ranks]
    assert all(len(batches) == remaining_steps for batches in per_rank)
    for step in range(remaining_steps):
        union = [k for r in range(dp) for k in per_rank[r][step]]
        assert union == list(range(12 + step * new_gbs, 12 + (step + 1) * new_gbs))  # rank r: r-th contiguous slice
    if dp == 1:
        assert consumed_before == list(range(12))
    after = [k for step in range(remaining_steps) for r in range(dp) for k in per_rank[r][step]]
    assert after == list(range(12, total))  # continues at 12: no repeat, no gap
    assert [s.state_dict() for s in ranks] == [{"consumed_samples": total}] * dp


def test_consumed_samples_need_not_be_a_multiple_of_the_global_batch_size():
    sampler = GlobalBatchSampler(6 + 3 * 8, 8, 2, consumed_samples=6)  # e.g. 3 steps of GBS 2 before
    assert len(sampler) == 3
    batches = [flatten(b) for b in sampler]
    assert batches == [list(range(6, 14)), list(range(14, 22)), list(range(22, 30))]
    assert sampler.state_dict() == {"consumed_samples": 30} and len(sampler) == 0
    # a stream end that leaves a partial global batch stops before it
    assert [flatten(b) for b in GlobalBatchSampler(29, 8, 2, consumed_samples=6)] == batches[:2]
    # state round trip at an odd position
    resumed = GlobalBatchSampler(30, 8, 2)
    resumed.load_state_dict({"consumed_samples": 14})
    assert [flatten(b) for b in resumed] == batches[1:]


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
    with pytest.raises(DataError, match="exceeds the 100 samples"):
        GlobalBatchSampler(100, 8, 4, consumed_samples=101)
    with pytest.raises(DataError, match="negative"):
        GlobalBatchSampler(100, 8, 4, consumed_samples=-1)


@pytest.fixture
def dataset(tmp_path, make_documents):
    write_dataset(tmp_path / "d", make_documents())
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
    for _batch in MicroBatchLoader(dataset, sampler, num_workers=2):
        seen.append(sampler.state_dict()["consumed_samples"])
        if len(seen) == 2:
            break
    assert seen == [8, 16]
    rest = collect(MicroBatchLoader(dataset, GlobalBatchSampler(48, 8, 2, consumed_samples=16)))
    assert rest[0][0]["sample_ids"].tolist() == [16, 17]


@pytest.mark.parametrize("new_gbs", [2, 8])
def test_loader_resumed_with_another_global_batch_size(dataset, new_gbs):
    """A checkpoint after 3 steps of GBS 4 (consumed 12), resumed with GBS 2 or 8 on two DP ranks."""
    before = GlobalBatchSampler(12, 4, 2)
    ids_before = [k for batch in MicroBatchLoader(dataset, before) for mb in batch for k in mb["sample_ids"].tolist()]
    assert ids_before == list(range(12)) and before.consumed_samples == 12
    total = 12 + 4 * new_gbs
    samplers = [GlobalBatchSampler(total, new_gbs, 1, dp_rank=r, dp_size=2, consumed_samples=12) for r in range(2)]
    loaded = [collect(MicroBatchLoader(dataset, s, num_workers=r)) for r, s in enumerate(samplers)]
    assert [len(batches) for batches in loaded] == [4, 4]
    for step in range(4):
        ids = [k for r in range(2) for mb in loaded[r][step] for k in mb["sample_ids"].tolist()]
        assert ids == list(range(12 + step * new_gbs, 12 + (step + 1) * new_gbs))
        for r in range(2):
            for mb in loaded[r][step]:
                for k, tokens in zip(mb["sample_ids"].tolist(), mb["tokens"]):
                    assert (tokens.numpy() == dataset[k]).all()
    assert [s.consumed_samples for s in samplers] == [total, total]


def test_loader_needs_enough_samples(dataset):
    with pytest.raises(DataError, match="num_samples"):
        MicroBatchLoader(dataset, GlobalBatchSampler(96, 8, 2))
