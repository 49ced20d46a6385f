"""``python SCRIPT ARGS`` without paying for ``import torch`` every time.

Importing torch and the parts of torch.distributed megamlm uses takes 5-8 s of CPU on CI's 2 cores, more than most
of the commands the tests run as a user would. A server process imports them once; each command then runs in a
child forked from it: its own process, with the command's arguments, folder, environment, stdin/stdout/stderr and
exit status, that ends as Python ends (non-daemon threads joined, atexit handlers run), minus the imports already
done. Tests of what a fresh interpreter does (start-up imports, peak memory, signals, torchrun) start real
processes instead.

What a server preloads is part of its identity: ``TORCH`` (torch and its distributed modules, nothing of megamlm)
for programs run with optional packages hidden (tests/hide_extras.py), so that megamlm's own imports still run
under the hiding; ``MEGAMLM`` adds the megamlm modules every entry point shares. So are the environment variables
read while importing (thread counts, the import path): a command with other values gets a server of its own.

A command run this way is not a child of pytest: ``--cpu-durations`` does not count its CPU time.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent
TORCH = ("torch", "torch.distributed.checkpoint", "torch.distributed.pipelining", "torch.distributed.tensor",
         "torch.distributed.fsdp")
MEGAMLM = (*TORCH, "megamlm.cli", "megamlm.hf.export", "megamlm.study.planning.plan")
IMPORT_TIME_VARIABLES = ("PYTHONPATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED")

SERVER = r"""
import importlib, json, os, runpy, sys
answers = os.fdopen(os.dup(1), "w")  # child pids and exit statuses; anything else printed here goes to stderr
os.dup2(2, 1)
for name in filter(None, sys.argv[1].split(",")):
    importlib.import_module(name)
base_path = list(sys.path[1:])
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid:
        print(json.dumps(pid), file=answers, flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps(os.waitstatus_to_exitcode(status)), file=answers, flush=True)
        continue
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, job["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, job["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        os.dup2(os.open(path, flags), fd)
    if job["hide"]:
        sys.path.insert(0, job["tests"])
        from hide_extras import hidden_names, hide
        hide(hidden_names(job["hide"]))
    script = job["argv"][0]
    sys.argv = job["argv"]
    sys.path[:] = [os.path.dirname(os.path.abspath(script)), *base_path]
    code = 0
    try:
        if script == "-c":
            sys.argv = ["-c", *job["argv"][2:]]
            exec(compile(job["argv"][1], "<string>", "exec"), {"__name__": "__main__"})
        else:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        code = stop.code
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    # What the interpreter's exit does that a program can see: non-daemon threads joined, atexit handlers run,
    # streams flushed, a message exit code printed; then out, without tearing down the modules (seconds with torch).
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    import atexit, threading
    threading._shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)
"""


class Server:
    def __init__(self, preload: tuple[str, ...], env: dict):
        self.process = subprocess.Popen([sys.executable, "-c", SERVER, ",".join(preload)], env=env, cwd=TESTS,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.outputs = tempfile.TemporaryDirectory(prefix="megamlm-forked-")

    def alive(self) -> bool:
        return self.process.poll() is None

    def run(self, argv: list[str], cwd, env: dict, timeout: float, hide: str | None) -> subprocess.CompletedProcess:
        out, err = Path(self.outputs.name) / "stdout", Path(self.outputs.name) / "stderr"
        job = {"argv": [str(a) for a in argv], "cwd": str(cwd), "env": env, "out": str(out), "err": str(err),
               "hide": hide, "tests": str(TESTS)}
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        pid = self._answer(None)
        try:
            status = self._answer(timeout)
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
            self._answer(None)
            raise subprocess.TimeoutExpired(argv, timeout, out.read_text(), err.read_text()) from None
        return subprocess.CompletedProcess(argv, status, out.read_text(), err.read_text())

    def _answer(self, timeout: float | None):
        if timeout is not None and not select.select([self.process.stdout], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired("forked python", timeout)
        line = self.process.stdout.readline()
        if not line:
            raise AssertionError(f"the preloaded Python stopped (exit {self.process.wait()})")
        return json.loads(line)

    def close(self) -> None:
        if self.alive():
            self.process.stdin.close()
            self.process.wait(timeout=60)
        self.outputs.cleanup()


_SERVERS: dict[tuple, Server] = {}


def run_python(argv: list, cwd, env: dict | None = None, timeout: float = 900, preload: tuple[str, ...] = MEGAMLM,
               hide: str | None = None) -> subprocess.CompletedProcess:
    """``python *argv`` (a script and its arguments, or ``-c CODE ARGS``) in ``cwd`` with ``env`` (default: this
    process's), as ``subprocess.run(..., capture_output=True, text=True)`` would return it; ``hide``: the
    packages tests/hide_extras.py hides first (``all`` or a comma-separated list), with ``preload=TORCH``."""
    if hide and any(name.startswith("megamlm") for name in preload):
        raise ValueError("hiding packages from megamlm needs a server that has not imported megamlm: preload=TORCH")
    env = dict(os.environ if env is None else env)
    key = (preload, *(env.get(name) for name in IMPORT_TIME_VARIABLES))
    server = _SERVERS.get(key)
    if server is None or not server.alive():
        server = _SERVERS[key] = Server(preload, env)
    return server.run(list(argv), cwd, env, timeout, hide)


def close_servers() -> None:
    for server in _SERVERS.values():
        server.close()
    _SERVERS.clear()
