"""How long flows took against how long they would alone: FCT slowdown.

* ``plot_fct_cdf``      -> ``fct_cdf.png``: CDF of FCT slowdown (fct /
  standalone fct) of the completed flows; the title quotes a percentile
  only with enough flows for it (``PERCENTILE_MIN_FLOWS``), and the max.
* ``plot_fct_slowdown`` -> ``fct_slowdown.png``: FCT slowdown by flow-size
  bucket (``fct_slowdown.csv``, ``distributions.py``), p95 and p50, log
  scale, as the HPCC paper's figures (``plot_slowdown_buckets`` draws
  several runs on one: ``fabric-emu compare``, which also draws
  ``draw_slowdown_buckets``' lines on axes of its own).
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from emulator.experiment.plots.figure import colours, legend, new_figure, save
from emulator.experiment.results_io import read_result_csv
from emulator.rundir import RunDir

# percentiles a CDF's title quotes need this many flows to mean anything
PERCENTILE_MIN_FLOWS = {50: 2, 90: 10, 99: 100}


def _slowdowns(summary: Mapping | None, rd: RunDir) -> list[float]:
    out = []
    for f in (summary or {}).get("flows", []):
        if f.get("complete") and f.get("fct_slowdown") is not None:
            out.append(float(f["fct_slowdown"]))
        elif f.get("complete") and f.get("fct_ns") and f.get("standalone_fct_ns"):
            out.append(f["fct_ns"] / f["standalone_fct_ns"])
    if not out and summary is None:           # no summary: HPCC's fct.txt, $7 / $8
        try:
            for line in rd.file(rd.FCT_TXT).read_text().splitlines():
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
    rd = RunDir.of(results_dir)
    slow = _slowdowns(summary, rd)
    if not slow:
        return None
    n = len(slow)
    y = [(i + 1) / n for i in range(n)]
    fig, ax = new_figure(7.0, 4.8)
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
    return save(fig, Path(out_path or rd.file(rd.FCT_CDF_PNG)))


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
    fig, ax = new_figure()
    draw_slowdown_buckets(ax, series, title)
    legend(ax, 2 * len(series))
    return save(fig, Path(path))


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
    from matplotlib.ticker import FuncFormatter, NullFormatter   # deferred: see figure.py
    ax.set_yscale("log")
    top = max(values, default=1.0)
    ax.set_ylim(0.95, max(top * 1.15, 1.5))
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain if top < 20 else NullFormatter())


def plot_fct_slowdown(results_dir: str | Path, out_path: str | Path | None = None,
                      *, read=read_result_csv) -> Path | None:
    """``fct_slowdown.png`` from the run's ``fct_slowdown.csv``."""
    rd = RunDir.of(results_dir)
    return plot_slowdown_buckets(out_path or rd.file(rd.FCT_SLOWDOWN_PNG),
                                 {"": read(rd.file(rd.FCT_SLOWDOWN_CSV))})
