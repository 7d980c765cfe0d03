"""PNG figures of a run, drawn from its result CSVs and summary (matplotlib, Agg).

Every function reads what ``timeseries.write_results`` wrote into a results
directory (so figures can be redrawn later without the raw logs), draws one
figure with fabric time in µs on the x axis, and returns the PNG's path, or
None when there is nothing to draw (and then writes no file):

* ``plot_queue_depth``  -> ``queue_depth.png``: depth (KB) over time of every
  egress queue (switch, port, priority) that was ever non-empty, as steps;
  only the ``top_n`` deepest when there are more.
* ``plot_throughput``   -> ``throughput.png``: each flow's goodput (Gbps) over
  time (``flow_rate.csv``), one colour each; beyond ``MAX_DISTINCT`` flows,
  the goodput into each receiver.
* ``plot_pause_timeline`` -> ``pause_timeline.png``: one row per paused link
  direction and priority (``node:port -> peer``, the transmitter that was
  paused), a bar over each interval it was paused: from a received pause
  frame to the resume, or to the end of its pause time (quanta x 512 bit
  times at the link rate) if no refresh or resume came first, and its total
  paused time (and share of the run) beside it. Rows come
  from the receiving side's events (``pause_rx``/``resume_rx``), or, for a
  direction with none, from the sending side's (``pause_tx``/``resume_tx``).
* ``plot_fct_cdf``      -> ``fct_cdf.png``: CDF of FCT slowdown (fct /
  standalone fct) of the completed flows; the title quotes a percentile
  only with enough flows for it (``PERCENTILE_MIN_FLOWS``), and the max.

* ``plot_fct_slowdown`` -> ``fct_slowdown.png``: FCT slowdown by flow-size
  bucket (``fct_slowdown.csv``, ``distributions.py``), p95 and p50, log
  scale, as the HPCC paper's figures (``plot_slowdown_buckets`` draws
  several runs on one: ``fabric-emu compare``).

Legends sit beside the axes, never over the data.

``write_plots(results_dir, summary)`` draws all five.
"""
from __future__ import annotations

from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Collection, Mapping

from emulator.atomic import atomic_savefig
from emulator.experiment.results_io import read_result_columns, read_result_csv
from emulator.wire import PFC_QUANTUM_BITS

if TYPE_CHECKING:  # pragma: no cover
    from emulator.topo import Fabric

PLOT_FILES = ("queue_depth.png", "throughput.png", "pause_timeline.png", "fct_cdf.png",
              "fct_slowdown.png")
MAX_DISTINCT = 40         # series drawn one colour each, beyond: grouped (throughput: by receiver)
DPI = 110
# percentiles a CDF's title quotes need this many flows to mean anything
PERCENTILE_MIN_FLOWS = {50: 2, 90: 10, 99: 100}


def _figure(width: float = 9.0, height: float = 4.8):
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=DPI)
    return fig, fig.add_subplot(1, 1, 1)


def _save(fig, path: Path) -> Path:
    # bbox_inches="tight" grows the image to its labels and the legend outside the
    # axes; a tight_layout() before it would lay the same text out a second time.
    return atomic_savefig(fig, path, format="png", bbox_inches="tight")


def prewarm() -> None:
    """Import matplotlib and draw a small figure once (fonts, the Agg canvas):
    what the first figure would otherwise spend (``plotter.Plotter`` does
    this while the run goes on)."""
    import io
    fig, ax = _figure(2.0, 1.5)
    ax.plot([0, 1], [0, 1], label="x")
    ax.set_title("x")
    _legend(ax, 1)
    fig.savefig(io.BytesIO(), format="png", bbox_inches="tight")


def colours(n: int) -> list:
    """``n`` distinct colours (n <= MAX_DISTINCT): tab10 first, then tab20b/tab20c's."""
    from matplotlib import colormaps
    base = list(colormaps["tab10"].colors)
    extra = [c for name in ("tab20b", "tab20c") for c in colormaps[name].colors]
    return (base + extra[::2] + extra[1::2])[:n]


