"""The run's plots drawn by a process of their own, on the CPU the run leaves idle.

    plotter = Plotter.start(out_dir, fabric)   # before the fabric's bring-up: it imports matplotlib
    plotter.pause()                      # the traffic runs
    plotter.resume()                     # the traffic is over, the switches stopped: normal priority
    plotter.submit(out_dir, summary)     # fct_slowdown.csv written: the summary's figures
    plotter.written("queue_depth.csv")   # a time series written: the figures it completes
    plotter.release()                    # all written: the rest of the figures too
    files = plotter.collect()            # {png name: path}, as write_plots (plot(): all three)
    plotter.close()                      # (collect() closes it; close() if it is never called)

Why a process: matplotlib's import and the figures took the runner's time after
the last flow, and a thread importing it during the traffic took the CPU the
switches and agents need. The runner moves the plotter into the scheduler's
idle class as soon as it has started it (``emulator.net.idle_cpu``), stops it
while the traffic runs (``pause``: even idle, its import made them late), and
moves it back once the traffic is over and the switches stopped (``resume``).

On the job, it forks after its imports: the two processes take the figures
one at a time, the longest first, from a queue they share: the summary's as
soon as they have the job, each of the time series' once its CSVs are
written (``written``, ``FIGURE_CSVS``). Any failure (the process gone, a
figure raising) and ``collect`` draws what is missing in the runner itself
(``write_plots``), where a bug raises as it always did.

Protocol: on the plotter's stdin, two pickles: the fabric at the start (its
modules imported while the run goes on), then the job (results directory,
summary); a line per figure its data is ready for; its end (the release); one
JSON line back on stdout: {figure: path or null if nothing to draw}; exit.
"""
from __future__ import annotations

import fcntl
import json
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Mapping

from emulator.net.idle_cpu import enter_idle, leave_idle, remove_idle_cgroup
from emulator.lifeline import child_env, die_with_runner, set_pdeathsig
from emulator.experiment.plots import prewarm, write_plots

PIPE_DEFAULT_BYTES = 65536
EXIT_WAIT_S = 2.0         # after its answer, for its exit (then close() kills it)
SIGNAL_WAIT_S = 0.2       # pause/resume: for the process to stop or go on
# The figures, the longest to draw first (a 32-host all-to-all: pause timeline
# ~1.3 s of CPU, throughput ~1.0, queue depth ~0.6, FCT slowdown ~0.35, FCT CDF
# ~0.25; the demo: ~0.3 each, no pause timeline): the two processes take the
# next one each as they finish the last, so neither waits long for the other.
# Those of the summary (and fct_slowdown.csv, written from it) first, while
# the runner writes the time series; the others once they are written.
SUMMARY_FIGURES = ("fct_slowdown.png", "fct_cdf.png")
CSV_FIGURES = ("pause_timeline.png", "throughput.png", "queue_depth.png")
FIGURES = SUMMARY_FIGURES + CSV_FIGURES
# What each of CSV_FIGURES reads (a pause timeline ends at the last time of
# the queue depths and rates too): it is drawn once they are all written.
FIGURE_CSVS = {"pause_timeline.png": ("pfc_events.csv", "queue_depth.csv", "flow_rate.csv"),
               "throughput.png": ("flow_rate.csv",), "queue_depth.png": ("queue_depth.csv",)}
NAME_BYTES = 32           # a figure's name in the queue, padded: one read takes one


