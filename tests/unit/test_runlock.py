"""The run lock: one holder at a time, named in the refusal; gone with its process."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from emulator.net.runlock import LOCK_DIR_ENV, LOCK_NAME, RunActive, RunLock

# Holds the lock, says so on stdout, then waits for stdin to close.
HOLDER = """
import sys
from emulator.net.runlock import RunLock
lock = RunLock.acquire("exp-a.yaml", "results/a")
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def lock_env(tmp_path, monkeypatch):
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path))
    return {**os.environ, LOCK_DIR_ENV: str(tmp_path)}


def _holder(env) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLDER], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_second_acquire_names_the_holder(lock_env):
    holder = _holder(lock_env)
    try:
        with pytest.raises(RunActive) as e:
            RunLock.acquire("exp-b.yaml", "results/b")
        msg = str(e.value)
        assert f"pid {holder.pid}" in msg and "exp-a.yaml" in msg and "results/a" in msg, msg
        assert msg.endswith("not starting") and "\n" not in msg
        assert RunLock.held() is None
    finally:
        holder.stdin.close()
        holder.wait()
    with RunLock.acquire("exp-b.yaml", "results/b") as lock:    # free once it has exited
        assert RunLock.held() is lock
        assert json.loads(lock.path.read_text())["pid"] == os.getpid()
    assert RunLock.held() is None and lock.path.read_text() == ""


def test_lock_dies_with_a_killed_holder(lock_env, tmp_path):
    holder = _holder(lock_env)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    lock = RunLock.acquire("exp-b.yaml", "results/b")    # no stale lock
    lock.release()
    assert (tmp_path / LOCK_NAME).exists()


def test_refusal_of_a_dead_holder_says_it_is_being_cleaned_up(lock_env):
    """The watchdog of a SIGKILLed run holds its lock while it reaps."""
    holder = _holder(lock_env)
    try:
        with pytest.raises(RunActive) as e:
            RunLock.acquire("exp-b.yaml", "results/b")
        info = {**e.value.info, "pid": 2 ** 22 + 1}     # no such process
        from emulator.net.runlock import describe
        assert "being cleaned up" in describe(info)
    finally:
        holder.stdin.close()
        holder.wait()


def test_one_lock_per_process(lock_env):
    with RunLock.acquire("x", "y"):
        with pytest.raises(RuntimeError):
            RunLock.acquire("x", "y")


class Waits:
    """``runlock``'s clock with its waits seen: ``on_wait`` runs at each (what
    another process does meanwhile); the time is the real one."""

    def __init__(self, on_wait):
        self.on_wait, self.seconds = on_wait, []
        self.monotonic, self.time = time.monotonic, time.time

    def sleep(self, s: float) -> None:
        self.seconds.append(s)
        self.on_wait()
        time.sleep(s)


def test_acquire_waits_briefly_for_the_holder_to_say_who_it_is(lock_env, tmp_path, monkeypatch):
    """A holder between flock and writing its info: the refusal still names it."""
    import fcntl

    from emulator.net import runlock
    fd = os.open(tmp_path / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    # the holder writes who it is while acquire waits for it, however long that takes
    waits = Waits(lambda: os.pwrite(fd, b'{"pid": 1}', 0))
    monkeypatch.setattr(runlock, "time", waits)
    try:
        with pytest.raises(RunActive) as e:
            RunLock.acquire("x", "y")
        assert e.value.info == {"pid": 1} and "pid 1" in str(e.value)
        assert len(waits.seconds) == 1          # it read nothing, waited, read the holder
    finally:
        os.close(fd)


def test_a_new_run_waits_for_a_dead_runs_cleanup_instead_of_refusing(lock_env, tmp_path,
                                                                      monkeypatch):
    """A watchdog holding a killed run's lock (its info names a dead pid)
    while it reaps: acquire waits until it lets go."""
    from emulator.net import runlock
    watchdog = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys\n"
        f"fd = os.open({str(tmp_path / LOCK_NAME)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.pwrite(fd, b'{\"pid\": 4194305}', 0)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert watchdog.stdout.readline().strip() == "held"
    let_go = []

    def reaped():           # the watchdog is done once acquire has waited for it twice
        if len(waits.seconds) == 2:
            let_go.append(True)
            watchdog.stdin.close()
            watchdog.wait()
    waits = Waits(reaped)
    monkeypatch.setattr(runlock, "time", waits)
    with RunLock.acquire("exp-b.yaml", "results/b"):
        assert let_go                                # it had let go first
    assert len(waits.seconds) >= 2
