"""The run's plots drawn by a process of their own, on the CPU the run leaves idle.

    plotter = Plotter.start(out_dir, fabric)   # before the fabric's bring-up: it imports matplotlib
    plotter.pause()                      # the traffic runs
    plotter.resume()                     # the traffic is over, the switches stopped: normal priority
    files = plotter.plot(out_dir, summary)     # {png name: path}, as write_plots
    plotter.close()                      # (plot() closes it; close() if plot is never called)

Why a process: the figures take ~0.45 s to draw and matplotlib ~0.35 s to
import, which the runner used to spend after the last flow (the end of a
run is meant to take under a second); a niced thread importing matplotlib
in the runner during the traffic took the CPU the switches and agents need
(demo at D = 6000: worst lateness ratio 0.86-0.96 with it, 0.56-0.62
without). The runner moves the plotter into the scheduler's idle class as soon as
it has started it (``emulator.net.idle_cpu``: it gets only the CPU the run
leaves idle and gives it back the instant a switch or agent wakes), stops
it while the traffic runs (``pause``: even idle, its import made them late),
and moves it back once the traffic is over and the switches stopped
(``resume``): it imports while the results are written, and draws.

On the job, it forks after its imports: the two processes draw half of the
figures each (on two cores, ~0.25 s instead of ~0.45 s). Any failure (the
process gone, a figure raising) and ``plot`` draws what is missing in the
runner itself (``write_plots``), where a bug raises as it always did.

Protocol: on the plotter's stdin, two pickles: the fabric at the start
(unpickled, its modules imported, while the run goes on), then the job
(results directory, summary); one JSON line back on stdout: {figure: path
or null when it had nothing to draw}; then the plotter exits at once.
"""
from __future__ import annotations

import fcntl
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping

from emulator.net.idle_cpu import enter_idle, leave_idle, remove_idle_cgroup
from emulator.lifeline import child_env, die_with_runner, set_pdeathsig
from emulator.experiment.plots import prewarm, write_plots

PIPE_DEFAULT_BYTES = 65536
EXIT_WAIT_S = 2.0         # after its answer, for its exit (then close() kills it)
SIGNAL_WAIT_S = 0.2       # pause/resume: for the process to stop or go on
# the figures of each of the two processes, about the same drawing time each
HALVES = (("throughput.png", "fct_cdf.png", "pause_timeline.png"),
          ("queue_depth.png", "fct_slowdown.png"))


