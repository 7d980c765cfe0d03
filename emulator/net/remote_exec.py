"""A switch or agent on another server of a cluster, as its ssh session's command.

    ssh SERVER [mnexec -a NODE_PID] python -m emulator.net.remote_exec LOG -- MODULE ARGS...

The runner (``emulator.net.cluster.RemoteProcess``) starts one of these per
remote process over the server's shared ssh connection. It prints its pid
(the runner's ``kill`` goes to it), runs ``python -m MODULE ARGS`` with the
session's stdin (the start gate's line) and ``LOG`` as stdout and stderr,
forwards SIGTERM, SIGINT, SIGHUP and SIGUSR1 to it, and prints its exit
status as ``exit N`` (``-N``: killed by signal N) before it exits.

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

from emulator.lifeline import RUNNER_PID_ENV

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m emulator.net.remote_exec LOG -- MODULE ARGS...", file=sys.stderr)
        return 2
    log_path, module, args = argv[0], argv[2], argv[3:]
    with open(log_path, "wb") as log:
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
