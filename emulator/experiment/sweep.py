"""Parameter sweeps: one experiment file, one run per value of one parameter.

An experiment file may carry a ``sweep`` section::

    sweep:
      parameter: qos.ecn.kmax_bytes     # dotted path into the experiment (list items: traffic.0.size_bytes
      values: [20000, 50000, 100000]    #   or traffic[0].size_bytes); missing mappings are created

``run_sweep`` expands it into one experiment per value (the file's mapping
with the ``sweep`` key removed and the parameter set, validated when the
file is loaded -- ``experiment_from_dict``, which ``validate`` runs too --
so every value is checked before the first run),
runs each with the caller's ``run_one(exp, out_dir / "<parameter>=<value>")``
(the runner; it returns the run's summary dict), and writes into ``out_dir``:

``sweep.csv``, one row per run, in value order (columns: ``docs/design-notes.md``, "sweep.csv").

``sweep.png``: those metrics against the parameter.

``sweep.csv`` is rewritten after every run, so a sweep that stops midway
keeps the rows of the runs that finished.
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping


from emulator.atomic import atomic_open, atomic_savefig
from emulator.errors import ConfigError
from emulator.experiment.model import Experiment, experiment_from_dict, read_experiment_data
from emulator.experiment.outdir import output_dir
from emulator.rundir import RunDir
from emulator.schema.paths import path_tokens, point_name, set_path, value_label  # noqa: F401 (re-exported)

SWEEP_COLUMNS = ("value", "run_dir", "flows", "completed_flows", "complete", "fell_behind",
                 "fabric_us", "fct_mean_us", "fct_p50_us", "fct_p99_us", "slowdown_mean",
                 "slowdown_p99", "ecn_marks", "pauses", "paused_us", "drops", "headroom_drops",
                 "max_queue_bytes")

RunOne = Callable[[Experiment, Path], Mapping]


@dataclass(frozen=True)
class Sweep:
    parameter: str
    values: tuple


@dataclass(frozen=True)
class SweepPoint:
    value: Any
    name: str                # run directory name: "<parameter>=<value>"
    experiment: Experiment


# ------------------------------------------------------------------- parsing

def has_sweep(path: str | Path) -> bool:
    """Whether the experiment file has a ``sweep`` section (for the CLI to choose)."""
    data = read_experiment_data(path)
    return isinstance(data, dict) and "sweep" in data


def expand_sweep(data: dict, path: str | Path, target: str | None = None) -> tuple[Sweep, list[SweepPoint]]:
    """One validated experiment per value of the file's sweep (the loader
    checks every point: ``emulator.experiment.model``)."""
    exp = experiment_from_dict(data, path, target)
    if exp.spec.sweep is None:
        raise ConfigError(path, "sweep", "the file has no sweep section")
    sweep = Sweep(exp.spec.sweep.parameter, tuple(exp.spec.sweep.values))
    points, used = [], set()
    for i, (value, point) in enumerate(exp.sweep_points):
        name = point_name(sweep.parameter, value)
        if name in used:
            name = f"{name}#{i}"
        used.add(name)
        points.append(SweepPoint(value, name, point))
    return sweep, points


# -------------------------------------------------------------------- metrics

def _pctl(sorted_vals: list[float], p: float) -> float | None:
    if not sorted_vals:
        return None
    k = max(1, math.ceil(p / 100 * len(sorted_vals)))
    return sorted_vals[min(k, len(sorted_vals)) - 1]


def summary_metrics(summary: Mapping) -> dict:
    """One sweep.csv row's metrics (no value / run_dir) from a run's summary."""
    flows = summary.get("flows", [])
    done = [f for f in flows if f.get("complete")]
    fcts = sorted(f["fct_ns"] / 1000 for f in done if f.get("fct_ns") is not None)
    slow = sorted(f["fct_slowdown"] for f in done if f.get("fct_slowdown") is not None)
    prios = [q for p in summary.get("ports", []) for q in p.get("priorities", []) or []]

    def total(key):
        return sum(q.get(key, 0) or 0 for q in prios) if prios else None

    paused = total("paused_ns")
    return {
        "flows": len(flows), "completed_flows": len(done),
        "complete": summary.get("complete"), "fell_behind": summary.get("fell_behind"),
        "fabric_us": (summary["fabric_ns"] / 1000 if summary.get("fabric_ns") is not None else None),
        "fct_mean_us": sum(fcts) / len(fcts) if fcts else None,
        "fct_p50_us": _pctl(fcts, 50), "fct_p99_us": _pctl(fcts, 99),
        "slowdown_mean": sum(slow) / len(slow) if slow else None,
        "slowdown_p99": _pctl(slow, 99),
        "ecn_marks": total("ecn_marks"), "pauses": total("pause_tx"),
        "paused_us": paused / 1000 if paused is not None else None,
        "drops": sum(p.get("drops", 0) or 0 for p in summary.get("ports", [])),
        "headroom_drops": total("headroom_drops"),
        "max_queue_bytes": (max((q.get("max_depth_bytes", 0) or 0 for q in prios), default=0)
                            if prios else None),
    }


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"), sort_keys=True)
    return str(v)


def run_summary_paths(out_dir: str | Path) -> list[Path]:
    """The ``summary.json`` of each run a ``fabric-emu run`` kept in
    ``out_dir``: its own, or a sweep's points' in the order they ran (its
    ``sweep.csv``; a point that left no summary is skipped). Never the
    calibration's runs nor runs set aside after falling behind, which lie
    beside them."""
    rd = RunDir.of(out_dir)
    if rd.summary.exists():
        return [rd.summary]
    if not rd.sweep_csv.exists():
        return []
    with rd.sweep_csv.open(newline="") as fh:
        paths = [rd.point(r["run_dir"]).summary for r in csv.DictReader(fh)]
    return [p for p in paths if p.exists()]


def write_sweep_csv(path: str | Path, rows: list[Mapping]) -> Path:
    path = Path(path)
    with atomic_open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(SWEEP_COLUMNS)
        for r in rows:
            w.writerow([_cell(r.get(c)) for c in SWEEP_COLUMNS])
    return path


def plot_sweep(path: str | Path, rows: list[Mapping], parameter: str) -> Path | None:
    """Metrics against the parameter (numeric axis if every value is a number)."""
    if not rows:
        return None
    from matplotlib.figure import Figure     # deferred: matplotlib only when a figure is drawn

    values = [r["value"] for r in rows]
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    x = values if numeric else list(range(len(values)))
    log_x = numeric and min(values) > 0 and max(values) / min(values) >= 100
    panels = [
        ("FCT (fabric µs)", [("fct_mean_us", "mean"), ("fct_p50_us", "p50"), ("fct_p99_us", "p99")]),
        ("FCT slowdown (×)", [("slowdown_mean", "mean"), ("slowdown_p99", "p99")]),
        ("completed flows", [("completed_flows", "completed"), ("flows", "total")]),
        ("max queue depth (KB)", [("max_queue_bytes", None)]),
        ("ECN marks", [("ecn_marks", None)]),
        ("PFC pause frames sent", [("pauses", None)]),
        ("drops (packets)", [("drops", "queue"), ("headroom_drops", "headroom")]),
        ("egress time paused (µs)", [("paused_us", None)]),
    ]
    fig = Figure(figsize=(14, 6.5), dpi=100)
    axes = fig.subplots(2, 4)
    for ax, (title, keys) in zip(axes.flat, panels):
        drawn = False
        for key, label in keys:
            scale = 1 / 1000 if key == "max_queue_bytes" else 1
            pts = [(xi, r.get(key)) for xi, r in zip(x, rows) if r.get(key) is not None]
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] * scale for p in pts], marker="o", label=label)
            drawn = True
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel(parameter, fontsize="small")
        ax.grid(True, alpha=0.3)
        if log_x:
            ax.set_xscale("log")
        if not numeric:
            ax.set_xticks(x)
            ax.set_xticklabels([value_label(v) for v in values], rotation=30, fontsize="small")
        if not drawn:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes,
                    color="gray")
        elif any(label for _, label in keys):
            ax.legend(fontsize="x-small", frameon=False)
        ax.set_ylim(bottom=0)
    fig.suptitle(f"Sweep of {parameter} ({len(rows)} runs)")
    fig.tight_layout()
    return atomic_savefig(fig, path, format="png")


# ------------------------------------------------------------------- running

def run_sweep(path: str | Path, out_dir: str | Path, run_one: RunOne, *,
              target: str | None = None, data: dict | None = None,
              force: bool = False) -> list[dict]:
    """Run every point of the file's sweep; write sweep.csv and sweep.png.

    ``run_one(exp, run_out_dir)`` runs one experiment and returns its summary
    (the runner's ``run_experiment``, e.g. ``lambda e, d: run_experiment(e, d,
    console)``). An exception from it stops the sweep (after sweep.csv has
    been written with the runs so far) and propagates. ``data``: the file's
    data already read (with ``--set`` overrides); None: read the file.
    ``out_dir`` is new or an earlier run's (``outdir``; ``force``: one holding
    others' files too, kept); each point is a run directory in it.
    Returns the rows.
    """
    path = Path(path)
    data = read_experiment_data(path) if data is None else data
    sweep, points = expand_sweep(data, path, target)
    with output_dir(out_dir, force=force, what="sweep") as odir:
        odir.claim(*RunDir.SWEEP, *(pt.name for pt in points))
        rows: list[dict] = []
        rd = RunDir(odir.path)
        for pt in points:
            summary = run_one(pt.experiment, rd.point(pt.name).path)
            rows.append({"value": pt.value, "run_dir": pt.name, **summary_metrics(summary or {})})
            write_sweep_csv(rd.sweep_csv, rows)
        plot_sweep(rd.sweep_png, rows, sweep.parameter)
    return rows


__all__ = ["SWEEP_COLUMNS", "Sweep", "SweepPoint", "expand_sweep", "has_sweep",
           "path_tokens", "plot_sweep", "read_experiment_data", "run_summary_paths", "run_sweep",
           "set_path", "summary_metrics", "value_label", "write_sweep_csv"]
