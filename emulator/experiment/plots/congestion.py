"""Where the fabric congested: its queues' depth and its PFC pauses over time.

* ``plot_queue_depth``  -> ``queue_depth.png``: depth (KB) over time of every
  egress queue (switch, port, priority) that was ever non-empty, as steps;
  only the ``top_n`` deepest when there are more.
* ``plot_pause_timeline`` -> ``pause_timeline.png``: one row per paused link
  direction and priority (``node:port -> peer``, the transmitter that was
  paused), a bar over each interval it was paused: from a received pause
  frame to the resume, or to the end of its pause time (quanta x 512 bit
  times at the link rate) if no refresh or resume came first, and its total
  paused time (and share of the run) beside it. Rows come
  from the receiving side's events (``pause_rx``/``resume_rx``), or, for a
  direction with none, from the sending side's (``pause_tx``/``resume_tx``)
  (``pause_intervals``).

Both read what the switches logged (``queue_depth.csv``, ``pfc_events.csv``).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from emulator.experiment.plots.figure import colours, finish_time_axes, new_figure, save
from emulator.experiment.results_io import last_time_ns, read_result_csv
from emulator.rundir import RunDir
from emulator.wire import PFC_QUANTUM_BITS

if TYPE_CHECKING:  # pragma: no cover
    from emulator.topo import Fabric


def plot_queue_depth(results_dir: str | Path, out_path: str | Path | None = None,
                     top_n: int = 10, *, read=read_result_csv) -> Path | None:
    rd = RunDir.of(results_dir)
    rows = read(rd.file(rd.QUEUE_DEPTH_CSV))
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
    fig, ax = new_figure()
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
    finish_time_axes(ax, "queue depth (KB)", len(shown))
    return save(fig, Path(out_path or rd.file(rd.QUEUE_DEPTH_PNG)))


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
    rd = RunDir.of(results_dir)
    events = read(rd.file(rd.PFC_EVENTS_CSV))
    if not events:
        return None
    if end_ns is None:
        # the latest time of the files too big to read for it (time-sorted: their last rows)
        ends = [last_time_ns(rd.file(name)) or 0 for name in (rd.QUEUE_DEPTH_CSV, rd.FLOW_RATE_CSV)]
        end_ns = max([*ends, max(e["time_ns"] for e in events)])
    iv = pause_intervals(events, fabric, end_ns)
    if not iv:
        return None
    keys = sorted(iv, key=lambda k: (-sum(b - a for a, b in iv[k]), k))[:max_rows]
    keys.sort()
    fig, ax = new_figure(height=max(2.5, 0.9 + 0.35 * len(keys)))
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
    return save(fig, Path(out_path or rd.file(rd.PAUSE_TIMELINE_PNG)))
