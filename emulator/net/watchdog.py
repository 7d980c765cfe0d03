"""The watchdog of one fabric: removes it when its runner dies without tearing it down.

Switches and agents die with the runner by themselves
(``emulator.lifeline``) and Mininet's host namespaces with their
processes, but the switch-to-switch veths live in the root namespace and
outlive everything. So ``FabricNet`` starts ``python -m emulator.net.watchdog``
before it builds anything, in its own session (out of reach of the
terminal's Ctrl-C, and of PR_SET_PDEATHSIG, which would kill it with the
runner). It holds the read end of a pipe whose write end only the runner
holds: a byte means "torn down, stand down"; EOF without one means the
runner died (SIGKILL, OOM killer). Then it SIGKILLs what is left of this
run -- the processes whose command lines name its run directory, the
Mininet shells of its nodes, its plotter -- and deletes its switches' interfaces
(each veth's peer goes with it), nothing of any other run. It holds a copy
of the run lock's descriptor, so the next run cannot start until it is done.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from emulator.net.clean import delete_interfaces, kill_processes, plotter_processes, run_processes
from emulator.rundir import RawDir

STAND_DOWN = b"x"
REAP_LIMIT_S = 10.0       # the lock is held meanwhile: never longer


class Watchdog:
    """Runner side: start the watchdog, then ``disarm()`` it after teardown."""

    def __init__(self, run_dir: Path, nodes: list[str], interfaces: list[str],
                 keep_fds: tuple[int, ...] = ()):
        """nodes: the fabric's Mininet node names; interfaces: its switches'
        ports (root namespace); keep_fds: descriptors the watchdog holds
        until it exits (the run lock)."""
        spec = RawDir(run_dir).watchdog
        spec.write_text(json.dumps({"run_dir": str(run_dir), "nodes": nodes,
                                    "interfaces": interfaces, "runner_pid": os.getpid()}))
        r, self._w = os.pipe()     # both ends close-on-exec: no other child inherits them
        try:
            with open(RawDir(run_dir).watchdog_log, "w") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "emulator.net.watchdog", str(r), str(spec)],
                    pass_fds=(r, *keep_fds), start_new_session=True,
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        except BaseException:
            os.close(self._w)
            raise
        finally:
            os.close(r)

    def disarm(self, timeout_s: float = 5.0) -> None:
        """The fabric is down: let the watchdog exit (and drop its lock copy)."""
        if self._w < 0:
            return
        try:
            os.write(self._w, STAND_DOWN)
        except OSError:        # it died: nothing to tell
            pass
        os.close(self._w)
        self._w = -1
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def reap(spec: dict) -> tuple[int, int]:
    """SIGKILL the run's processes and its plotter, delete its interfaces;
    (processes, interfaces)."""
    results_dir = str(Path(spec["run_dir"]).parent)
    killed = kill_processes(lambda: run_processes(spec["run_dir"], spec["nodes"])
                            + plotter_processes(results_dir), grace_s=0)
    removed = delete_interfaces(spec["interfaces"])
    return killed, removed


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    fd, spec_path = int(argv[0]), argv[1]
    spec = json.loads(Path(spec_path).read_text())
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)   # only the pipe decides
    try:
        word = os.read(fd, 1)
    except OSError:
        word = b""
    if word == STAND_DOWN:
        return 0
    t0 = time.monotonic()
    signal.alarm(int(REAP_LIMIT_S))           # never hold the lock for long
    killed, removed = reap(spec)
    print(f"runner {spec['runner_pid']} died without tearing down {spec['run_dir']}: "
          f"killed {killed} processes, deleted {removed} interfaces in "
          f"{time.monotonic() - t0:.2f} s", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
