"""The report's data shaping: slider frames and decimated series.

The fabric figure's slider has ``frames`` instants, evenly spaced over the
run's fabric time (``frame_times``). At each instant it shows:

* every egress queue's depth *at that instant*: the last ``queue_depth.csv``
  sample at or before it (a switch logs a queue when its depth changed since
  its previous sample, so that value holds until the next row), 0 before a
  queue's first row (``depth_at``);
* the ECN marks of each port since the previous instant (``counts_between``);
* the links paused at that instant, and for how long so far
  (``paused_at``, from ``pause_intervals``).

Series longer than a page can draw quickly are decimated (``decimate``):
the samples are cut into runs of ``k`` consecutive ones and each run is drawn
as its mean at its last sample's time; the report says by how much.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Iterable, Sequence

FRAMES = 60                 # slider positions of the fabric figure
MAX_POINTS = 400            # per drawn series, beyond which it is decimated


def frame_times(end_ns: float, frames: int = FRAMES) -> list[float]:
    """``frames`` instants from 0 to ``end_ns`` inclusive (one if the run has no span)."""
    if end_ns <= 0 or frames < 2:
        return [max(end_ns, 0.0)]
    return [end_ns * i / (frames - 1) for i in range(frames)]


def depth_at(rows: Iterable[tuple], times: Sequence[float]) -> dict[tuple, list[int]]:
    """{(node, port, priority): [depth_bytes at each of ``times``]} from
    ``(time_ns, node, port, priority, depth_bytes)`` rows (any order)."""
    series: dict[tuple, tuple[list[float], list[int]]] = {}
    for t, node, port, prio, depth in sorted(rows, key=lambda r: r[0]):
        ts, ds = series.setdefault((node, int(port), int(prio)), ([], []))
        ts.append(t)
        ds.append(int(depth))
    out = {}
    for key, (ts, ds) in series.items():
        vals = []
        for t in times:
            i = bisect.bisect_right(ts, t)
            vals.append(ds[i - 1] if i else 0)
        out[key] = vals
    return out


def counts_between(stamps: Iterable[tuple[float, tuple]], times: Sequence[float]
                   ) -> dict[tuple, list[int]]:
    """{key: [events in (times[i-1], times[i]] for each i]} (the first
    instant counts everything at or before it) from ``(time_ns, key)``."""
    out: dict[tuple, list[int]] = {}
    for t, key in stamps:
        i = bisect.bisect_left(times, t)
        if i >= len(times):
            i = len(times) - 1          # stamped after the run's span: the last frame
        out.setdefault(key, [0] * len(times))[i] += 1
    return out


@dataclass(frozen=True)
class Paused:
    since_ns: float         # the start of the pause interval holding the instant
    total_ns: float         # the transmitter's paused time over the whole run


def paused_at(intervals: dict[tuple, list[tuple[float, float]]], times: Sequence[float]
              ) -> list[dict[tuple, Paused]]:
    """For each instant, {paused transmitter key: Paused} of those paused then
    (an instant on the boundary of two spans is in the earlier one)."""
    out: list[dict[tuple, Paused]] = [{} for _ in times]
    for key, spans in intervals.items():
        spans = sorted(spans)           # pause_intervals' spans: in time order, disjoint
        total = sum(b - a for a, b in spans)
        ends = [b for _, b in spans]
        for i, t in enumerate(times):
            j = bisect.bisect_left(ends, t)     # the first span not over before t
            if j < len(spans) and spans[j][0] <= t:
                out[i][key] = Paused(spans[j][0], total)
    return out


def decimate(ts: Sequence[float], ys: Sequence[float], max_points: int = MAX_POINTS
             ) -> tuple[list[float], list[float], int]:
    """(times, values, k): the series as is (k = 1) or, if longer than
    ``max_points``, the mean of each run of k consecutive samples at its
    last sample's time."""
    n = len(ts)
    if n <= max_points:
        return list(ts), list(ys), 1
    k = -(-n // max_points)
    out_t, out_y = [], []
    for i in range(0, n, k):
        chunk = ys[i:i + k]
        out_t.append(ts[min(i + k, n) - 1])
        out_y.append(sum(chunk) / len(chunk))
    return out_t, out_y, k


__all__ = ["FRAMES", "MAX_POINTS", "Paused", "counts_between", "decimate", "depth_at",
           "frame_times", "paused_at"]
