"""A switch or agent on another server of a cluster, as its ssh session's command.

    ssh SERVER [mnexec -a NODE_PID] python -m emulator.net.remote_exec LOG [--put PATH]... -- MODULE ARGS...

The runner (``emulator.net.cluster.RemoteProcess``) starts one of these per
remote process over the server's shared ssh connection. It prints its pid
(the runner's ``kill`` goes to it), runs ``python -m MODULE ARGS`` with the
session's stdin (the start gate's line) and ``LOG`` as stdout and stderr,
forwards SIGTERM, SIGINT, SIGHUP and SIGUSR1 to it, and prints its exit
status as ``exit N`` (``-N``: killed by signal N) before it exits.

Each ``--put PATH`` is a file the runner wrote (the process's config): it
comes first on stdin, framed by ``put_frames``, and is written to ``PATH``
before the child starts -- in the session that starts the process, not in
an ssh round trip of its own per file (0.15-0.45 s each on a busy machine).
A file that cannot be written ends it with ``exit 2`` and the reason in ``LOG``.

The child dies with the runner as a local one does: ssh gives a command no
signal when the connection goes, but it closes the session's pipes, so
this process watches its stdout for the error a pipe with no reader
reports and then SIGKILLs the child (``FABRIC_EMU_RUNNER_PID`` names this
process, so the child's own ``die_with_runner`` follows it too).
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from emulator.atomic import atomic_write_bytes
from emulator.errors import WriteFailed
from emulator.lifeline import RUNNER_PID_ENV

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)
USAGE = "usage: python -m emulator.net.remote_exec LOG [--put PATH]... -- MODULE ARGS..."


def put_frames(paths: list[Path]) -> bytes:
    """The files ``paths`` as ``--put`` reads them from stdin: each its
    size in decimal on a line, then its bytes."""
    out = bytearray()
    for path in paths:
        data = Path(path).read_bytes()
        out += f"{len(data)}\n".encode() + data
    return bytes(out)


def _read_exact(fd: int, size: int) -> bytes:
    """``size`` bytes of ``fd``, not one more: the rest of stdin is the child's."""
    chunks = []
    while size > 0:
        chunk = os.read(fd, size)
        if not chunk:
            raise EOFError("stdin ended inside a --put file")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_size(fd: int) -> int:
    line = b""
    while not line.endswith(b"\n"):
        line += _read_exact(fd, 1)
        if len(line) > 20:
            break
    if not line.strip().isdigit():
        raise ValueError(f"a --put file's size line is {line[:20]!r}")
    return int(line)


def receive_files(paths: list[str], fd: int = 0) -> None:
    """Each of ``paths`` written whole (``atomic``) from ``fd``'s frames."""
    for path in paths:
        data = _read_exact(fd, _read_size(fd))
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, data)


def parse(argv: list[str]) -> tuple[str, list[str], str, list[str]] | None:
    """(LOG, the --put paths, MODULE, ARGS), or None if ``argv`` is not of that form."""
    if not argv:
        return None
    log_path, rest, puts = argv[0], argv[1:], []
    while len(rest) >= 2 and rest[0] == "--put":
        puts.append(rest[1])
        rest = rest[2:]
    if len(rest) < 2 or rest[0] != "--":
        return None
    return log_path, puts, rest[1], rest[2:]


def main(argv: list[str] | None = None) -> int:
    parsed = parse(sys.argv[1:] if argv is None else argv)
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 2
    log_path, puts, module, args = parsed
    with open(log_path, "wb") as log:
        try:
            receive_files(puts)
        except (OSError, EOFError, ValueError, WriteFailed) as e:
            log.write(f"remote_exec: --put: {e}\n".encode())
            os.write(1, f"{os.getpid()}\nexit 2\n".encode())
            return 2
        child = subprocess.Popen([sys.executable, "-m", module, *args], stdout=log,
                                 stderr=subprocess.STDOUT,
                                 env={**os.environ, RUNNER_PID_ENV: str(os.getpid())})
    for sig in FORWARDED:
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    os.write(1, f"{os.getpid()}\n".encode())
    # The runner's end of stdout gone: the connection to it is lost.
    watch = select.poll()
    watch.register(1, select.POLLERR)
    pidfd = os.pidfd_open(child.pid)
    watch.register(pidfd, select.POLLIN)
    while child.poll() is None:
        try:
            events = watch.poll()
        except InterruptedError:      # a forwarded signal
            continue
        if any(fd == 1 for fd, _ in events):
            child.kill()
            child.wait()
            return 1
    try:
        os.write(1, f"exit {child.returncode}\n".encode())
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
