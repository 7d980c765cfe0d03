"""How every figure of a run looks and is written: size, resolution, colours,
where the legend goes, the PNG saved atomically.

Shared by every family of plots (and ``compare``'s figures), so a run's
figures read alike; ``prewarm`` pays matplotlib's first-figure costs ahead
of time (``plotter.Plotter`` calls it while the run goes on).
"""
from __future__ import annotations

import io
from pathlib import Path

# Deferred imports: matplotlib (a second on a cold start) when a figure is made:
# the runner imports this package, and draws in a process of its own (plotter.py).

from emulator.atomic import atomic_savefig

MAX_DISTINCT = 40         # series drawn one colour each, beyond: grouped (throughput: by receiver)
DPI = 110


def new_figure(width: float = 9.0, height: float = 4.8):
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=DPI)
    return fig, fig.add_subplot(1, 1, 1)


def save(fig, path: Path) -> Path:
    # bbox_inches="tight" grows the image to its labels and the legend outside the
    # axes; a tight_layout() before it would lay the same text out a second time.
    return atomic_savefig(fig, path, format="png", bbox_inches="tight")


def finish_time_axes(ax, ylabel: str, n_series: int) -> None:
    """A time series' axes as every run's are: fabric µs from 0, values
    from 0, a light grid, the legend beside."""
    ax.set_xlabel("fabric time (µs)")
    ax.set_ylabel(ylabel)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    legend(ax, n_series)


def prewarm() -> None:
    """Import matplotlib and draw a small figure once (fonts, the Agg canvas):
    what the first figure would otherwise spend (``plotter.Plotter`` does
    this while the run goes on)."""
    fig, ax = new_figure(2.0, 1.5)
    ax.plot([0, 1], [0, 1], label="x")
    ax.set_title("x")
    legend(ax, 1)
    fig.savefig(io.BytesIO(), format="png", bbox_inches="tight")


def colours(n: int) -> list:
    """``n`` distinct colours (n <= MAX_DISTINCT): tab10 first, then tab20b/tab20c's."""
    from matplotlib import colormaps
    base = list(colormaps["tab10"].colors)
    extra = [c for name in ("tab20b", "tab20c") for c in colormaps[name].colors]
    return (base + extra[::2] + extra[1::2])[:n]


def legend(ax, n: int) -> None:
    """The legend beside the axes, never over the data; two columns beyond 20 entries."""
    if n:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  frameon=False, ncol=1 if n <= 20 else 2, borderaxespad=0.0)
