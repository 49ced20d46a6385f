"""Two gloo processes: rank 0 builds the cached index while rank 1 waits, then both read the same
samples; their data-parallel slices of each global batch together make the whole batch."""

import os

import numpy as np
import pytest
from helpers import free_port, write_dataset

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.slow]  # two fresh torch processes: ~15-60 s


def worker(rank, world, port, prefix, cache, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        from megamlm.data import GlobalBatchSampler, MicroBatchLoader, StreamSpec, build_train_dataset

        dataset = build_train_dataset(StreamSpec([prefix], 16, 64, seed=11, cache_dir=cache), group=dist.group.WORLD)
        sampler = GlobalBatchSampler(64, 16, 4, dp_rank=rank, dp_size=world)
        rows = []
        for batch in MicroBatchLoader(dataset, sampler):
            for micro in batch:
                rows.append(np.concatenate([micro["sample_ids"].numpy()[:, None], micro["tokens"].numpy()], axis=1))
        np.save(os.path.join(out, f"rank{rank}.npy"), np.concatenate(rows))
    finally:
        dist.destroy_process_group()


def test_two_ranks_share_one_cache_and_split_each_batch(tmp_path, make_documents):
    from megamlm.data import StreamSpec, build_train_dataset

    write_dataset(tmp_path / "d", make_documents())
    cache = tmp_path / "cache"
    mp.spawn(worker, args=(2, free_port(), str(tmp_path / "d"), str(cache), str(tmp_path)), nprocs=2)
    assert len(list(cache.glob("index-*-description.json"))) == 1
    reference = build_train_dataset(StreamSpec([str(tmp_path / "d")], 16, 64, seed=11))  # one process, no cache
    ranks = [np.load(tmp_path / f"rank{r}.npy") for r in range(2)]
    for rows in ranks:
        for row in rows:
            np.testing.assert_array_equal(row[1:], reference[int(row[0])])
    for b in range(4):
        ids = np.concatenate([ranks[r][b * 8 : (b + 1) * 8, 0] for r in range(2)])
        assert ids.tolist() == list(range(b * 16, (b + 1) * 16))
