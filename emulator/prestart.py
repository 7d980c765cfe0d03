"""The fork server's process (``emulator.net.forkserver``), started: for a run
now, or for the next one before the command has imported or checked
anything (``prestart``: its imports, the longest part of a run's start, then
go on on the other core while the command imports, checks its input and
builds the fabric).

Light on purpose: ``fabric-emu run`` imports this before it checks its input,
and a refused run imports none of a run's modules (``emulator.net`` included;
``tests/unit/test_runner_imports.py``). ``emulator.net.forkserver.for_run``
takes the prestarted process; a refused run ends it (``discard_prestarted``),
and one never taken is ended at exit.
"""
from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO, NamedTuple

from emulator.lifeline import child_env

SERVER_MODULE = "emulator.net.forkserver"
UNADOPTED = "-"       # the RUN_DIR argument of a server no run has adopted yet
# NumPy's OpenBLAS starts a thread per core on import: the server must not have any.
ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


class ServerProcess(NamedTuple):
    proc: subprocess.Popen
    ctl: socket.socket               # the runner's end of its control socket
    early_log: BinaryIO | None       # what it writes before a run adopts it (None: a run's)


def start_server(run_dir: Path | None, env: dict[str, str], more_entry_points: tuple[str, ...] = (),
                 log_path: Path | None = None) -> ServerProcess:
    """``python -m emulator.net.forkserver RUN_DIR FD [MODULE...]``, its output
    to ``log_path`` (None: an anonymous file, ``run_dir`` None: no run yet)."""
    ctl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    early_log = tempfile.TemporaryFile() if log_path is None else None
    with (open(log_path, "w") if log_path is not None else os.fdopen(
            os.dup(early_log.fileno()), "w")) as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", SERVER_MODULE, str(run_dir or UNADOPTED),
             str(theirs.fileno()), *more_entry_points],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, env={**env, **ONE_BLAS_THREAD})
    theirs.close()
    return ServerProcess(proc, ctl, early_log)


def end_server(server: ServerProcess) -> None:
    """Kill and reap a server no run took (it may still be importing)."""
    server.proc.kill()
    server.proc.wait()
    server.ctl.close()
    if server.early_log is not None:
        server.early_log.close()


_prestarted: ServerProcess | None = None


def prestart() -> None:
    """Start the next run's fork server now (once)."""
    global _prestarted
    if _prestarted is None:
        _prestarted = start_server(None, child_env())
        atexit.register(discard_prestarted)


def take_prestarted() -> ServerProcess | None:
    """The prestarted server, now the caller's (None: none was)."""
    global _prestarted
    server, _prestarted = _prestarted, None
    return server


def discard_prestarted() -> None:
    """End the prestarted server no run took."""
    server = take_prestarted()
    if server is not None:
        end_server(server)