class Plotter:
    def __init__(self, proc: subprocess.Popen, fabric=None, idle: bool = True):
        self.proc, self.fabric = proc, fabric
        # at once, while the child's interpreter starts: its whole import idle
        self._idle = enter_idle(proc.pid) if idle else None

    @classmethod
    def start(cls, out_dir: str | Path, fabric=None, idle: bool = True) -> "Plotter":
        """The process, told the run's ``fabric`` (pause timelines name ports
        by it); its command line names the results directory it will draw
        into, ``out_dir`` (not the run directory: the fabric's teardown ends
        what names that, and the plotter outlives the fabric). ``idle``: in
        the idle class until ``resume`` (False: started once the traffic is over)."""
        proc = subprocess.Popen([sys.executable, "-m", "emulator.experiment.plotter",
                                 str(out_dir)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                # its errors show where plot() redraws what it missed
                                stderr=subprocess.DEVNULL,
                                start_new_session=True, env=child_env())
        plotter = cls(proc, fabric, idle)
        try:
            data = pickle.dumps(fabric)
            if len(data) > PIPE_DEFAULT_BYTES:   # the write must not wait for the plotter
                fcntl.fcntl(proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, len(data))
            proc.stdin.write(data)
            proc.stdin.flush()
        except (OSError, pickle.PicklingError):    # plot() draws everything here
            pass
        return plotter

    def pause(self) -> None:
        """Stop the process (SIGSTOP) while the traffic runs: even in the idle
        class, a process importing matplotlib beside the switches and agents
        made them late (demo at D = 4000, 3 runs each: worst lateness ratio
        0.65-1.25 with it importing, 0.41-0.56 stopped). Its import runs
        during the fabric's bring-up instead, and after the traffic."""
        self._signal(signal.SIGSTOP, stopped=True)

    def resume(self) -> None:
        """Let it go on (SIGCONT), at normal priority: the traffic is over and
        the switches stopped. In the idle class until the job, it got no CPU
        while the results were written beside the fabric's teardown (its
        matplotlib import, ~0.5 s of CPU, then all came after them: the demo
        waited ~0.8 s for its figures); now that import uses the core they
        leave."""
        if self._idle is not None:
            leave_idle(self._idle, self.proc.pid)
            self._idle = None
        self._signal(signal.SIGCONT, stopped=False)

    def _signal(self, sig: int, stopped: bool) -> None:
        """``sig``, then wait (up to ``SIGNAL_WAIT_S``) until the process is
        ``stopped`` or not: a signal is delivered when the process next runs,
        and the traffic must not start beside a plotter still importing."""
        if self.proc.poll() is not None:
            return
        try:
            os.kill(self.proc.pid, sig)
        except ProcessLookupError:           # it ended: plot() draws what it missed
            return
        deadline = time.monotonic() + SIGNAL_WAIT_S
        while (process_state(self.proc.pid) in ("t", "T")) != stopped and time.monotonic() < deadline:
            time.sleep(0.001)

    def plot(self, results_dir: str | Path, summary: Mapping) -> dict[str, Path]:
        """Draw the run's figures (``plots.write_plots``): {file name: path}."""
        drawn: dict[str, str] = {}
        # The traffic is over: the figures are what the run waits for now (the
        # fabric's teardown goes on beside them and must not starve them).
        self.resume()
        try:
            self.proc.stdin.write(pickle.dumps((str(results_dir), dict(summary))))
            self.proc.stdin.close()
            line = self.proc.stdout.readline()
            if line:
                drawn = json.loads(line)
                self.proc.wait(timeout=EXIT_WAIT_S)    # it exits right after its line
        except (OSError, ValueError, pickle.PicklingError, subprocess.TimeoutExpired):
            pass
        finally:
            self.close()
        missing = [name for half in HALVES for name in half if name not in drawn]
        files = {name: Path(path) for name, path in drawn.items() if path}
        if missing:         # the plotter failed: the rest here, where an error raises
            files.update(write_plots(results_dir, summary, fabric=self.fabric, only=missing))
        return files

    def close(self) -> None:
        """End the process (a run that never gets to its plots)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self._idle is not None:       # killed in the idle cgroup: remove it
            self._idle = None
            remove_idle_cgroup()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None and not f.closed:
                f.close()


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat (R, S, T, ...); "" if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _draw(results_dir: str, summary, fabric, names) -> dict[str, str]:
    return {k: str(v) for k, v in write_plots(results_dir, summary, fabric=fabric,
                                              only=names).items()}


def main() -> int:
    # started by a test, not a runner: SIGKILL with the parent all the same (a
    # paused plotter would never see its stdin close)
    die_with_runner(unsupervised_signal=signal.SIGKILL)
    prewarm()
    stdin = sys.stdin.buffer
    try:
        fabric = pickle.load(stdin)
        results_dir, summary = pickle.load(stdin)
    except EOFError:             # closed without a job: the run ended early
        return 0
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                 # the second half; its result through the pipe
        os.close(r)
        set_pdeathsig()
        code = 1
        try:
            os.write(w, json.dumps(_draw(results_dir, summary, fabric, HALVES[1])).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    out = _draw(results_dir, summary, fabric, HALVES[0])
    with os.fdopen(r, "rb") as f:
        second = f.read()
    _, status = os.waitpid(pid, 0)
    if status == 0 and second:
        out.update(json.loads(second))
    # figures with nothing to draw are known as drawn (None); a failed half is absent
    done = {name: out.get(name) for name in HALVES[0]}
    if status == 0:
        done.update({name: out.get(name) for name in HALVES[1]})
    sys.stdout.write(json.dumps(done) + "\n")
    sys.stdout.flush()
    os._exit(0)      # the runner waits for this: no interpreter teardown (~0.1 s)


if __name__ == "__main__":
    sys.exit(main())
