"""How fast each flow went: ``throughput.png``, each flow's goodput over time.

``plot_throughput`` draws each flow's goodput (Gbps, ``flow_rate.csv``) one
colour each; beyond ``MAX_DISTINCT`` flows, the goodput into each receiver.
flow_rate.csv holds a sample per flow per sampling interval, so it is
streamed into per-flow arrays (``read_flow_rates``, ``FlowRates``), never
held as a dict per row.
"""
from __future__ import annotations

import warnings
from array import array
from pathlib import Path

from emulator.experiment.plots.figure import MAX_DISTINCT, colours, finish_time_axes, new_figure, save
from emulator.experiment.results_io import read_result_csv
from emulator.rundir import RunDir


def plot_throughput(results_dir: str | Path, out_path: str | Path | None = None,
                    *, read=read_result_csv) -> Path | None:
    """``read`` is not used: flow_rate.csv is streamed into per-flow arrays
    (``read_flow_rates``), never held as a dict per row."""
    rd = RunDir.of(results_dir)
    series = read_flow_rates(rd.file(rd.FLOW_RATE_CSV))
    if not series:
        return None
    grouped = len(series) > MAX_DISTINCT
    lines = _flow_lines(series) if not grouped else _receiver_lines(series)
    fig, ax = new_figure()
    for (label, t, r), colour in zip(lines, colours(len(lines))):
        ax.plot(t, r, linewidth=1.0, drawstyle="steps-pre", color=colour, label=label)
    ax.set_title(f"Per-flow goodput (acknowledged bytes), {len(series)} flows"
                 + (f"; summed per receiver ({len(lines)})" if grouped else ""))
    finish_time_axes(ax, "rate (Gbps)", len(lines))
    return save(fig, Path(out_path or rd.file(rd.THROUGHPUT_PNG)))


class FlowRates:
    """One flow's goodput samples: ``time_ns`` and ``rate_gbps`` as arrays
    (16 bytes a sample, where a dict per CSV row was ~400)."""

    __slots__ = ("src", "dst", "time_ns", "rate_gbps")

    def __init__(self, src: str, dst: str):
        self.src, self.dst = src, dst
        self.time_ns, self.rate_gbps = array("d"), array("d")

    def add(self, time_ns: float, rate_gbps: float) -> None:
        self.time_ns.append(time_ns)
        self.rate_gbps.append(rate_gbps)


def read_flow_rates(path: Path) -> dict[int, FlowRates]:
    """flow_rate.csv read by numpy's C parser (a 32-host all-to-all's 232k rows:
    0.2 s, where a csv reader and a float() a cell took 1.7 s): flow id -> its
    samples, in time order."""
    # deferred: numpy comes with matplotlib, which only the plotting processes import
    import numpy as np
    try:
        with Path(path).open() as fh:
            header = fh.readline().strip().split(",")
    except OSError:
        return {}
    cols = ("time_ns", "flow_id", "src", "dst", "rate_gbps")
    if not set(cols) <= set(header):
        return {}
    t_i, f_i, s_i, d_i, r_i = (header.index(c) for c in cols)
    with warnings.catch_warnings():          # a file of its header alone: no rows, no warning
        warnings.simplefilter("ignore", UserWarning)
        num = np.loadtxt(path, delimiter=",", skiprows=1, usecols=(t_i, f_i, r_i), ndmin=2)
        if num.size == 0:
            return {}
        ends = np.loadtxt(path, delimiter=",", skiprows=1, usecols=(s_i, d_i), dtype=str, ndmin=2)
    fids = num[:, 1].astype(np.int64)
    order = np.argsort(fids, kind="stable")            # each flow's rows, in the file's order
    series: dict[int, FlowRates] = {}
    bounds = np.flatnonzero(np.diff(fids[order])) + 1
    # the flows in the order the file first names them (as the receivers' sums add them)
    for rows in sorted(np.split(order, bounds), key=lambda rows: rows[0]):
        fid = int(fids[rows[0]])
        f = series[fid] = FlowRates(str(ends[rows[0], 0]), str(ends[rows[0], 1]))
        t, r = num[rows, 0], num[rows, 2]
        if np.any(np.diff(t) < 0):      # written in time order; a file made otherwise is sorted
            pairs = sorted(zip(t.tolist(), r.tolist()))
            t, r = np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])
        f.time_ns, f.rate_gbps = array("d", t.tolist()), array("d", r.tolist())
    return series


def _steps(time_ns, rate_gbps) -> tuple[list[float], list[float]]:
    """A flow's rate samples as steps: a rate is stamped at the end of its
    sampling interval, drawn over the interval (the first one's start taken
    one sampling period back)."""
    t = [x / 1000 for x in time_ns]
    r = list(rate_gbps)
    if len(t) > 1:
        t, r = [t[0] - (t[1] - t[0])] + t, [r[0]] + r
    return t, r


def _flow_lines(series: dict[int, FlowRates]) -> list[tuple[str, list, list]]:
    return [(f"flow {fid} {series[fid].src}→{series[fid].dst}",
             *_steps(series[fid].time_ns, series[fid].rate_gbps)) for fid in sorted(series)]


def _receiver_lines(series: dict[int, FlowRates]) -> list[tuple[str, list, list]]:
    """Too many flows for one colour each: the goodput into each receiver
    (the samples share the sampling instants, so rates add per instant)."""
    by_dst: dict[str, dict[float, float]] = {}
    flows: dict[str, int] = {}
    for f in series.values():
        flows[f.dst] = flows.get(f.dst, 0) + 1
        acc = by_dst.setdefault(f.dst, {})
        for t, r in zip(f.time_ns, f.rate_gbps):
            acc[t] = acc.get(t, 0.0) + r
    out = []
    for dst in sorted(by_dst):
        pts = sorted(by_dst[dst].items())
        out.append((f"→{dst} ({flows[dst]} flows)",
                    *_steps([t for t, _ in pts], [r for _, r in pts])))
    return out
