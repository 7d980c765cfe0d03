"""An interactive, self-contained HTML report of a run (``report.html``).

    from emulator.report import write_report, write_compare_report
    write_report(run_dir)                       # run_dir/report.html
    write_compare_report(out, {label: run_dir}) # out/report.html: the runs side by side
    with reports_prepared(): run(...)           # its figures made while the run's PNGs draw

Everything is read from the run directory's own files (``summary.json``, the
time-series CSVs, the raw directory's switch configs); nothing is re-run.
Figures are Plotly's, its JavaScript inlined (the page opens offline).
Layers: above ``emulator.experiment`` (it reads results with its readers);
it never imports the runner, the network or the data plane (pyproject's
import-linter contracts).

    rundata     the run directory -> summary + Fabric (RunData)
    series      slider frames and decimation (pure data shaping)
    fabric_fig  the animated fabric
    flows_fig   per-flow timelines and rates
    dist_fig    FCT CDF, slowdown by size, queue percentiles, collectives
    page        HTML assembly, atomic write
    build       one run's page;  compare: a comparison's page
"""
import time
from contextlib import contextmanager

from emulator.lazy import lazy_exports

# Plotly's import (the builders') when a report is first built, not with the package
__getattr__, __dir__, _LAZY = lazy_exports(__name__, globals(), {
    "build": ("write_report",), "compare": ("write_compare_report",),
    "rundata": ("NotARunDir",)})
__all__ = [*_LAZY, "prepare_report", "reports_prepared", "write_told"]


def prepare_report(run_dir, summary_text: str) -> None:
    """``build.prepare_report``."""
    from emulator.report.build import prepare_report as prepare   # deferred: see _LAZY
    prepare(run_dir, summary_text)


@contextmanager
def reports_prepared():
    """Within it (or the function it decorates), the figures of every run's
    report.html are built while its PNGs draw (``prepare_report``)."""
    from emulator.experiment.results import while_figures_draw   # deferred: the results' modules
    # what building them imports (Plotly's figures load their parts when first made)
    with while_figures_draw(prepare_report, imports=("emulator.report.build", "plotly.io",
                                                     "plotly.graph_objs._figure")):
        yield


def write_told(say, run_dir, runs: dict | None = None):
    """``write_report`` (or, with ``runs``, ``write_compare_report``), then
    ``say`` where it is, its size and the time it took; its path."""
    from emulator import report      # deferred: the builders, as the package names them now
    t0 = time.monotonic()
    path = (report.write_report(run_dir) if runs is None
            else report.write_compare_report(run_dir, runs))
    say(f"report: {path} ({path.stat().st_size / 1e6:.1f} MB, {time.monotonic() - t0:.1f} s)")
    return path
