"""PNG figures of a run, drawn from its result CSVs and summary (matplotlib, Agg).

Every ``plot_*`` function reads what ``timeseries.write_results`` wrote into
a results directory (so figures can be redrawn later without the raw logs),
draws one figure with fabric time in µs on the x axis, and returns the PNG's
path, or None when there is nothing to draw (and then writes no file). One
module per family of figures, each on the look they share (``figure.py``:
size, colours, legends beside the axes, never over the data):

* ``congestion.py``  -> ``queue_depth.png`` (``plot_queue_depth``) and
  ``pause_timeline.png`` (``plot_pause_timeline``): the queues' depth and
  the PFC pauses over time.
* ``throughput.py``  -> ``throughput.png`` (``plot_throughput``): each
  flow's goodput over time.
* ``fct.py``         -> ``fct_cdf.png`` (``plot_fct_cdf``) and
  ``fct_slowdown.png`` (``plot_fct_slowdown``): FCT slowdown, as a CDF and
  by flow-size bucket.
* ``collectives.py`` -> bus bandwidth by message size (``plot_busbw``), for
  a run with collectives.

``write_plots(results_dir, summary)`` draws a run's five (``PLOT_FILES``),
each CSV parsed once for all of them. Every name the families define for
other modules is importable from here.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Collection, Mapping

from emulator.experiment.plots.collectives import plot_busbw
from emulator.experiment.plots.congestion import pause_intervals, plot_pause_timeline, plot_queue_depth
from emulator.experiment.plots.fct import (PERCENTILE_MIN_FLOWS, cdf_title, draw_slowdown_buckets,
                                           plot_fct_cdf, plot_fct_slowdown, plot_slowdown_buckets,
                                           size_label)
from emulator.experiment.plots.figure import DPI, MAX_DISTINCT, colours, prewarm
from emulator.experiment.plots.throughput import FlowRates, plot_throughput, read_flow_rates
from emulator.experiment.results_io import read_result_csv
from emulator.rundir import RunDir

if TYPE_CHECKING:  # pragma: no cover
    from emulator.topo import Fabric

PLOT_FILES = RunDir.PLOTS


def write_plots(results_dir: str | Path, summary: Mapping | None = None,
                fabric: "Fabric | None" = None, only: Collection[str] | None = None
                ) -> dict[str, Path]:
    """Draw every figure that has data (``only``: of these ``PLOT_FILES``);
    returns {file name: path} of those written."""
    results_dir = Path(results_dir)
    parsed: dict[Path, list[dict]] = {}

    def read(path: Path) -> list[dict]:        # each CSV parsed once for all the figures
        if path not in parsed:
            parsed[path] = read_result_csv(path)
        return parsed[path]
    draw = {
        RunDir.QUEUE_DEPTH_PNG: lambda: plot_queue_depth(results_dir, read=read),
        RunDir.THROUGHPUT_PNG: lambda: plot_throughput(results_dir, read=read),
        RunDir.PAUSE_TIMELINE_PNG: lambda: plot_pause_timeline(results_dir, fabric=fabric,
                                                               read=read),
        RunDir.FCT_CDF_PNG: lambda: plot_fct_cdf(results_dir, summary),
        RunDir.FCT_SLOWDOWN_PNG: lambda: plot_fct_slowdown(results_dir, read=read),
    }
    unknown = set(only or ()) - draw.keys()
    if unknown:
        raise ValueError(f"no such figure: {', '.join(sorted(unknown))}")
    out = {name: f() for name, f in draw.items() if only is None or name in only}
    return {k: v for k, v in out.items() if v is not None}


__all__ = ["DPI", "MAX_DISTINCT", "PERCENTILE_MIN_FLOWS", "PLOT_FILES", "FlowRates", "cdf_title",
           "colours", "draw_slowdown_buckets", "pause_intervals", "plot_busbw", "plot_fct_cdf",
           "plot_fct_slowdown", "plot_pause_timeline", "plot_queue_depth", "plot_slowdown_buckets",
           "plot_throughput", "prewarm", "read_flow_rates", "size_label", "write_plots"]
