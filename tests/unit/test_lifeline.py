"""A process that calls ``die_with_runner()`` dies when its runner is SIGKILLed,
whether the runner is its parent (PR_SET_PDEATHSIG) or a shell sits between
them (pidfd watch)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO

CHILD = ("import time; from emulator.lifeline import die_with_runner; die_with_runner(); "
         "print('alive', flush=True); time.sleep(120)")
# The runner: starts the child (directly, or through a shell that stays its
# parent), reports the child's pid, then sleeps until killed.
RUNNER = """
import subprocess, sys, time
from emulator.lifeline import child_env
cmd = [sys.executable, "-c", sys.argv[1]]
if sys.argv[2] == "shell":
    cmd = ["sh", "-c", '"$0" -c "$1"; true', *cmd[:1], sys.argv[1]]
p = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.PIPE, text=True)
assert p.stdout.readline().strip() == "alive"
pid = p.pid
if sys.argv[2] == "shell":          # the python under the shell
    pid = int(open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()[0])
print(pid, flush=True)
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].startswith("Z")   # a zombie is dead
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("how", ["direct", "shell"])
def test_child_dies_with_its_runner(how):
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, CHILD, how], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)
    child = int(runner.stdout.readline())
    assert not _gone(child)
    ppid = int(open(f"/proc/{child}/stat").read().split(") ", 1)[1].split()[1])
    assert (ppid == runner.pid) == (how == "direct")
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    deadline = time.monotonic() + 2.0
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _gone(child), f"child {child} outlived its runner ({how})"


def test_without_a_runner_nothing_changes():
    out = subprocess.run([sys.executable, "-c", CHILD.replace("time.sleep(120)", "pass")], cwd=REPO,
                         env={k: v for k, v in os.environ.items() if k != "FABRIC_EMU_RUNNER_PID"},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "alive"
