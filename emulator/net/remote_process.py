"""A process on another server of a cluster, as the runner sees it.

``RemoteProcess`` is the part of ``subprocess.Popen`` a run uses, for a
switch or agent that ``ClusterServer.spawn`` (``emulator/net/cluster.py``)
started there through ``emulator.net.remote_exec``. Its ssh session carries
its config files and its stdin (the start gate's line) there and its pid and
exit status back; signals go as ``kill`` over the server's shared connection,
without waiting for the round trip: stopping five switches sends five kills
at once (0.15-0.45 s each on a busy machine), not one after the other.
"""
from __future__ import annotations

import contextlib
import signal
import subprocess
from pathlib import Path

from emulator.net.remote_exec import put_frames


class RemoteProcess:
    """A process on ``server``: ``argv`` is its ssh session's remote command
    (``remote_exec``), ``files`` the runner's files it writes there first."""

    def __init__(self, server, argv: list[str], stdin_pipe: bool, files: list[Path] = ()):
        self.server, self.args = server, argv
        # No preexec_fn (gRPC's threads run by now): a session on the shared
        # connection ends with its master, which dies with the runner.
        self._ssh = subprocess.Popen(server.command(argv),
                                     stdin=subprocess.PIPE if stdin_pipe or files else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.stdin = self._ssh.stdin
        if files:
            try:
                self.stdin.write(put_frames(files))
                self.stdin.flush()
            except BrokenPipeError:  # the session ended at once: poll tells
                pass
            if not stdin_pipe:       # its stdin ends here, as /dev/null's would
                with contextlib.suppress(BrokenPipeError):
                    self.stdin.close()
                self.stdin = None
        self.pid: int | None = None      # on the server, once read
        self.returncode: int | None = None
        self._signalling: subprocess.Popen | None = None    # the last kill sent

    def _remote_pid(self) -> int | None:
        if self.pid is None:
            line = self._ssh.stdout.readline()
            self.pid = int(line) if line.strip().isdigit() else None
        return self.pid

    def poll(self) -> int | None:
        if self.returncode is None and self._ssh.poll() is not None:
            self._remote_pid()
            rest = self._ssh.stdout.read().decode(errors="replace").split()
            # "exit N" from remote_exec; without it the connection was lost.
            self.returncode = (int(rest[rest.index("exit") + 1]) if "exit" in rest
                               else -signal.SIGKILL)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        try:
            self._ssh.wait(timeout)
        except subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(self.args, timeout) from None
        self._reap_signal(timeout=5)
        return self.poll()

    def send_signal(self, sig: int) -> None:
        """``kill -sig`` there, not waited for; a process's signals arrive in
        the order sent (the previous kill is waited for first)."""
        if self.poll() is None and self._remote_pid() is not None:
            self._reap_signal(timeout=10)
            self._signalling = subprocess.Popen(
                self.server.command(["kill", f"-{int(sig)}", str(self.pid)]),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _reap_signal(self, timeout: float) -> None:
        if self._signalling is not None:
            sending, self._signalling = self._signalling, None
            try:
                sending.wait(timeout)
            except subprocess.TimeoutExpired:
                sending.kill()
                sending.wait()

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
        if self.poll() is None:
            self._ssh.kill()
