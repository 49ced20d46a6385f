"""Only global rank 0 takes the --save lock; every rank learns the outcome and stops (or goes on) together."""

import json
import signal
import subprocess
import sys
from pathlib import Path

from harness import spawn
from lock_checks import every_rank_learns_the_lock_outcome

REPO = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from megamlm.checkpoint.lock import SaveFolderLock
SaveFolderLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def outcomes(folder: Path) -> list[dict]:
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(2)]


def test_two_ranks_stop_together_while_another_run_holds_the_folder_and_go_on_together_once_it_is_gone(tmp_path):
    save, out = tmp_path / "save", tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(save)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        spawn(every_rank_learns_the_lock_outcome, 2, str(save), str(out))
        for outcome in outcomes(out):
            assert "held" not in outcome
            assert outcome["error"].startswith(f"--save {save} is in use by another run (pid {holder.pid} ")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    spawn(every_rank_learns_the_lock_outcome, 2, str(save), str(out))
    assert [o.get("held") for o in outcomes(out)] == [True, True]
