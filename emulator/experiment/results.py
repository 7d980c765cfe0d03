"""Everything a run leaves in its results directory, written in one place.

The one module that knows every results writer (the others import only the
layers below them, so there is no import circle)::

    results            this module: the run's summary, then every file
      |-- summary          summary.json's content         (ideal_fct, results_io)
      |-- endpoint_results summary's endpoint sections, hosts.csv (results_io)
      |-- timeseries       raw logs -> fabric-time CSVs   (results_io)
      |-- distributions    FCT slowdown by size, queue-depth percentiles (results_io)
      |-- traffic_gen      summary's generated_traffic (what poisson entries offered)
      |-- hpcc             HPCC-format files              (ideal_fct)
      |-- plots            PNG figures from the CSVs      (results_io)
      |     plotter        ... drawn by a process of the run's own (runner's choice)
      ideal_fct          paths, priority and ideal FCT of the flows
      summary_file       RunSummary: summary.json's model and its one writer
      results_io         raw logs, stats.json, CSV reading and writing

The runner calls ``build_run_summary`` when the agents are done, lets the
workload's servers add their block (``servers.add_collectives``), then
``write_run_results``. The files are where the run directory
(``emulator.rundir.RunDir``) names them.
"""
from __future__ import annotations

import gc
import importlib
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from emulator.experiment.distributions import write_queue_depth_dist, write_slowdown_buckets
from emulator.experiment.endpoint_results import add_endpoint_results, write_hosts_csv
from emulator.experiment.hpcc import write_hpcc
from emulator.experiment.pfcwd_results import add_watchdog_events
from emulator.experiment.plots import write_plots
from emulator.experiment.summary import build_summary
from emulator.experiment.summary_file import RunSummary
from emulator.experiment.timeseries import load_results, write_results
from emulator.experiment.traffic_gen import generated_summary
from emulator.rundir import RunDir

if TYPE_CHECKING:  # pragma: no cover
    from emulator.experiment.model import Experiment
    from emulator.experiment.plotter import Plotter

def build_run_summary(exp: "Experiment", target: str, agent_results: dict[str, dict],
                      counters: dict[tuple[str, int], dict], rd: RunDir,
                      wall_s: float) -> RunSummary:
    """summary.json's content: flows, ports and switches, then the endpoint
    sections (``endpoint_results``; nothing without an ``endpoints:`` section)."""
    summary = build_summary(exp, target, agent_results, counters, rd.raw, wall_s)
    add_endpoint_results(exp, agent_results, summary)
    generated = generated_summary(exp)
    if generated:
        summary.generated_traffic = generated
    return summary


def write_run_results(exp: "Experiment", rd: RunDir, t0_ns: int, summary: RunSummary, *,
                      plots: bool = True, hpcc: bool = True, plotter: "Plotter | None" = None,
                      **hpcc_options) -> dict[str, Path]:
    """Write the results directory of a run from its raw logs and summary.

    The time series CSVs, FCT slowdown by size bucket and the queue-depth
    distribution (``distributions``: also into ``summary``), the HPCC-format files (``hpcc_options``: those of
    ``write_hpcc``), ``hosts.csv`` (with endpoints), the plots (by ``plotter``'s process if given) and, last,
    ``summary.json``. ``t0_ns``: ``time.monotonic_ns()`` value of the agents'
    common start (``timeseries.monotonic_t0_from_unix``). Returns {file name: path}.
    """
    with _no_gc():      # (not while figures are drawn here: matplotlib's objects hold cycles)
        files = write_slowdown_buckets(rd, summary)     # of the summary's flows alone
        # The plotter's process draws the figures of the summary (they read its
        # flows, which are complete) while this one writes the time series, then
        # theirs as they are written, while this one writes the rest.
        if plots and plotter is not None:
            plotter.submit(rd.path, summary.as_dict())
        res = load_results(exp, rd.raw, t0_ns)      # converted once, for the CSVs and HPCC files
        # each figure drawn as soon as its CSVs are written, while the rest are
        files.update(write_results(exp, rd.raw, rd, t0_ns, results=res,
                                   on_written=plotter.written if plots and plotter is not None else None))
        if plots and plotter is not None:
            plotter.release()
        add_watchdog_events(summary, res.pfcwd_events)
        files.update(write_queue_depth_dist(exp, rd, summary, res))
        if hpcc:
            files.update(write_hpcc(exp, rd, res, summary.flows, **hpcc_options))
        # Drawn here, the plots read the CSVs back: the converted rows (a 64-host
        # all-to-all's 2.4 M flow-rate rows, a GB) go first, not held beside their copy.
        del res
    files.update(write_hosts_csv(rd, summary))
    text = summary.text()       # complete: made while the figures are drawn, written after them
    if plots and plotter is not None:
        for hook in _while_figures:
            hook(rd.path, text)
    if plots:
        files.update(plotter.collect() if plotter is not None
                     else write_plots(rd.path, summary.as_dict(), fabric=exp.fabric))
    files[rd.SUMMARY] = summary.write(rd, text)
    return files


# while_figures_draw's hooks: (results directory, summary.json's text to be) -> None
_while_figures: list[Callable[[Path, str], None]] = []
# What the results phase imports when it comes (NumPy: the distributions), and its hooks
_IMPORTED_LATE = ["numpy"]


@contextmanager
def while_figures_draw(hook: Callable[[Path, str], None], imports: tuple[str, ...] = ()):
    """Within the block, every ``write_run_results`` whose figures a plotter
    process draws calls ``hook(results_dir, summary_text)`` while they draw,
    its other files written (summary.json is written after the figures,
    with ``summary_text``): work that reads them (the command's report.html,
    a layer above) done on the CPU this process would spend waiting.
    ``imports``: the modules the hook imports (``import_ahead`` takes them)."""
    _while_figures.append(hook)
    _IMPORTED_LATE.extend(imports)
    try:
        yield
    finally:
        _while_figures.remove(hook)
        for module in imports:
            _IMPORTED_LATE.remove(module)


def import_ahead(*first: str) -> threading.Thread:
    """Import ``first``, then what the results phase will (``_IMPORTED_LATE``),
    now, on a daemon thread: a small fabric's bring-up leaves this process
    waiting (on node shells, switches, agents) for longer than those imports
    take (~0.25 s of CPU: NumPy, the report's Plotly), which the results
    phase, CPU-bound beside the figures, then no longer spends. Not for a big
    fabric: the modules would be held through its traffic, at its peak."""
    thread = threading.Thread(target=_import_all, args=([*first, *_IMPORTED_LATE],),
                              name="import-ahead", daemon=True)
    thread.start()
    return thread


def _import_all(modules: list[str]) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:      # imported again where it is used: an error raises there
            pass


@contextmanager
def _no_gc():
    """The cyclic garbage collector off: the results are millions of tuples
    and dicts without cycles, which its passes went over again and again
    (~0.4 s of a 32-host all-to-all's 2 s of converting). Back on after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


__all__ = ["build_run_summary", "import_ahead", "while_figures_draw", "write_run_results"]
