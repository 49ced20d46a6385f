"""Issue 44, item 4: --rampup-batch-size START INCREMENT SAMPLES with Megatron's semantics: each step's global batch
from one function (config/rampup.py), the sample stream consumed in order, exact across a resume mid-ramp; bad
ramps refused in one line before any work."""

from types import SimpleNamespace

import pytest
from helpers import TINY_SHAPE, expect_one_line
from step_recorder import StepRecorder

from megamlm.cli import main
from megamlm.config import BatchSizes, parse_args
from megamlm.data import GlobalBatchSampler
from megamlm.training.trainer import pretrain

# (global, micro, data-parallel, START, INCREMENT, SAMPLES): ramps whose per-increment sample count is whole, is
# not, is shorter than one batch (sizes skipped), and outlasts the run.
RAMPS = [(64, 4, 1, 16, 16, 960), (48, 2, 2, 8, 4, 1000), (32, 4, 2, 8, 8, 20), (1152, 12, 8, 96, 96, 200_000)]


def megatron_sizes(global_, micro, dp, start, increment, samples, steps):
    """The global batch of each step by megatron-core's ramp-up calculator, updated with the consumed samples before
    each step as Megatron's training loop does."""
    calculators = pytest.importorskip("megatron.core.num_microbatches_calculator",
                                      reason="megatron-core is in the [test] extra")
    calculator = calculators.RampupBatchsizeNumMicroBatchesCalculator(global_, micro, dp, False, 0, start, increment,
                                                                      samples)
    sizes, consumed = [], 0
    for _ in range(steps):
        calculator.update(consumed, True)
        size = calculator.get_current_global_batch_size()
        assert calculator.get() == size // (micro * dp)  # its micro-batches per rank: megamlm's split too
        sizes.append(size)
        consumed += size
    return sizes


@pytest.mark.parametrize("ramp", RAMPS, ids=lambda r: "-".join(map(str, r)))
def test_batch_sizes_per_step_are_megatrons_over_a_whole_schedule(ramp):
    """Issue 44 acceptance: every step's global batch equals megatron-core's calculator's, through the ramp and past
    it."""
    global_, micro, dp, start, increment, samples = ramp
    steps = 2 * samples // start + 10
    ours = BatchSizes(global_, (start, increment, samples)).sizes(steps).tolist()
    assert ours == megatron_sizes(global_, micro, dp, start, increment, samples, steps)
    assert ours[0] == start and ours[-1] == global_


def test_without_a_ramp_every_step_takes_the_global_batch():
    t = parse_args(["--global-batch-size", "12", "--micro-batch-size", "4"]).training
    assert BatchSizes.of(t).sizes(5).tolist() == [12] * 5 and BatchSizes.of(t).describe() is None


def test_the_sampler_consumes_the_stream_in_order_under_a_ramp_on_every_rank():
    sizes = [4, 4, 8, 8, 12]
    ranks = [GlobalBatchSampler(36, 12, 2, dp_rank=r, dp_size=2, batch_sizes=sizes) for r in range(2)]
    batches = [list(r) for r in ranks]
    flat = [[k for mb in batches[0][i] + batches[1][i] for k in mb] for i in range(len(sizes))]
    assert flat == [list(range(0, 4)), list(range(4, 8)), list(range(8, 16)), list(range(16, 24)),
                    list(range(24, 36))]
    assert [len(b) for b in batches[0]] == [1, 1, 2, 2, 3]  # micro-batches of 2 per rank
    assert ranks[0].consumed_samples == 36
    # A sampler built where a checkpoint left off (after step 3) continues with the rest of the same batches.
    resumed = GlobalBatchSampler(36, 12, 2, consumed_samples=16, batch_sizes=sizes[3:])
    assert [[k for mb in b for k in mb] for b in resumed] == flat[3:]


FLAGS = [*TINY_SHAPE, "--micro-batch-size", "2", "--global-batch-size", "12", "--rampup-batch-size", "4", "4", "24",
         "--train-iters", "8", "--lr-warmup-iters", "2", "--lr-wsd-decay-iters", "2", "--log-interval", "1"]


