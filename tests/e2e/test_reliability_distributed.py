"""Two gloo ranks under torchrun: every rank takes the same decision when only one rank sees the problem.

The other tests run pretrain.py itself with FSDP2 over two ranks and signal only one of them, or fill the disk
under rank 0's metrics.jsonl only.

One launch checks: a checkpoint's marker covers every rank's shard; a shard damaged on one rank makes all
ranks fall back to the previous checkpoint; a save failing on one rank fails on all (no hang, old checkpoint
kept); non-finite gradients on one rank skip the update on both; a signal seen by one rank stops both.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY_BATCH, TINY_SHAPE

REPO = Path(__file__).resolve().parents[2]

WORKER = r'''
import errno, json, os, sys
from pathlib import Path
import torch
import torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
from megamlm.checkpoint import CheckpointSaveError, resolve_checkpoint, save_state_checkpoint
from megamlm.checkpoint.integrity import read_marker
from megamlm.training.stopping import ExitSignalHandler, StopPolicy

save = Path(sys.argv[1])
out = {}

def state(value):
    # Each rank owns one tensor, so each rank writes its own shard file.
    return {f"part{rank}": torch.full((64,), float(value + rank))}

for step in (1, 2):
    save_state_checkpoint(save, step, state(step), {"consumed_samples": step}, {"step": step})
marker = read_marker(save / "iter_0000002")
out["marker_files"] = sorted(marker["files"])
out["marker_world_size"] = marker["world_size"]

dist.barrier()
if rank == 1:  # damage rank 1's shard of the newest checkpoint
    shard = save / "iter_0000002" / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[:-4])
dist.barrier()
out["resolved"] = resolve_checkpoint(save).name

import torch.distributed.checkpoint.filesystem as fs
original = fs.FileSystem.create_stream
if rank == 1:
    class Full:
        def __init__(self, cm, path): self.cm, self.path = cm, path
        def __enter__(self): self.stream = self.cm.__enter__(); return self
        def __exit__(self, *exc): return self.cm.__exit__(*exc)
        def write(self, data): raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
        def __getattr__(self, name): return getattr(self.stream, name)
    fs.FileSystem.create_stream = lambda self, path, mode: Full(original(self, path, mode), path)
try:
    save_state_checkpoint(save, 3, state(3), {"consumed_samples": 3}, {"step": 3})
    out["save_error"] = None
except CheckpointSaveError as err:
    out["save_error"] = str(err)
fs.FileSystem.create_stream = original
out["after_failed_save"] = sorted(p.name for p in save.iterdir())

# A non-finite forward on rank 1 only: under FSDP2 both ranks skip the whole update, through the one train_step.
from megamlm.model.config import ModelArgs
from megamlm.model.transformer import Transformer
from megamlm.objectives import MaskingSpec, ObjectiveSchedule
from megamlm.config import ParallelConfig, TrainingConfig, model_section_values
from megamlm.training.startup import resolve_parallel_dims
from megamlm.parallel.parallelize import parallelize
from megamlm.training.optim import build_optimizer
from megamlm.training.step import StepSetup, train_step

cpu = torch.device("cpu")
args = ModelArgs(vocab_size=64, num_layers=1, hidden_size=16, ffn_hidden_size=32, num_attention_heads=2,
                 num_query_groups=2, max_seq_length=8)
dims = resolve_parallel_dims(2, ParallelConfig(), TrainingConfig(micro_batch_size=1, global_batch_size=2),
                             model_section_values(args))
torch.manual_seed(0)
pm = parallelize(Transformer(args), dims, dims.build_mesh("cpu"), cpu)
optimizer = build_optimizer(pm.model, 0.1, 0.1, (0.9, 0.95), 1e-8)
schedule = ObjectiveSchedule("mlm", None, 10, MaskingSpec(0.5, 1.0, 0.0, 0.0, mask_id=1, special_ids=(0, 1),
                                                          random_vocab_size=64), seed=0)
for step, bad in ((1, True), (2, False)):
    tokens = torch.randint(2, 64, (1, 8), generator=torch.Generator().manual_seed(10 * step + rank)).numpy()
    handle = None
    if bad and rank == 1:
        handle = pm.parts[0].register_forward_hook(lambda module, inputs, output: output * float("nan"))
    before = [p.to_local().detach().clone() for p in pm.model.parameters()]
    batch = schedule.make_batch(step, tokens, [2 * step + rank])
    result = train_step(StepSetup.of(pm, cpu, 1.0), optimizer, [batch], 0.1)
    if handle is not None:
        handle.remove()
    out[f"skipped_bad_{bad}"] = not result.applied
    out[f"changed_bad_{bad}"] = any(not torch.equal(a, p.to_local()) for a, p in zip(before, pm.model.parameters()))

signals = ExitSignalHandler()
policy = StopPolicy(signals)
out["no_signal"] = policy.reason_to_stop(1)
if rank == 1:
    signals.received = "SIGUSR1"
out["signal_on_rank1"] = policy.reason_to_stop(2)

Path(sys.argv[2] + f".{rank}.json").write_text(json.dumps(out))
dist.destroy_process_group()
'''


@pytest.mark.slow
def test_two_ranks_agree_on_damaged_checkpoints_failed_saves_nan_skips_and_signals(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(worker), str(tmp_path / "ckpt"), str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = [json.loads((tmp_path / f"out.{rank}.json").read_text()) for rank in (0, 1)]
    for rank, out in enumerate(results):
        assert {"__0_0.distcp", "__1_0.distcp", ".metadata", "train_state.json", "config.json",
                "rng_rank00000.pt", "rng_rank00001.pt"} <= set(
            out["marker_files"]), rank
        assert out["marker_world_size"] == 2
        assert out["resolved"] == "iter_0000001", rank  # rank 0's shard was fine: it still agreed to skip
        assert "No space left on device (ENOSPC)" in out["save_error"], rank
        assert "iter_0000001 is untouched" in out["save_error"]
        assert out["after_failed_save"] == ["iter_0000001", "iter_0000002", "latest_checkpointed_iteration.txt"]
        assert out["skipped_bad_True"] and not out["changed_bad_True"], rank
        assert not out["skipped_bad_False"] and out["changed_bad_False"], rank
        assert out["no_signal"] is None
        assert out["signal_on_rank1"] is not None, rank
    assert results[1]["signal_on_rank1"] == "signal SIGUSR1"
    assert results[0]["signal_on_rank1"] == "a signal on another rank"


PRETRAIN_DRIVER = r'''
import errno, os, sys
from pathlib import Path
Path(os.environ["PID_DIR"], "rank" + os.environ["RANK"]).write_text(str(os.getpid()))
import torch
torch.set_num_threads(1)
if os.environ.get("FULL_DISK_AFTER") and os.environ["RANK"] == "0":  # metrics.jsonl's disk fills on rank 0 only
    from megamlm.training import metrics_file
    real, calls = metrics_file._write_all, []
    def write(fd, data):
        calls.append(1)
        if len(calls) > int(os.environ["FULL_DISK_AFTER"]):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)
    metrics_file._write_all = write
if os.environ.get("HOLD_AFTER_STEP") and os.environ["RANK"] == "1":
    # Rank 1 waits after this step until the test's signal has arrived (rank 0 waits for it in the stop decision's
    # all-reduce): the run cannot finish before the signal.
    import time
    from megamlm.training import stopping
    reason_to_stop = stopping.StopPolicy.reason_to_stop
    def holding(self, step):
        if step == int(os.environ["HOLD_AFTER_STEP"]):
            Path(os.environ["PID_DIR"], "held").write_text(str(step))
            while not self.signals.requested:
                time.sleep(0.01)
        return reason_to_stop(self, step)
    stopping.StopPolicy.reason_to_stop = holding
from megamlm.cli import main
code = main(sys.argv[1:])
Path(os.environ["PID_DIR"], "exit" + os.environ["RANK"]).write_text(str(code))
sys.exit(code)
'''

TINY = [*TINY_SHAPE, *TINY_BATCH, "--train-iters", "6", "--log-interval", "1"]


def two_rank_pretrain(tmp_path, **env_extra) -> tuple[list[str], dict, Path]:
    """(torchrun command of pretrain.py over 2 gloo ranks with the driver above, its environment, --save)."""
    pytest.importorskip("megamlm.parallel.runtime", reason="the trainer's multi-rank path (megamlm.parallel) is absent")
    driver = tmp_path / "driver.py"
    driver.write_text(PRETRAIN_DRIVER)
    save = tmp_path / "ckpt"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PID_DIR": str(tmp_path), **env_extra}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(driver),
               *TINY, "--save", str(save)]
    return command, env, save


@pytest.mark.slow
def test_sigterm_to_one_rank_of_an_fsdp_run_stops_both_after_the_same_step_and_the_relaunch_resumes(tmp_path):
    import signal
    import time

    command, env, save = two_rank_pretrain(tmp_path)
    log_file = tmp_path / "first.log"
    with open(log_file, "w") as out:
        proc = subprocess.Popen(command, env={**env, "HOLD_AFTER_STEP": "2"}, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240  # a guard: the wait ends when step 2 is done and rank 1 waits for the signal
    while not (tmp_path / "held").exists():
        assert proc.poll() is None and time.monotonic() < deadline, log_file.read_text()
        time.sleep(0.05)
    os.kill(int((tmp_path / "rank1").read_text()), signal.SIGTERM)  # rank 0 never sees a signal
    proc.wait(timeout=240)
    log = log_file.read_text()
    assert proc.returncode == 0, log
    stopped = [p.name for p in save.glob("iter_*")]
    assert len(stopped) == 1 and "stopping after step" in log and "a signal on another rank" in log, log
    step = int(stopped[0].removeprefix("iter_"))
    assert step == 2

    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resumed from {save / stopped[0]} at step {step}" in again.stdout
    assert (save / "latest_checkpointed_iteration.txt").read_text() == "6"


@pytest.mark.slow
def test_a_full_disk_seen_by_rank_0_only_stops_both_ranks_with_exit_2_after_the_same_checkpoint(tmp_path):
    command, env, save = two_rank_pretrain(tmp_path, FULL_DISK_AFTER="2")  # steps 1-2 written, step 3's fails
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log
    assert [(tmp_path / f"exit{rank}").read_text() for rank in (0, 1)] == ["2", "2"], log  # not 0 on rank 1
    assert "stopped after step 3: writing metrics.jsonl failed: No space left on device (ENOSPC)" in log, log
    assert "stopped after step 3: a failed write on another rank" in log, log
    assert [p.name for p in save.glob("iter_*")] == ["iter_0000003"], log  # one checkpoint, saved by both ranks
    assert (save / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
