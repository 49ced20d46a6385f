"""The training loop keeps no per-step history: peak host memory does not grow with the number of steps."""

import os
import subprocess
import sys
from pathlib import Path

from helpers import TINY_SHAPE

REPO = Path(__file__).resolve().parents[2]
PEAK = r'''
import resource, runpy, sys
sys.argv = ["pretrain.py", *sys.argv[1:]]
try:
    runpy.run_path(sys.argv.pop(1), run_name="__main__")
except SystemExit as exit:
    assert not exit.code, exit.code
print("PEAK_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
'''
SMALL = [*TINY_SHAPE, "--global-batch-size", "2", "--micro-batch-size", "2", "--log-interval", "500"]


def peak_kib(steps: list[int], cache_dir: str, tmp_path: Path) -> list[int]:
    """The peak resident memory of one run of each length in ``steps``, started side by side (each is its own process,
    whose peak its neighbour does not change; one thread each)."""
    env = {**os.environ, "MEGAMLM_CACHE": cache_dir, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    runs = [subprocess.Popen([sys.executable, "-c", PEAK, str(REPO / "pretrain.py"), *SMALL, "--train-iters", str(n),
                              "--save", str(tmp_path / f"run{n}"), "--save-interval", "500", "--keep-last", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for n in steps]
    try:
        outputs = [run.communicate(timeout=600) for run in runs]
    finally:
        for run in runs:
            run.kill()  # a no-op on a finished run; the other one when one failed
    for run, (_, err) in zip(runs, outputs):
        assert run.returncode == 0, err
    return [int(out.split("PEAK_KB")[1]) for out, _ in outputs]


def test_peak_host_memory_of_1200_steps_is_that_of_200(cache_dir, tmp_path):
    short, long = peak_kib([200, 1200], cache_dir, tmp_path)
    # 2000 against 200 steps measured 0.9 MB apart on 2 cores; torch itself keeps ~50 bytes per linear
    # forward/backward (tracemalloc). The bound catches any history over 4 KiB a step (4 MiB over 1000 steps).
    assert long - short < 4 * 1024, (short, long)