def run(*argv):
    recorder = StepRecorder()
    result = pretrain(parse_args(FLAGS + [str(a) for a in argv]), on_step=recorder)
    return SimpleNamespace(**vars(result), **vars(recorder))


def test_a_run_stopped_mid_ramp_resumes_to_the_straight_run_bitwise(cache_dir, tmp_path):
    """Issue 44 acceptance: the steps take the ramp's sizes, read the stream in order, and a run resumed inside the
    ramp (after step 3 of sizes 4, 4, 4, 8, 8, 12, 12, 12) equals the straight run bitwise on CPU."""
    import json

    full = run("--save", tmp_path / "full", "--save-interval", "3")
    sizes = [len(full.sample_ids[step]) for step in range(1, 9)]
    assert sizes == BatchSizes(12, (4, 4, 24)).sizes(8).tolist() == [4, 4, 4, 8, 8, 12, 12, 12]
    assert [k for step in range(1, 9) for k in full.sample_ids[step]] == list(range(sum(sizes)))
    saved = json.loads((tmp_path / "full" / "iter_0000003" / "train_state.json").read_text())
    assert saved["state"]["progress"] == {"step": 3, "consumed_samples": 12}  # the contract: samples consumed
    resumed = run("--load", tmp_path / "full" / "iter_0000003", "--save", tmp_path / "resumed")
    assert resumed.start_step == 3 and sorted(resumed.losses) == list(range(4, 9))
    for step in range(4, 9):
        assert resumed.sample_ids[step] == full.sample_ids[step], step
        assert resumed.losses[step] == full.losses[step], step  # bitwise on CPU


@pytest.mark.parametrize("argv,message", [
    (["--global-batch-size", "16", "--rampup-batch-size", "4", "5", "64"],
     "--global-batch-size 16 - START 4 = 12 is not a multiple of INCREMENT 5"),
    (["--global-batch-size", "16", "--rampup-batch-size", "16", "4", "64"], "not below --global-batch-size 16"),
    (["--global-batch-size", "16", "--rampup-batch-size", "4", "4"], "argument --rampup-batch-size: expected 3 "
     "arguments"),  # --help names them: --rampup-batch-size START INCREMENT SAMPLES
    (["--global-batch-size", "16", "--rampup-batch-size", "4", "4", "0"], "must be positive"),
    (["--global-batch-size", "16", "--micro-batch-size", "4", "--rampup-batch-size", "6", "2", "64"],
     "takes global batch 6, not a multiple of --micro-batch-size 4 x data-parallel size 1"),
    (["--global-batch-size", "16", "--micro-batch-size", "4", "--rampup-batch-size", "4", "4", "64", "--pp", "2",
      "--world-size", "2", "--dry-run", "--num-layers", "2"],
     "--rampup-batch-size starts at global 4 = 1 micro-batches"),
    (["--lr-wsd-decay-style", "sqrt"], "argument --lr-wsd-decay-style: invalid choice: 'sqrt'"),
])
def test_a_bad_ramp_or_decay_style_is_one_line_before_any_work(capsys, tmp_path, argv, message):
    save = tmp_path / "never"
    expect_one_line(capsys, main([*TINY_SHAPE, *argv, "--save", str(save)]), message)
    assert not save.exists()


def test_an_unset_micro_batch_is_fitted_to_the_ramp_too(capsys):
    """The micro-batch left unset splits every batch of the ramp (4, 8, 12 and 16 here), and without a ramp it is
    fitted as before."""
    ramped = parse_args(["--global-batch-size", "16", "--rampup-batch-size", "4", "4", "64"]).training
    assert (ramped.micro_batch_size, ramped.global_batch_size) == (4, 16)
    assert "fitted to DP 1 and to --rampup-batch-size from 4" in capsys.readouterr().out
    plain = parse_args(["--global-batch-size", "16"]).training
    assert (plain.micro_batch_size, plain.global_batch_size) == (16, 16)
