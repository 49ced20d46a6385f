"""A run's log before its first step: the batch sizes it chose, the memory estimate, then step 1 starting."""


def test_the_log_names_the_chosen_batch_the_memory_and_step_1_before_the_first_step(cache_dir, capsys):
    from helpers import TINY_SHAPE

    from megamlm.cli import main

    assert main([*TINY_SHAPE, "--train-iters", "2", "--log-interval", "1"]) == 0
    out = capsys.readouterr().out
    order = [out.index(line) for line in (
        "--micro-batch-size and --global-batch-size not given: global 16 = micro 16 x DP 1 x 1 micro-batches",
        "] estimated memory per device: ", "] step 1/2 starting", "] step 1/2 | objective mlm")]
    assert order == sorted(order)


def test_the_log_describes_the_lr_schedule_and_names_a_wsd_length_another_style_ignores(cache_dir, capsys):
    from helpers import TINY_SHAPE

    from megamlm.cli import main

    assert main([*TINY_SHAPE, "--train-iters", "2", "--lr", "1e-3", "--lr-warmup-iters", "1",
                 "--lr-decay-style", "cosine", "--lr-wsd-decay-iters", "1"]) == 0
    out = capsys.readouterr().out
    assert ("] learning rate 0.001: 1 warmup step, then cosine decay to 0 at step 2 (--lr-wsd-decay-iters unused: it "
            "sets the decay of --lr-decay-style wsd, and this run's style is cosine)") in out
