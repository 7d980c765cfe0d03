"""A run as the HPCC paper reports one: FCT slowdown by flow-size bucket, and
the distribution of the switches' egress queue depths.

``slowdown_buckets``: FCT slowdown by flow-size bucket, as HPCC's ``fct_analysis.py``;
``queue_depth_distribution``: switch ports' egress depths sampled as HPCC's
``monitor_buffer`` (definitions: ``docs/design-notes.md``, "HPCC-style distributions").
"""
from __future__ import annotations

# Deferred imports: NumPy where it is used: the runner imports this module, and
# NumPy is a tenth of a second or more of its start.

from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping

from emulator.experiment.results_io import write_csv
from emulator.rundir import RunDir

if TYPE_CHECKING:  # pragma: no cover
    from emulator.experiment.model import Experiment
    from emulator.experiment.summary_file import RunSummary
    from emulator.experiment.timeseries import Results
    from emulator.topo import Fabric

BUCKET_STEP_PERCENT = 5          # fct_analysis.py's default (-s 5): 20 groups
BUCKET_COLUMNS = ("bucket", "pct_from", "pct_to", "flows", "size_min_bytes", "size_max_bytes",
                  "slowdown_p50", "slowdown_p95", "slowdown_p99", "slowdown_mean", "slowdown_max")
QUEUE_COLUMNS = ("node", "port", "peer", "samples", "mean_bytes", "p50_bytes", "p95_bytes",
                 "p99_bytes", "max_bytes")
MAX_QUEUE_SAMPLES = 2_000_000    # per port; a longer run is sampled more coarsely


# ------------------------------------------------------------ FCT slowdown

def hpcc_pctl(sorted_values: list[float], p: float) -> float:
    """fct_analysis.py's ``get_pctl``: element ``int(len x p)`` of the sorted values."""
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * p))]


def flow_slowdowns(flows: Iterable[Mapping]) -> tuple[list[tuple[int, float]], int]:
    """((size, slowdown clamped to >= 1) of every completed flow, flows left out)."""
    out, left = [], 0
    for f in flows:
        slow = f.get("fct_slowdown")
        if slow is None and f.get("complete") and f.get("fct_ns") and f.get("standalone_fct_ns"):
            slow = f["fct_ns"] / f["standalone_fct_ns"]
        if slow is None or not f.get("complete", True):
            left += 1
            continue
        out.append((int(f["bytes"]), max(1.0, float(slow))))
    return out, left


