"""tests/forked_python.py runs a command as its own process would: arguments, folder, environment, output, exit
status, threads joined and atexit handlers run before it ends, and a command past its timeout killed."""

import subprocess
import sys

import pytest
from forked_python import run_python

LIGHT = ("json",)  # a server that preloads next to nothing: these tests check the forking, not torch


def test_a_command_sees_its_arguments_folder_and_environment(tmp_path):
    code = "import os, sys; print(sys.argv[1:], os.getcwd(), os.environ['ONLY_HERE'])"
    done = run_python(["-c", code, "a", "b"], cwd=tmp_path, env={"ONLY_HERE": "yes"}, preload=LIGHT)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"['a', 'b'] {tmp_path} yes\n", "")


def test_a_script_runs_as_main_with_its_folder_first_on_the_path(tmp_path):
    (tmp_path / "helper_module.py").write_text("VALUE = 7\n")
    (tmp_path / "script.py").write_text("import helper_module, sys\n"
                                        "if __name__ == '__main__':\n"
                                        "    sys.exit(helper_module.VALUE)\n")
    assert run_python([tmp_path / "script.py"], cwd=tmp_path, preload=LIGHT).returncode == 7


def test_it_ends_as_python_ends(tmp_path):
    code = ("import atexit, sys, threading, time\n"
            "atexit.register(lambda: print('atexit'))\n"
            "threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()\n"
            "sys.exit('a message')\n")
    done = run_python(["-c", code], cwd=tmp_path, preload=LIGHT)
    assert (done.returncode, done.stdout, done.stderr) == (1, "thread\natexit\n", "a message\n")
    crashed = run_python(["-c", "raise ValueError('boom')"], cwd=tmp_path, preload=LIGHT)
    assert crashed.returncode == 1 and crashed.stderr.startswith("Traceback") and "ValueError: boom" in crashed.stderr


def test_a_command_past_its_timeout_is_killed_and_the_server_goes_on(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        run_python(["-c", "import time; print('started', flush=True); time.sleep(600)"], cwd=tmp_path, timeout=1,
                   preload=LIGHT)
    assert run_python(["-c", "print('next')"], cwd=tmp_path, preload=LIGHT).stdout == "next\n"


def test_hiding_packages_needs_a_server_without_megamlm(tmp_path):
    with pytest.raises(ValueError, match="preload=TORCH"):
        run_python(["-c", "pass"], cwd=tmp_path, hide="gguf")
    hidden = run_python(["-c", "import importlib.util as u; print(u.find_spec('json'), u.find_spec('csv'))"],
                        cwd=tmp_path, preload=(), hide="csv", env={"PYTHONPATH": sys.path[0]})
    assert hidden.stdout.split()[-1] == "None" and hidden.stdout.startswith("ModuleSpec"), hidden
