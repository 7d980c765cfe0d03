"""``fabric-emu`` commands run one after another in this one process, as
``tests/integration/test_refusals.py``'s refusals: each interpreter start and
import of the schema (~0.5 s of CPU, more under load) once for many cases
instead of once a case.

    python -m tests.refusal_driver jobs.json

``jobs.json``: a list of ``{"case", "args", "cwd", "cache"}``. Each command
runs as the console script would, but by ``emulator.cli.main(args)`` here: in
``cwd`` (its default ``results/`` would go there), with ``XDG_CACHE_HOME`` at
``cache``, its stdout and stderr captured at the file descriptors (whatever
writes them: click, rich, a C library), its status from ``SystemExit``. What a
command could change of this process -- the working directory, the
environment, the signal handlers ``_Group.invoke`` installs, the warnings
already shown (each case shows its own) -- is put back before the next.

One JSON line a case on stdout, as each ends (a hung case is the one after
the last line): ``{"case", "status", "stdout", "stderr", "error",
"seconds"}``; ``error`` is the traceback of anything but ``SystemExit``
(``status`` None then).
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import traceback
import warnings
from typing import Iterator

from emulator.command_exit import exit_without_teardown

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _fd_to(fd: int, f) -> Iterator[None]:
    """File descriptor ``fd`` writing to ``f`` within the block."""
    saved = os.dup(fd)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.dup2(f.fileno(), fd)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os.dup2(saved, fd)
        os.close(saved)


def run_one(job: dict) -> dict:
    """One command of ``job`` in this process; what it said and its status."""
    from emulator.cli import main

    home, env = os.getcwd(), dict(os.environ)
    handlers = {s: signal.getsignal(s) for s in SIGNALS}
    status = error = None
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out, \
            tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err:
        t0 = time.monotonic()
        try:
            os.chdir(job["cwd"])
            os.environ["XDG_CACHE_HOME"] = job["cache"]
            with _fd_to(1, out), _fd_to(2, err), warnings.catch_warnings():
                try:
                    main(job["args"], prog_name="fabric-emu")      # as its usage lines say
                except SystemExit as e:     # as the process would end: None is 0, a message 1
                    status = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
                except BaseException:  # noqa: BLE001 (the case's failure, said in its line)
                    error = traceback.format_exc()
        finally:
            took_s = time.monotonic() - t0
            os.chdir(home)
            os.environ.clear()
            os.environ.update(env)
            for s, h in handlers.items():
                signal.signal(s, h)
        out.seek(0)
        err.seek(0)
        return {"case": job["case"], "status": status, "stdout": out.read(),
                "stderr": err.read(), "error": error, "seconds": round(took_s, 3)}


def main() -> None:
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    for job in jobs:
        print(json.dumps(run_one(job)), flush=True)
    exit_without_teardown(0)       # the modules' teardown is ~0.3 s of nothing


if __name__ == "__main__":
    main()
