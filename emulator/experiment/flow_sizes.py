"""Flow-size distributions of data-centre workloads, as data: the one place
the traffic generator (``traffic_gen.py``) and its checks take them from.

A distribution is a piecewise-linear CDF, ``(size_bytes, cumulative_percent)``
points from ``(0, 0)`` to ``(max, 100)``, strictly increasing in both: a size
is drawn by inverting it (a uniform percentile, linear between the points),
and its mean is the trapezoid sum -- exactly what the HPCC simulator's
generator does (``traffic_gen/custom_rand.py``: ``getValueFromPercentile``,
``getAvg``).

``websearch``: the web-search workload of DCTCP (Alizadeh et al., SIGCOMM
2010), as the HPCC paper (Li et al., SIGCOMM 2019) uses it; the points are
those of alibaba-edu/High-Precision-Congestion-Control,
``traffic_gen/WebSearch_distribution.txt`` (mean 1,711,250 bytes; half the
flows are under 65 KB, the largest 30 MB).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

# alibaba-edu/High-Precision-Congestion-Control traffic_gen/WebSearch_distribution.txt
WEBSEARCH: tuple[tuple[int, float], ...] = (
    (0, 0), (10_000, 15), (20_000, 20), (30_000, 30), (50_000, 40), (80_000, 53),
    (200_000, 60), (1_000_000, 70), (2_000_000, 80), (5_000_000, 90), (10_000_000, 97),
    (30_000_000, 100),
)


@dataclass(frozen=True)
class FlowSizeCdf:
    """A piecewise-linear flow-size CDF (see the module docstring)."""

    name: str
    points: tuple[tuple[float, float], ...]
    source: str = ""

    def __post_init__(self):
        pts = self.points
        if len(pts) < 2 or pts[0][1] != 0 or pts[-1][1] != 100 or pts[0][0] < 0:
            raise ValueError(f"CDF {self.name}: must run from (size >= 0, 0 %) to (size, 100 %)")
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            if not (x1 > x0 and y1 > y0):
                raise ValueError(f"CDF {self.name}: sizes and percents must both increase")

    @property
    def max_bytes(self) -> float:
        return self.points[-1][0]

    def mean(self) -> float:
        """The mean size (bytes): HPCC's ``getAvg``."""
        return sum((x0 + x1) / 2 * (y1 - y0)
                   for (x0, y0), (x1, y1) in zip(self.points, self.points[1:])) / 100

    def size_at(self, u: float) -> float:
        """The size at quantile ``u`` (0..1): HPCC's ``getValueFromPercentile(100 u)``."""
        y = min(100.0, max(0.0, u * 100))
        for (x0, y0), (x1, y1) in zip(self.points, self.points[1:]):
            if y <= y1:
                return x0 + (x1 - x0) / (y1 - y0) * (y - y0)
        return self.max_bytes

    def clamped_mean(self, scale: float = 1.0, low: float = 0.0, high: float = math.inf) -> float:
        """The exact mean of ``min(high, max(low, scale x size))`` (bytes): a
        drawn size scaled, then clamped to what a flow may be. Within a
        segment the size is uniform, so each segment's share is the mean of
        a clamped uniform variable."""
        total = 0.0
        for (x0, y0), (x1, y1) in zip(self.points, self.points[1:]):
            a, b = x0 * scale, x1 * scale
            total += (y1 - y0) / 100 * _clamped_uniform_mean(a, b, low, high)
        return total


def _clamped_uniform_mean(a: float, b: float, low: float, high: float) -> float:
    """E[min(high, max(low, V))] for V uniform on [a, b] (a < b)."""
    lo_part = (min(b, low) - a) * low if a < low else 0.0      # V below low
    hi_part = (b - max(a, high)) * high if b > high else 0.0   # V above high
    m0, m1 = max(a, low), min(b, high)                         # V within [low, high]
    mid_part = (m1 * m1 - m0 * m0) / 2 if m1 > m0 else 0.0
    return (lo_part + mid_part + hi_part) / (b - a)


DISTRIBUTIONS: dict[str, FlowSizeCdf] = {
    "websearch": FlowSizeCdf("websearch", WEBSEARCH,
                             "DCTCP web search (alibaba-edu/High-Precision-Congestion-Control "
                             "traffic_gen/WebSearch_distribution.txt)"),
}

__all__ = ["DISTRIBUTIONS", "FlowSizeCdf", "WEBSEARCH"]
