"""Distributions and a workload's results.

* ``fct_cdf``: the CDF of the complete flows' FCT (``summary.json``).
* ``slowdown_figure``: FCT slowdown p50/p95/p99 by flow-size bucket
  (``summary.json``'s ``fct_slowdown_buckets``, as ``fct_slowdown.csv``).
* ``queue_percentiles``: each egress port's queue-depth p50/p95/p99/max
  (``queue_depth_dist.csv``), the ``MAX_PORTS`` deepest by p99 if more.
* ``collectives_figures``: nccl-tests' table (``collectives.csv``) and busbw
  against size, one line per collective and algorithm.
"""
from __future__ import annotations

from emulator.report.rundata import RunData
from emulator.report.series import MAX_POINTS
from emulator.rundir import RunDir

MAX_PORTS = 40
# nccl-tests' columns (out-of-place, then in-place), as collectives.csv names them
NCCL_COLUMNS = (("size (B)", "size_bytes"), ("count", "count"), ("type", "type"),
                ("redop", "redop"), ("time (us)", "time_us"), ("algbw (GB/s)", "algbw_GBps"),
                ("busbw (GB/s)", "busbw_GBps"), ("#wrong", "wrong"),
                ("in-place time (us)", "inplace_time_us"),
                ("in-place busbw (GB/s)", "inplace_busbw_GBps"))


def fct_points(fcts_ns: list[float], max_points: int = MAX_POINTS) -> tuple[list, list]:
    """(FCT µs, fraction of flows) of the CDF: every flow, or ``max_points``
    evenly spaced ranks (the first and the last kept) if more."""
    xs = sorted(fcts_ns)
    n = len(xs)
    ranks = range(n) if n <= max_points else sorted(
        {round(i * (n - 1) / (max_points - 1)) for i in range(max_points)})
    return [xs[i] / 1000 for i in ranks], [(i + 1) / n for i in ranks]


def fct_cdf(runs: dict[str, RunData], notes: list[str]) -> dict | None:
    """One line per run (a comparison draws them together)."""
    traces = []
    for label, data in runs.items():
        fcts = [f["fct_ns"] for f in data.summary.get("flows") or []
                if f.get("complete") and f.get("fct_ns") is not None]
        if not fcts:
            continue
        xs, ys = fct_points(fcts)
        if len(xs) < len(fcts):
            notes.append(f"FCT CDF{'' if len(runs) == 1 else ' of ' + label}: {len(xs)} of "
                         f"{len(fcts)} flows' ranks drawn (evenly spaced; the first and last kept).")
        traces.append(dict(type="scatter", x=xs, y=ys,
                           mode="lines+markers" if len(xs) <= 50 else "lines",
                           line=dict(shape="hv"), name=f"{label} ({len(fcts)} flows)"))
    if not traces:
        return None
    return dict(data=traces, layout=dict(
        title=dict(text="FCT CDF (complete flows)"), xaxis=dict(title=dict(text="FCT (µs)")),
        yaxis=dict(title=dict(text="fraction of flows"), range=[0, 1.02]), height=380))


def slowdown_figure(runs: dict[str, RunData]) -> dict | None:
    traces = []
    for label, data in runs.items():
        buckets = (data.summary.get("fct_slowdown_buckets") or {}).get("buckets") or []
        names = [f"{b['pct_from']:g}–{b['pct_to']:g} %<br>≤{b['size_max_bytes']:,} B"
                 for b in buckets]
        for p in ("p50", "p95", "p99"):
            if buckets:
                traces.append(dict(type="bar", x=names, y=[b[f"slowdown_{p}"] for b in buckets],
                                   name=p if len(runs) == 1 else f"{label} {p}"))
    if not traces:
        return None
    return dict(data=traces, layout=dict(
        title=dict(text="FCT slowdown (FCT / FCT alone on the fabric) by flow-size bucket"),
        xaxis=dict(title=dict(text="flows by size (percent of flows; largest size)")),
        yaxis=dict(title=dict(text="slowdown")), barmode="group", height=400))


def queue_percentiles(data: RunData, notes: list[str]) -> dict | None:
    rows = [r for r in data.rows(RunDir.QUEUE_DEPTH_DIST_CSV) if r.get("node") != "all"]
    rows = [r for r in rows if r.get("max_bytes")]
    if not rows:
        return None
    if len(rows) > MAX_PORTS:
        notes.append(f"Queue-depth percentiles: the {MAX_PORTS} ports deepest by p99 of "
                     f"{len(rows)} ports that queued (all in {RunDir.QUEUE_DEPTH_DIST_CSV}).")
        rows = sorted(rows, key=lambda r: (-r["p99_bytes"], r["node"], r["port"]))[:MAX_PORTS]
    names = [f"{r['node']}:{r['port']}→{r['peer']}" for r in rows]
    return dict(data=[dict(type="bar", x=names, y=[r[f"{p}_bytes"] for r in rows], name=p)
                      for p in ("p50", "p95", "p99", "max")],
                layout=dict(title=dict(text="Egress queue depth percentiles, per port (sampled "
                                            "every interval of the run)"),
                            yaxis=dict(title=dict(text="bytes")), barmode="group", height=400))


def collectives_figures(data: RunData) -> list[dict]:
    rows = data.rows(RunDir.COLLECTIVES_CSV)
    if not rows:
        return []
    table = dict(data=[dict(
        type="table",
        header=dict(values=["collective", "algorithm", "nranks", *(c for c, _ in NCCL_COLUMNS)]),
        cells=dict(values=[[r.get(k, "") for r in rows] for k in
                           ("collective", "algorithm", "nranks", *(k for _, k in NCCL_COLUMNS))]))],
        layout=dict(title=dict(text="Collectives (nccl-tests' table)"),
                    height=min(700, 160 + 28 * len(rows))))
    lines = []
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["collective"], r["algorithm"]), []).append(r)
    for (coll, algo), rs in sorted(groups.items()):
        rs.sort(key=lambda r: r["size_bytes"])
        lines.append(dict(type="scatter", x=[r["size_bytes"] for r in rs],
                          y=[r["busbw_GBps"] for r in rs], mode="lines+markers",
                          name=f"{coll} ({algo})"))
    return [table, dict(data=lines, layout=dict(
        title=dict(text="busbw against message size"),
        xaxis=dict(type="log", title=dict(text="size (bytes)")),
        yaxis=dict(title=dict(text="busbw (GB/s)")), height=400))]


__all__ = ["MAX_PORTS", "NCCL_COLUMNS", "collectives_figures", "fct_cdf", "fct_points",
           "queue_percentiles", "slowdown_figure"]