def _legend(ax, n: int) -> None:
    """The legend beside the axes, never over the data; two columns beyond 20 entries."""
    if n:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  frameon=False, ncol=1 if n <= 20 else 2, borderaxespad=0.0)


# -------------------------------------------------------------- queue depth

def plot_queue_depth(results_dir: str | Path, out_path: str | Path | None = None,
                     top_n: int = 10, *, read=read_result_csv) -> Path | None:
    results_dir = Path(results_dir)
    rows = read(results_dir / "queue_depth.csv")
    series: dict[tuple, list[tuple[float, int]]] = {}
    for r in rows:
        series.setdefault((r["node"], r["port"], r["priority"]), []).append(
            (r["time_ns"] / 1000, r["depth_bytes"]))
    series = {k: sorted(v) for k, v in series.items() if max(d for _, d in v) > 0}
    if not series:
        return None
    end_us = max(r["time_ns"] for r in rows) / 1000
    ranked = sorted(series, key=lambda k: (-max(d for _, d in series[k]), k))
    shown = ranked[:top_n]
    fig, ax = _figure()
    for key, colour in zip(shown, colours(len(shown))):
        pts = series[key]
        t = [0.0] + [p[0] for p in pts] + [end_us]
        d = [0.0] + [p[1] / 1000 for p in pts] + [pts[-1][1] / 1000]
        ax.step(t, d, where="post", linewidth=1.2, color=colour,
                label=f"{key[0]} port {key[1]} prio {key[2]}")
    title = "Egress queue depth"
    if len(ranked) > len(shown):
        title += f" ({len(shown)} deepest of {len(ranked)} non-empty queues)"
    ax.set_title(title)
    ax.set_xlabel("fabric time (µs)")
    ax.set_ylabel("queue depth (KB)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    _legend(ax, len(shown))
    return _save(fig, Path(out_path or results_dir / "queue_depth.png"))


# --------------------------------------------------------------- throughput

def plot_throughput(results_dir: str | Path, out_path: str | Path | None = None,
                    *, read=read_result_csv) -> Path | None:
    """``read`` is not used: flow_rate.csv is streamed into per-flow arrays
    (``read_flow_rates``), never held as a dict per row."""
    results_dir = Path(results_dir)
    series = read_flow_rates(results_dir / "flow_rate.csv")
    if not series:
        return None
    grouped = len(series) > MAX_DISTINCT
    lines = _flow_lines(series) if not grouped else _receiver_lines(series)
    fig, ax = _figure()
    for (label, t, r), colour in zip(lines, colours(len(lines))):
        ax.plot(t, r, linewidth=1.0, drawstyle="steps-pre", color=colour, label=label)
    ax.set_title(f"Per-flow goodput (acknowledged bytes), {len(series)} flows"
                 + (f"; summed per receiver ({len(lines)})" if grouped else ""))
    ax.set_xlabel("fabric time (µs)")
    ax.set_ylabel("rate (Gbps)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    _legend(ax, len(lines))
    return _save(fig, Path(out_path or results_dir / "throughput.png"))


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


# ----------------------------------------------------------- pause timeline

def pause_intervals(events: list[dict], fabric: "Fabric | None" = None,
                    end_ns: float | None = None) -> dict[tuple[str, int, str, int], list[tuple[float, float]]]:
    """(node, port, peer, priority) of a paused transmitter -> [(start_ns, end_ns)].

    ``fabric`` gives each port's rate, to end a pause whose time runs out
    without a resume (without it, a pause lasts until the resume or the end).
    """
    end_ns = end_ns if end_ns is not None else max((e["time_ns"] for e in events), default=0.0)
    rx: dict[tuple, list[tuple[float, int]]] = {}
    tx_as_rx: dict[tuple, list[tuple[float, int]]] = {}
    for e in events:
        quanta = int(e.get("quanta", 0) or 0)
        pause = e["event"].startswith("pause")
        q = quanta if pause else 0
        if pause and q == 0:
            q = 0xFFFF          # a pause without its time: the switches' default
        if e["event"] in ("pause_rx", "resume_rx"):
            key = (e["node"], int(e["port"]), str(e.get("peer", "")), int(e["priority"]))
            rx.setdefault(key, []).append((e["time_ns"], q))
        elif e["event"] in ("pause_tx", "resume_tx"):
            # Sent out of (node, port): the peer's transmitter toward node pauses.
            peer, peer_port = str(e.get("peer", "")), -1
            if fabric is not None:
                try:
                    p = fabric.port(e["node"], int(e["port"]))
                    peer, peer_port = p.peer, p.peer_port_no
                except KeyError:
                    pass
            key = (peer, peer_port, e["node"], int(e["priority"]))
            tx_as_rx.setdefault(key, []).append((e["time_ns"], q))
    for key, evs in tx_as_rx.items():
        if key not in rx:
            rx[key] = evs
    out = {}
    for key, evs in rx.items():
        rate_bits_per_ns = None
        if fabric is not None and key[1] >= 0:
            try:
                rate_bits_per_ns = fabric.links[fabric.port(key[0], key[1]).link_index].rate_bps / 1e9
            except KeyError:
                pass
        intervals, start, until = [], None, None
        for t, q in sorted(evs):
            if start is not None and until is not None and t > until:
                intervals.append((start, until))
                start = None
            if q > 0:
                if start is None:
                    start = t
                until = (t + q * PFC_QUANTUM_BITS / rate_bits_per_ns) if rate_bits_per_ns else None
            elif start is not None:
                intervals.append((start, t))
                start = None
        if start is not None:
            stop = end_ns if until is None else min(until, max(end_ns, start))
            intervals.append((start, stop))
        intervals = [(a, b) for a, b in intervals if b >= a]
        if intervals:
            out[key] = intervals
    return out


def plot_pause_timeline(results_dir: str | Path, out_path: str | Path | None = None,
                        fabric: "Fabric | None" = None, end_ns: float | None = None,
                        max_rows: int = 40, *, read=read_result_csv) -> Path | None:
    results_dir = Path(results_dir)
    events = read(results_dir / "pfc_events.csv")
    if not events:
        return None
    if end_ns is None:
        ends = [max((r["time_ns"] for r in read(results_dir / "queue_depth.csv")), default=0),
                max((t for t, in read_result_columns(results_dir / "flow_rate.csv", ("time_ns",))),
                    default=0)]
        end_ns = max([*ends, max(e["time_ns"] for e in events)])
    iv = pause_intervals(events, fabric, end_ns)
    if not iv:
        return None
    keys = sorted(iv, key=lambda k: (-sum(b - a for a, b in iv[k]), k))[:max_rows]
    keys.sort()
    fig, ax = _figure(height=max(2.5, 0.9 + 0.35 * len(keys)))
    for row, key in enumerate(keys):
        spans = [(a / 1000, max((b - a) / 1000, end_ns / 1000 * 2e-3)) for a, b in iv[key]]
        ax.broken_barh(spans, (row - 0.35, 0.7), facecolors="tab:red", alpha=0.8)
        paused = sum(b - a for a, b in iv[key])
        ax.annotate(f"{paused / 1000:.1f} µs ({100 * paused / max(end_ns, 1):.0f} %)",
                    (1.01, row), xycoords=("axes fraction", "data"), va="center",
                    fontsize="small")                          # this row's total, beside it
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([f"{k[0]}:{k[1]}→{k[2]} prio {k[3]}" if k[1] >= 0 else
                        f"{k[0]}→{k[2]} prio {k[3]}" for k in keys], fontsize="small")
    ax.set_ylim(-0.7, len(keys) - 0.3)
    ax.set_xlim(0, max(end_ns / 1000, 1e-3))
    ax.set_xlabel("fabric time (µs)")
    total = sum(b - a for k in iv for a, b in iv[k])
    ax.set_title(f"PFC: paused transmitters (sender → peer, priority); "
                 f"{len(iv)} paused, {total / 1000:.1f} µs paused in total")
    ax.grid(True, axis="x", alpha=0.3)
    return _save(fig, Path(out_path or results_dir / "pause_timeline.png"))


# ------------------------------------------------------------------ FCT CDF

def _slowdowns(summary: Mapping | None, results_dir: Path) -> list[float]:
    out = []
    for f in (summary or {}).get("flows", []):
        if f.get("complete") and f.get("fct_slowdown") is not None:
            out.append(float(f["fct_slowdown"]))
        elif f.get("complete") and f.get("fct_ns") and f.get("standalone_fct_ns"):
            out.append(f["fct_ns"] / f["standalone_fct_ns"])
    if not out and summary is None:           # no summary: HPCC's fct.txt, $7 / $8
        try:
            for line in (results_dir / "fct.txt").read_text().splitlines():
                cols = line.split()
                if len(cols) >= 8 and float(cols[7]) > 0:
                    out.append(float(cols[6]) / float(cols[7]))
        except (OSError, ValueError):
            pass
    return sorted(out)


def cdf_title(slow: list[float]) -> str:
    """The CDF's title: the percentiles its flow count supports (nearest rank), and the max."""
    n = len(slow)
    quoted = [f"p{q} {slow[min(n - 1, max(0, -(-q * n // 100) - 1))]:.2f}"
              for q, need in PERCENTILE_MIN_FLOWS.items() if n >= need]
    return (f"FCT slowdown (FCT / standalone FCT), {n} flow{'s' if n > 1 else ''}: "
            + ", ".join([*quoted, f"max {slow[-1]:.2f}"]))


def plot_fct_cdf(results_dir: str | Path, summary: Mapping | None = None,
                 out_path: str | Path | None = None) -> Path | None:
    results_dir = Path(results_dir)
    slow = _slowdowns(summary, results_dir)
    if not slow:
        return None
    n = len(slow)
    y = [(i + 1) / n for i in range(n)]
    fig, ax = _figure(7.0, 4.8)
    ax.step([slow[0]] + slow, [0.0] + y, where="post", linewidth=1.5, color="tab:blue")
    ax.axvline(1.0, color="gray", linestyle="--", linewidth=1, label="ideal (alone on its path)")
    if slow[-1] / max(slow[0], 1e-9) > 20:
        ax.set_xscale("log")
    ax.set_title(cdf_title(slow))
    ax.set_xlabel("FCT slowdown (×)")
    ax.set_ylabel("fraction of flows (CDF)")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="lower right", frameon=False)
    return _save(fig, Path(out_path or results_dir / "fct_cdf.png"))


# ------------------------------------------------- FCT slowdown by flow size

def size_label(n: float) -> str:
    """A flow size on an axis: 1 KB = 1000 bytes, as the paper's figures."""
    for unit, div in (("MB", 1e6), ("KB", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{int(n)}B"


def plot_slowdown_buckets(path: str | Path, series: Mapping[str, list[Mapping]],
                          title: str | None = None) -> Path | None:
    """FCT slowdown against flow size, as the HPCC paper's figures: per run
    (``series``: label -> rows of ``distributions.slowdown_buckets``) its p95
    (solid) and p50 (dashed) by bucket; x: the buckets, labelled by their
    largest size (the first run's), y: log. None without rows."""
    series = {k: list(v) for k, v in series.items() if v}
    if not series:
        return None
    fig, ax = _figure()
    draw_slowdown_buckets(ax, series, title)
    _legend(ax, 2 * len(series))
    return _save(fig, Path(path))


def draw_slowdown_buckets(ax, series: Mapping[str, list[Mapping]], title: str | None = None) -> None:
    """``plot_slowdown_buckets``'s lines on ``ax`` (``series`` not empty)."""
    first = next(iter(series.values()))
    for (label, rows), colour in zip(series.items(), colours(len(series))):
        x = [r["bucket"] for r in rows]
        name = f"{label} " if label else ""
        ax.plot(x, [r["slowdown_p95"] for r in rows], marker="o", markersize=3, color=colour,
                linewidth=1.5, label=f"{name}p95")
        ax.plot(x, [r["slowdown_p50"] for r in rows], marker="o", markersize=3, color=colour,
                linewidth=1.2, linestyle="--", label=f"{name}p50")
    _log_slowdown_axis(ax, [r[k] for rows in series.values() for r in rows
                            for k in ("slowdown_p50", "slowdown_p95")])
    ax.set_xticks([r["bucket"] for r in first], [size_label(r["size_max_bytes"]) for r in first],
                  rotation=45, ha="right", fontsize="small")
    ax.set_xlabel(f"flow size (the largest of each {first[0]['pct_to'] - first[0]['pct_from']} % "
                  "of the flows, by size)")
    ax.set_ylabel("FCT slowdown (FCT / standalone FCT)")
    n = sum(r["flows"] for r in first)
    ax.set_title(title or f"FCT slowdown by flow size, {n} flows")
    ax.grid(True, which="both", alpha=0.3)


def _log_slowdown_axis(ax, values: list[float]) -> None:
    """A log y axis from just under 1 (no slowdown, where buckets are clamped)
    with plain numbers; minor ticks labelled too when it spans little."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    ax.set_yscale("log")
    top = max(values, default=1.0)
    ax.set_ylim(0.95, max(top * 1.15, 1.5))
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain if top < 20 else NullFormatter())


def plot_fct_slowdown(results_dir: str | Path, out_path: str | Path | None = None,
                      *, read=read_result_csv) -> Path | None:
    """``fct_slowdown.png`` from the run's ``fct_slowdown.csv``."""
    results_dir = Path(results_dir)
    return plot_slowdown_buckets(out_path or results_dir / "fct_slowdown.png",
                                 {"": read(results_dir / "fct_slowdown.csv")})


# ------------------------------------------------------------- collectives

def plot_busbw(rows: list[Mapping], out_path: str | Path, link_rate_GBps: float | None = None) -> Path | None:
    """Bus bandwidth against message size, one line per collective and
    algorithm (nccl-tests' busbw, fabric time), with the NIC link rate for
    reference; None without rows."""
    if not rows:
        return None
    fig, ax = _figure()
    lines: dict[tuple, list] = {}
    for r in rows:
        lines.setdefault((r["collective"], r["algorithm"]), []).append((r["size_bytes"], r["busbw_GBps"]))
    for (coll, algo), pts in sorted(lines.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{coll} ({algo})")
    if link_rate_GBps:
        ax.axhline(link_rate_GBps, color="grey", linestyle="--", linewidth=1,
                   label=f"NIC link {link_rate_GBps:g} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_ylim(bottom=0)
    ax.set_title("collectives: bus bandwidth by size")
    _legend(ax, len(lines) + 1)
    return _save(fig, Path(out_path))


# --------------------------------------------------------------------- all

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
        "queue_depth.png": lambda: plot_queue_depth(results_dir, read=read),
        "throughput.png": lambda: plot_throughput(results_dir, read=read),
        "pause_timeline.png": lambda: plot_pause_timeline(results_dir, fabric=fabric, read=read),
        "fct_cdf.png": lambda: plot_fct_cdf(results_dir, summary),
        "fct_slowdown.png": lambda: plot_fct_slowdown(results_dir, read=read),
    }
    unknown = set(only or ()) - draw.keys()
    if unknown:
        raise ValueError(f"no such figure: {', '.join(sorted(unknown))}")
    out = {name: f() for name, f in draw.items() if only is None or name in only}
    return {k: v for k, v in out.items() if v is not None}


__all__ = ["PLOT_FILES", "draw_slowdown_buckets", "pause_intervals", "plot_busbw", "plot_fct_cdf",
           "plot_fct_slowdown",
           "plot_pause_timeline", "plot_queue_depth", "plot_slowdown_buckets", "plot_throughput",
           "size_label", "write_plots"]
