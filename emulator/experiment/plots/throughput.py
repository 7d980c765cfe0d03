"""How fast each flow went: ``throughput.png``, each flow's goodput over time.

``plot_throughput`` draws each flow's goodput (Gbps, ``flow_rate.csv``) one
colour each; beyond ``MAX_DISTINCT`` flows, the goodput into each receiver.
flow_rate.csv holds a sample per flow per sampling interval, so it is
streamed into per-flow arrays (``read_flow_rates``, ``FlowRates``), never
held as a dict per row.
"""
from __future__ import annotations

from array import array
from pathlib import Path

from emulator.experiment.plots.figure import MAX_DISTINCT, colours, finish_time_axes, new_figure, save
from emulator.experiment.results_io import read_result_columns, read_result_csv
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
    """flow_rate.csv streamed: flow id -> its samples, in time order."""
    series: dict[int, FlowRates] = {}
    for t, fid, src, dst, rate in read_result_columns(
            path, ("time_ns", "flow_id", "src", "dst", "rate_gbps")):
        f = series.get(fid)
        if f is None:
            f = series[fid] = FlowRates(str(src), str(dst))
        f.add(t, rate)
    for f in series.values():      # written in time order; a file made otherwise is sorted
        if any(b < a for a, b in zip(f.time_ns, f.time_ns[1:])):
            pairs = sorted(zip(f.time_ns, f.rate_gbps))
            f.time_ns = array("d", (t for t, _ in pairs))
            f.rate_gbps = array("d", (r for _, r in pairs))
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
