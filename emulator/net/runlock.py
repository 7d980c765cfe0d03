"""One fabric at a time: an ``flock`` on a lock file that names the run holding it.

Runs of the same topology use the same interface names, and ``fabric-emu
clean`` removes whatever looks like a fabric, so two fabrics at once wreck
each other. The lock is an ``flock`` on ``/run/fabric-emu/run.lock`` (or
``$TMPDIR/fabric-emu/`` where /run is not writable; ``FABRIC_EMU_LOCK_DIR``
overrides both): the kernel drops it when the last process holding it ends
-- the run, and its watchdog once it has cleaned up after a SIGKILL
(``emulator.net.watchdog``) -- so a killed run leaves no stale lock. The
file's content (JSON: pid, experiment, output directory, start time) names
the holder for the one-line refusal; it is only written under the lock.
"""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from pathlib import Path

from emulator.errors import EnvironmentProblem, FabricEmuError

LOCK_DIR_ENV = "FABRIC_EMU_LOCK_DIR"
LOCK_NAME = "run.lock"
# A holder that has just taken the lock may not have written who it is yet.
INFO_WAIT_S = 1.0
# How long a new run waits for a killed run's watchdog to finish cleaning up.
CLEANUP_WAIT_S = 60.0


class RunActive(FabricEmuError):
    """Another run holds the lock; ``info`` is what it wrote about itself."""

    def __init__(self, info: dict, doing: str):
        self.info = info
        super().__init__(f"{describe(info)}: {doing}")


def lock_dir() -> Path:
    if os.environ.get(LOCK_DIR_ENV):
        candidates = [Path(os.environ[LOCK_DIR_ENV])]
    else:
        candidates = [Path("/run/fabric-emu"), Path(tempfile.gettempdir()) / "fabric-emu"]
    for d in candidates:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(d, os.W_OK):
            return d
    raise EnvironmentProblem(f"no writable directory for the run lock ({', '.join(map(str, candidates))})")


def _holder_alive(info: dict) -> bool:
    pid = info.get("pid")
    return pid is None or Path(f"/proc/{pid}").exists()


def describe(info: dict) -> str:
    """One phrase naming a run from its lock info."""
    pid = info.get("pid")
    age = f", started {time.time() - info['started_unix']:.0f} s ago" if info.get("started_unix") else ""
    what = f"experiment {info.get('experiment', '?')}, output {info.get('out_dir', '?')}{age}"
    alive = pid is not None and Path(f"/proc/{pid}").exists()
    if pid is not None and not alive:    # its watchdog still cleans up after it
        return f"a run that just ended (pid {pid}, {what}) is being cleaned up"
    return f"another run is active (pid {pid}, {what})"


class RunLock:
    """The lock, held by this process (and, through ``fd``, its watchdog)."""

    _held: "RunLock | None" = None        # this process's, at most one

    def __init__(self, fd: int, path: Path, info: dict):
        self.fd, self.path, self.info = fd, path, info

    @classmethod
    def held(cls) -> "RunLock | None":
        return cls._held

    @classmethod
    def acquire(cls, experiment: str, out_dir: str | Path, doing: str = "not starting") -> "RunLock":
        """Take the lock or raise ``RunActive`` naming the holder. ``doing``
        ends the refusal ("not starting", "not cleaning ...")."""
        if cls._held is not None:
            raise RuntimeError("this process holds the run lock already (RunLock.held())")
        path = lock_dir() / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        deadline = time.monotonic() + CLEANUP_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                info = _read_info(fd)
                # a run that ended is only being cleaned up by its watchdog: wait
                # for that rather than refuse; a live run is refused at once
                if _holder_alive(info) or time.monotonic() > deadline:
                    os.close(fd)
                    raise RunActive(info, doing) from None
                time.sleep(0.1)
        info = {"pid": os.getpid(), "experiment": str(experiment), "out_dir": str(out_dir),
                "started_unix": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        cls._held = lock = cls(fd, path, info)
        return lock

    def release(self) -> None:
        if self.fd < 0:
            return
        os.ftruncate(self.fd, 0)           # no holder to name
        fcntl.flock(self.fd, fcntl.LOCK_UN)   # for the watchdog's copy of fd too
        os.close(self.fd)
        self.fd = -1
        if RunLock._held is self:
            RunLock._held = None

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _read_info(fd: int) -> dict:
    deadline = time.monotonic() + INFO_WAIT_S
    while True:
        raw = os.pread(fd, 65536, 0)
        try:
            return json.loads(raw)
        except ValueError:
            if time.monotonic() > deadline:
                return {}
            time.sleep(0.02)