def slowdown_buckets(flows: Iterable[Mapping], step: int = BUCKET_STEP_PERCENT) -> list[dict]:
    """The rows of ``fct_slowdown.csv`` for summary.json-shaped ``flows``
    (``bytes``, ``fct_slowdown``, ``complete``); see the module docstring."""
    if not 1 <= step <= 100:
        raise ValueError(f"bucket step must be 1..100 percent (got {step})")
    pairs, _ = flow_slowdowns(flows)
    pairs.sort()
    n = len(pairs)
    rows = []
    for k, i in enumerate(range(0, 100, step)):
        group = pairs[i * n // 100:min(n, (i + step) * n // 100)]
        if not group:
            continue
        slow = sorted(s for _, s in group)
        rows.append({"bucket": k, "pct_from": i, "pct_to": min(100, i + step), "flows": len(group),
                     "size_min_bytes": group[0][0], "size_max_bytes": group[-1][0],
                     "slowdown_p50": round(hpcc_pctl(slow, 0.5), 4),
                     "slowdown_p95": round(hpcc_pctl(slow, 0.95), 4),
                     "slowdown_p99": round(hpcc_pctl(slow, 0.99), 4),
                     "slowdown_mean": round(sum(slow) / len(slow), 4),
                     "slowdown_max": round(slow[-1], 4)})
    return rows


def bucket_summary(flows: list[Mapping], step: int = BUCKET_STEP_PERCENT) -> dict:
    """summary.json's ``fct_slowdown_buckets``."""
    pairs, left = flow_slowdowns(flows)
    return {"step_percent": step, "flows": len(pairs), "excluded_flows": left,
            "buckets": slowdown_buckets(flows, step)}


# ------------------------------------------------------------- queue depth

def _nearest_rank(sorted_values, q: float):
    n = len(sorted_values)
    return sorted_values[max(0, min(n - 1, -(-n * q // 100) - 1))]


def _stats(samples) -> dict:
    """samples, mean, p50/p95/p99 (nearest rank), max of one array of depths."""
    import numpy as np
    s = np.sort(np.asarray(samples, dtype=np.int64))
    if not len(s):
        return {"samples": 0, "mean_bytes": None, "p50_bytes": None, "p95_bytes": None,
                "p99_bytes": None, "max_bytes": None}
    return {"samples": int(len(s)), "mean_bytes": round(float(s.mean()), 1),
            **{f"p{q}_bytes": int(_nearest_rank(s, q)) for q in (50, 95, 99)},
            "max_bytes": int(s[-1])}


def port_depth_samples(fabric: "Fabric", queue_depth: list[dict], end_ns: float,
                       interval_ns: float) -> tuple[dict[tuple[str, int], "object"], float]:
    """({(switch, port): its egress depth (bytes, priorities summed) at
    t = 0, interval, ... <= end_ns}, the interval used)."""
    import numpy as np
    end_ns = max(0.0, float(end_ns))
    if end_ns / interval_ns > MAX_QUEUE_SAMPLES:
        interval_ns = end_ns / MAX_QUEUE_SAMPLES
    times = np.arange(0.0, end_ns + interval_ns / 2, interval_ns)
    return port_depths_at(fabric, queue_depth, times), interval_ns


def port_depths_at(fabric: "Fabric", queue_depth: list[dict], times) -> dict[tuple[str, int], "object"]:
    """{(switch, port): its egress depth (bytes, its priorities summed) at
    each of ``times`` (fabric ns, ascending)}: each priority's last logged
    depth at or before the time, 0 before any (``queue_depth.csv`` logs
    changes). Shared with HPCC's qlen.txt (``experiment.hpcc``)."""
    import numpy as np
    series: dict[tuple[str, int], dict[int, list[tuple[float, int]]]] = {}
    for r in queue_depth:
        series.setdefault((r["node"], int(r["port"])), {}).setdefault(int(r["priority"]), []).append(
            (float(r["time_ns"]), int(r["depth_bytes"])))
    out = {}
    for sw in fabric.switches():
        for p in fabric.ports(sw):
            total = np.zeros(len(times), dtype=np.int64)
            for rows in series.get((sw.name, p.port_no), {}).values():
                rows.sort(key=lambda x: x[0])
                t = np.array([x[0] for x in rows], dtype=float)
                d = np.array([x[1] for x in rows], dtype=np.int64)
                idx = np.searchsorted(t, times, side="right") - 1
                total += np.where(idx >= 0, d[np.maximum(idx, 0)], 0)
            out[(sw.name, p.port_no)] = np.maximum(total, 0)
    return out


def queue_depth_distribution(fabric: "Fabric", queue_depth: list[dict], end_ns: float,
                             interval_ns: float) -> list[dict]:
    """The rows of ``queue_depth_dist.csv``: every switch port pooled
    (``node`` "all"), then each port."""
    import numpy as np
    samples, _ = port_depth_samples(fabric, queue_depth, end_ns, interval_ns)
    rows = []
    for (node, port), s in samples.items():
        rows.append({"node": node, "port": port, "peer": fabric.port(node, port).peer, **_stats(s)})
    pooled = np.concatenate(list(samples.values())) if samples else np.zeros(0, dtype=np.int64)
    return [{"node": "all", "port": "", "peer": "", **_stats(pooled)}] + rows


def samples_queue_depth(exp: "Experiment", target: str) -> bool:
    """Whether the run's switches sampled their queue depths."""
    return (exp.fabric.link_layer != "infiniband" and target != "bmv2"
            and exp.spec.switch.sample_interval_us > 0)


def traffic_end_ns(flows: Iterable[Mapping], fallback: float = 0.0) -> float:
    """Fabric time of the last flow's completion (from fabric time 0, the
    agents' common start); ``fallback`` without one."""
    ends = [f["start_ns"] + f["fct_ns"] for f in flows if f.get("fct_ns") is not None]
    return max(ends) if ends else fallback


# --------------------------------------------------------------- writing

def write_distributions(exp: "Experiment", rd: RunDir, summary: "RunSummary",
                        results: "Results") -> dict[str, Path]:
    """``fct_slowdown.csv`` and ``queue_depth_dist.csv`` of a run with flows,
    and their summary.json entries (``fct_slowdown_buckets``,
    ``queue_depth_dist``: added to ``summary``); {file name: path}."""
    return {**write_slowdown_buckets(rd, summary),
            **write_queue_depth_dist(exp, rd, summary, results)}


def write_slowdown_buckets(rd: RunDir, summary: "RunSummary") -> dict[str, Path]:
    """``fct_slowdown.csv`` and ``fct_slowdown_buckets`` of a run with flows:
    from the summary's flows alone (before the raw logs are read)."""
    if not summary.flows:
        return {}
    block = bucket_summary(summary.flows)
    summary.fct_slowdown_buckets = block
    return {rd.FCT_SLOWDOWN_CSV: write_csv(rd.file(rd.FCT_SLOWDOWN_CSV), BUCKET_COLUMNS,
                                           block["buckets"])}


def write_queue_depth_dist(exp: "Experiment", rd: RunDir, summary: "RunSummary",
                           results: "Results") -> dict[str, Path]:
    """``queue_depth_dist.csv`` and ``queue_depth_dist`` of a run with flows."""
    if not summary.flows:
        return {}
    if not samples_queue_depth(exp, summary.target):
        summary.queue_depth_dist = None
        return {}
    interval_ns = exp.spec.switch.sample_interval_us * 1000
    interval_ns = int(interval_ns) if interval_ns == int(interval_ns) else interval_ns
    end_ns = traffic_end_ns(summary.flows, results.end_ns)
    rows = queue_depth_distribution(exp.fabric, results.queue_depth, end_ns, interval_ns)
    summary.queue_depth_dist = {
        "interval_ns": interval_ns, "window_ns": round(end_ns),
        "ports": len(rows) - 1, **{k: v for k, v in rows[0].items()
                                   if k not in ("node", "port", "peer")}}
    return {rd.QUEUE_DEPTH_DIST_CSV: write_csv(rd.file(rd.QUEUE_DEPTH_DIST_CSV),
                                               QUEUE_COLUMNS, rows)}
