"""The gNMI collector's samples (``telemetry.csv``, docs/telemetry.md), beside
the switches' own series: what a telemetry system watching the fabric saw.

* each port's transmit rate between consecutive samples, from its
  ``out-octets`` counter (ports that sent nothing are left out), with the
  oper-status changes as markers on the time axis;
* each egress queue's depth at the samples (``fabric-emu/depth-octets``;
  queues that stayed empty are left out) -- the same queues as the fabric
  figure's, at the collector's instants rather than every change.

Series past ``series.MAX_POINTS`` are decimated (the report states it).
"""
from __future__ import annotations

import csv
from collections import defaultdict

from emulator.report.rundata import RunData
from emulator.report.series import MAX_POINTS, decimate
from emulator.rundir import RunDir

OUT_OCTETS = "/state/counters/out-octets"
DEPTH = "/state/fabric-emu/depth-octets"
OPER = "/state/oper-status"


def _key(path: str) -> str:
    """``IF`` or ``IF q N`` from a leaf's path (its keys' values)."""
    keys = [part.split("=", 1)[1].split("]", 1)[0] for part in path.split("[")[1:]]
    return keys[0] if len(keys) == 1 else f"{keys[0]} q{keys[1]}"


def read_telemetry(data: RunData) -> tuple[dict, dict, list]:
    """(out-octets series, depth series, oper-status changes) of the run's telemetry.csv."""
    octets, depth, oper = defaultdict(list), defaultdict(list), []
    with data.rd.file(RunDir.TELEMETRY_CSV).open(newline="") as f:
        rows = csv.reader(f)
        next(rows, None)
        for t, sw, path, value in rows:
            if path.endswith(OUT_OCTETS):
                octets[(sw, _key(path))].append((int(t), int(value)))
            elif path.endswith(DEPTH):
                depth[(sw, _key(path))].append((int(t), int(value)))
            elif path.endswith(OPER) and int(t) > 0:
                oper.append((int(t), sw, _key(path), value))
    return octets, depth, oper


def _lines(series: dict, notes: list[str], what: str) -> list[dict]:
    """A line per key of ``series`` ({(switch, key): [(ns, y)]}) that is not all 0."""
    traces, worst = [], 1
    for (sw, key), pts in sorted(series.items()):
        if not any(y for _, y in pts):
            continue
        ts, ys, k = decimate([t / 1000 for t, _ in pts], [y for _, y in pts])
        worst = max(worst, k)
        traces.append(dict(type="scatter", x=ts, y=ys, mode="lines", name=f"{sw} {key}"))
    if worst > 1:
        notes.append(f"Telemetry {what}: series of more than {MAX_POINTS} samples are drawn as "
                     f"the means of runs of consecutive samples (up to {worst} per point).")
    return traces


def rates(pts: list[tuple[int, int]]) -> list[tuple[int, float]]:
    """(ns, Gbps) between consecutive counter samples, at the later one's time."""
    return [(t1, (b - a) * 8 / (t1 - t0)) for (t0, a), (t1, b) in zip(pts, pts[1:]) if t1 > t0]


def telemetry_figures(data: RunData, notes: list[str]) -> list[dict]:
    """The telemetry figures of a run that collected it ([] if it did not)."""
    if not data.has(RunDir.TELEMETRY_CSV):
        return []
    octets, depth, oper = read_telemetry(data)
    traces = _lines({k: rates(v) for k, v in octets.items()}, notes, "rates")
    if oper:
        traces.append(dict(type="scatter", x=[t / 1000 for t, *_ in oper], y=[0] * len(oper),
                           mode="markers", name="oper-status change",
                           marker=dict(symbol="x", size=11, color="crimson"),
                           text=[f"{sw} {key} {v}" for _, sw, key, v in oper], hoverinfo="text+x"))
    figs = [dict(data=traces, layout=dict(
        title=dict(text="Port transmit rate from gNMI out-octets samples (× oper-status changes)"),
        xaxis=dict(title=dict(text="fabric time (µs)")), yaxis=dict(title=dict(text="Gbps")),
        height=420))]
    queues = _lines({k: [(t, v / 1000) for t, v in pts] for k, pts in depth.items()},
                    notes, "queue depths")
    if queues:
        figs.append(dict(data=queues, layout=dict(
            title=dict(text="Egress queue depth at the gNMI samples"),
            xaxis=dict(title=dict(text="fabric time (µs)")), yaxis=dict(title=dict(text="KB")),
            height=420)))
    return figs


__all__ = ["rates", "read_telemetry", "telemetry_figures"]