class Plotter:
    def __init__(self, proc: subprocess.Popen, fabric=None, idle: bool = True):
        self.proc, self.fabric = proc, fabric
        self._job: tuple[str, dict] | None = None       # (results directory, summary)
        self._sender: threading.Thread | None = None
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()   # the sender's: bytes, None at the end
        self._waiting = dict(FIGURE_CSVS)       # figures not yet sent: the CSVs they wait for
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
        self.submit(results_dir, summary)
        self.release()
        return self.collect()

    def submit(self, results_dir: str | Path, summary: Mapping) -> None:
        """Give the process its job and return at once: it draws the
        ``SUMMARY_FIGURES`` (their files are written), then waits for
        ``release``; ``collect`` waits for the figures."""
        self._job = (str(results_dir), dict(summary))
        # The traffic is over: the figures are what the run waits for now (the
        # fabric's teardown goes on beside them and must not starve them).
        self.resume()
        try:
            data = pickle.dumps(self._job)
        except pickle.PicklingError:
            return          # collect() draws everything
        # by a thread: a summary larger than the pipe would hold the runner
        # until the plotter is done importing and reads it
        self._outbox.put(data)
        self._sender = threading.Thread(target=self._send, daemon=True)
        self._sender.start()

    def _send(self) -> None:
        """The job, then the figures' names as ``written`` releases them, in order."""
        try:
            while (data := self._outbox.get()) is not None:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
        except (OSError, ValueError):
            pass            # collect() draws what is missing

    def written(self, csv_name: str) -> None:
        """``csv_name`` is written: the process draws the ``CSV_FIGURES``
        whose CSVs (``FIGURE_CSVS``) are now all written."""
        if self._sender is None:
            return          # no job sent: collect() draws them
        for name in CSV_FIGURES:
            csvs = self._waiting.get(name)
            if csvs is not None and csv_name in csvs:
                self._waiting[name] = csvs = tuple(c for c in csvs if c != csv_name)
                if not csvs:
                    del self._waiting[name]
                    self._outbox.put(name.encode() + b"\n")

    def release(self) -> None:
        """Every time-series CSV is written: the process draws the
        ``CSV_FIGURES`` not drawn yet too (its stdin closes)."""
        if self._sender is not None:
            for name in [n for n in CSV_FIGURES if n in self._waiting]:
                del self._waiting[name]
                self._outbox.put(name.encode() + b"\n")
            self._outbox.put(None)
            self._sender.join()
            self._sender = None
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def collect(self) -> dict[str, Path]:
        """The figures of the job ``submit`` gave: {file name: path}."""
        drawn: dict[str, str] = {}
        self.release()
        try:
            line = self.proc.stdout.readline()
            if line:
                drawn = json.loads(line)
                self.proc.wait(timeout=EXIT_WAIT_S)    # it exits right after its line
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        finally:
            self.close()
        results_dir, summary = self._job
        missing = [name for name in FIGURES if name not in drawn]
        files = {name: Path(path) for name, path in drawn.items() if path}
        if missing:         # the plotter failed: the rest here, where an error raises
            files.update(write_plots(results_dir, summary, fabric=self.fabric, only=missing))
        return files

    def close(self) -> None:
        """End the process (a run that never gets to its plots)."""
        if self._sender is not None:     # never released: the sender's end
            self._outbox.put(None)
            self._sender = None
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


def _draw(results_dir: str, summary, fabric, queue: int) -> dict[str, str | None]:
    """The figures taken from ``queue`` (a pipe of their names) one at a time
    until it is empty, drawn: {name: path, or None with nothing to draw}."""
    out: dict[str, str | None] = {}
    while name := os.read(queue, NAME_BYTES).decode().strip():
        path = write_plots(results_dir, summary, fabric=fabric, only=[name]).get(name)
        out[name] = None if path is None else str(path)
    return out


def _drawer(results_dir: str, summary, fabric, queues: tuple[int, int]) -> dict[str, str | None]:
    """One of the two drawing processes: the summary's figures, then the
    time series' as the runner releases them (until its stdin's end)."""
    out = _draw(results_dir, summary, fabric, queues[0])
    out.update(_draw(results_dir, summary, fabric, queues[1]))
    return out


def _figure_queue(names: tuple[str, ...]) -> int:
    """A pipe holding the figures' names, closed for writing: reading it
    takes the next (a pipe's reads are atomic; an empty one reads b"")."""
    r, w = os.pipe()
    os.write(w, b"".join(name.encode().ljust(NAME_BYTES) for name in names))
    os.close(w)
    return r


def _forward(stdin, queue_w: int) -> None:
    """The figures the runner releases (a name a line on ``stdin``) into
    the queue both drawers read; the queue's end at stdin's."""
    try:
        for line in stdin:
            name = line.strip().decode()
            if name in FIGURE_CSVS:
                os.write(queue_w, name.encode().ljust(NAME_BYTES))
    finally:
        os.close(queue_w)


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
    csv_r, csv_w = os.pipe()
    queues = (_figure_queue(SUMMARY_FIGURES), csv_r)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                 # the second drawer; its figures through the pipe
        os.close(r)
        os.close(csv_w)          # the queue ends when the forwarder closes it
        set_pdeathsig()
        code = 1
        try:
            os.write(w, json.dumps(_drawer(results_dir, summary, fabric, queues)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    threading.Thread(target=_forward, args=(stdin, csv_w), daemon=True).start()
    done = _drawer(results_dir, summary, fabric, queues)
    with os.fdopen(r, "rb") as f:
        second = f.read()
    _, status = os.waitpid(pid, 0)
    # figures with nothing to draw are known as drawn (None); those a failed
    # drawer took are absent (the runner draws them)
    if status == 0 and second:
        done.update(json.loads(second))
    sys.stdout.write(json.dumps(done) + "\n")
    sys.stdout.flush()
    os._exit(0)      # the runner waits for this: no interpreter teardown (~0.1 s)


if __name__ == "__main__":
    sys.exit(main())
