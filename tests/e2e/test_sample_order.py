"""The order guarantee: the samples a run consumes do not depend on its objective, loader workers or resumes.

(World size 1 vs 2 is in tests/distributed/.)
"""

import pytest

ITERS = ["--train-iters", "6"]
SWITCH = ["--switch", "0.5"]  # two-phase objectives only (a one-objective run refuses a switch)


@pytest.fixture(scope="module")
def reference_ids(run):
    return run("--objective", "mlm", *ITERS).sample_ids


def test_reference_run_consumes_consecutive_global_batches(reference_ids):
    assert [reference_ids[s] for s in range(1, 7)] == [list(range(8 * (s - 1), 8 * s)) for s in range(1, 7)]


@pytest.mark.parametrize("objective", ["clm", "clm_then_mlm", "mlm_then_clm"])
def test_every_objective_consumes_the_same_samples(run, reference_ids, objective):
    assert run("--objective", objective, *ITERS, *(SWITCH if "_then_" in objective else [])).sample_ids == reference_ids


def test_loader_workers_do_not_change_the_order(run, reference_ids):
    assert run("--objective", "mlm", "--num-workers", "2", *ITERS).sample_ids == reference_ids


def test_a_resumed_run_continues_the_same_order(run, reference_ids, tmp_path):
    run("--objective", "clm_then_mlm", *ITERS, *SWITCH, "--save", tmp_path / "a", "--save-interval", "2")
    resumed = run("--objective", "clm_then_mlm", *ITERS, *SWITCH, "--load", tmp_path / "a" / "iter_0000002",
                  "--save", tmp_path / "b")
    assert {s: resumed.sample_ids[s] for s in range(3, 7)} == {s: reference_ids[s] for s in range(3, 7)}


def test_tokens_of_a_sample_are_the_same_whatever_the_objective(cache_dir):
    """The window is the data; objectives only change inputs/targets built from it."""
    import numpy as np

    from megamlm.data import StreamSpec, build_train_dataset, prepare_embedded_corpus

    prefix, _ = prepare_embedded_corpus()
    a = build_train_dataset(StreamSpec([prefix], seq_length=64, num_samples=48, seed=1234))
    b = build_train_dataset(StreamSpec([prefix], seq_length=64, num_samples=48, seed=1234))
    for k in (0, 7, 47):
        np.testing.assert_array_equal(a[k], b[k])
