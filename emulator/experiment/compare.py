"""Runs of the same work on two fabrics, side by side: one table and one
figure (``fabric-emu compare A.yaml B.yaml``; RoCE against InfiniBand is
what it is for: ``experiments/incast-pfc.yaml`` against
``experiments/incast-ib.yaml``, and the other ``*-ib.yaml`` twins).

From each run's ``summary.json``, in fabric time: FCTs and slowdowns, drops and
retransmissions, held time (PFC pauses or credit stalls), the deepest queue, the busiest
link, busbw (every column: ``docs/design-notes.md``, "fabric-emu compare: the columns").

``comparison.csv`` (one row per run), ``comparison.json`` (the rows, each
run's per-flow FCTs, slowdown buckets and queue-depth distribution),
``comparison.png`` (per-flow FCT slowdown -- by size bucket beyond
``MAX_FLOW_BARS`` flows -- and held time, run beside run) and, with flows,
``comparison_fct_slowdown.csv`` (``bucket_table``: per bucket, each run's
flows, largest size and p50/p95/p99 slowdown side by side) and
``comparison_fct_slowdown.png`` (slowdown by bucket, p95 and p50 of every
run on one log scale; queue-depth percentiles per run).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from emulator.atomic import atomic_open, atomic_savefig, atomic_write_text
from emulator.experiment.distributions import slowdown_buckets
from emulator.rundir import RunDir
from emulator.topo import Fabric

COLUMNS = ("run", "experiment", "link_layer", "time", "dilation", "complete", "flows",
           "fct_mean_us", "fct_p50_us", "fct_p99_us", "fct_max_us",
           "slowdown_mean", "slowdown_p50", "slowdown_p95", "slowdown_p99", "slowdown_max",
           "victim_slowdown_max",
           "drops", "retransmitted_packets", "held_ns", "held_by", "max_queue_bytes",
           "queue_p50_bytes", "queue_p95_bytes", "queue_p99_bytes", "queue_max_sampled_bytes",
           "busiest_link", "busiest_link_utilisation", "busbw_GBps", "busbw_size_bytes",
           "fabric_us", "fell_behind")
P99_MIN_FLOWS = 20          # fewer flows: no p95/p99 (it would be the max)
MAX_FLOW_BARS = 24          # more flows: comparison.png shows slowdown by size bucket instead
BUCKET_RUN_COLUMNS = ("flows", "size_max_bytes", "slowdown_p50", "slowdown_p95", "slowdown_p99")


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0..100) of ascending values."""
    k = max(0, min(len(sorted_values) - 1, -(-len(sorted_values) * q // 100) - 1))
    return sorted_values[int(k)]


def victims(summary: dict) -> list[dict]:
    """Flows into a host that no other flow goes to: bystanders of the
    congestion the others make (none in a pure incast)."""
    into: dict[str, int] = {}
    for f in summary["flows"]:
        into[f["dst"]] = into.get(f["dst"], 0) + 1
    return [f for f in summary["flows"] if into[f["dst"]] == 1 and len(into) > 1]


def held_ns(summary: dict) -> tuple[int, str]:
    """Time lossless traffic was held back, fabric ns, and by what."""
    if summary.get("link_layer") == "infiniband":
        return sum(p.get("credit_stalled_ns", 0) for p in summary["ports"]), "credit stalls"
    return sum(q.get("paused_ns") or 0 for p in summary["ports"]
               for q in p.get("priorities", [])), "PFC pauses"


def max_queue_bytes(summary: dict) -> int | None:
    """The deepest any switch queue got (a port's priority, or its VL)."""
    depths = [q.get("max_depth_bytes") for p in summary["ports"]
              for q in (p.get("vls") or p.get("priorities") or [])]
    depths = [d for d in depths if d is not None]
    return max(depths) if depths else None


def busiest_link(summary: dict, fabric: Fabric | None) -> tuple[str, float | None]:
    """The switch port that sent the most bytes, and its utilisation over
    the run (needs the fabric for the link's rate)."""
    ports = [p for p in summary["ports"] if p.get("tx_bytes")]
    if not ports:
        return "", None
    p = max(ports, key=lambda x: x["tx_bytes"])
    name = f"{p['node']}:{p['port']}->{p['peer']}"
    run_ns = summary.get("fabric_ns") or 0
    if fabric is None or run_ns <= 0:
        return name, None
    rate = fabric.links[fabric.port(p["node"], p["port"]).link_index].rate_bps
    return name, round(p["tx_bytes"] * 8e9 / (run_ns * rate), 4)


def queue_percentiles(summary: dict) -> dict:
    """The run's pooled egress queue-depth percentiles (summary.json's
    ``queue_depth_dist``; None where the switches sampled none)."""
    q = summary.get("queue_depth_dist") or {}
    return {"queue_p50_bytes": q.get("p50_bytes"), "queue_p95_bytes": q.get("p95_bytes"),
            "queue_p99_bytes": q.get("p99_bytes"), "queue_max_sampled_bytes": q.get("max_bytes")}


def bucket_table(runs: dict[str, dict]) -> tuple[list[str], list[dict]]:
    """FCT slowdown by flow-size bucket, the runs side by side: (columns,
    rows) of ``comparison_fct_slowdown.csv`` -- ``bucket``, ``pct_from``,
    ``pct_to``, then per run ``<run>_flows``, ``<run>_size_max_bytes``,
    ``<run>_slowdown_p50/p95/p99`` (``distributions.slowdown_buckets`` of
    its flows; empty where a run has no such bucket)."""
    per_run = {label: {b["bucket"]: b for b in slowdown_buckets(s.get("flows") or [])}
               for label, s in runs.items()}
    columns = ["bucket", "pct_from", "pct_to"] + [f"{label}_{c}" for label in runs
                                                  for c in BUCKET_RUN_COLUMNS]
    rows = []
    for k in sorted({k for b in per_run.values() for k in b}):
        any_run = next(b[k] for b in per_run.values() if k in b)
        r = {"bucket": k, "pct_from": any_run["pct_from"], "pct_to": any_run["pct_to"]}
        for label, b in per_run.items():
            for c in BUCKET_RUN_COLUMNS:
                r[f"{label}_{c}"] = b[k][c] if k in b else None
        rows.append(r)
    return columns, rows


def row(label: str, summary: dict, fabric: Fabric | None = None) -> dict:
    """One run's line of the comparison."""
    flows = summary["flows"]
    fcts = sorted(f["fct_ns"] / 1000 for f in flows if f.get("fct_ns") is not None)
    slow = [f["fct_slowdown"] for f in flows if f.get("fct_slowdown") is not None]
    vict = [f["fct_slowdown"] for f in victims(summary) if f.get("fct_slowdown") is not None]
    held, by = held_ns(summary)
    link, util = busiest_link(summary, fabric)
    coll = (summary.get("collectives") or {}).get("results") or []
    largest = max(coll, key=lambda c: c["size_bytes"]) if coll else None

    def r(x, nd=2):
        return None if x is None else round(x, nd)
    return {"run": label, "experiment": summary["experiment"],
            "link_layer": summary.get("link_layer", "roce"),
            "time": summary.get("time", "dilated"), "dilation": summary["dilation"],
            "complete": summary["complete"], "flows": len(flows),
            "fct_mean_us": r(sum(fcts) / len(fcts)) if fcts else None,
            "fct_p50_us": r(percentile(fcts, 50)) if fcts else None,
            "fct_p99_us": r(percentile(fcts, 99)) if len(fcts) >= P99_MIN_FLOWS else None,
            "fct_max_us": r(max(fcts)) if fcts else None,
            "slowdown_mean": r(sum(slow) / len(slow), 3) if slow else None,
            "slowdown_p50": r(percentile(sorted(slow), 50), 3) if slow else None,
            "slowdown_p95": r(percentile(sorted(slow), 95), 3) if len(slow) >= P99_MIN_FLOWS else None,
            "slowdown_p99": r(percentile(sorted(slow), 99), 3) if len(slow) >= P99_MIN_FLOWS else None,
            "slowdown_max": r(max(slow), 3) if slow else None,
            "victim_slowdown_max": r(max(vict), 3) if vict else None,
            "drops": sum(p["drops"] for p in summary["ports"]),
            "retransmitted_packets": sum(f.get("retransmitted_packets", 0) for f in flows),
            "held_ns": held, "held_by": by, "max_queue_bytes": max_queue_bytes(summary),
            **queue_percentiles(summary),
            "busiest_link": link, "busiest_link_utilisation": util,
            "busbw_GBps": r(largest["busbw_GBps"]) if largest else None,
            "busbw_size_bytes": largest["size_bytes"] if largest else None,
            "fabric_us": r(summary.get("fabric_ns", 0) / 1000),
            "fell_behind": summary["fell_behind"]}


def write_comparison(out_dir: Path, runs: dict[str, dict],
                     fabrics: dict[str, Fabric] | None = None) -> list[dict]:
    """``comparison.csv``/``.json``/``.png`` in ``out_dir`` for ``runs``
    (label -> summary); the rows."""
    rd = RunDir.of(out_dir)
    rd.path.mkdir(parents=True, exist_ok=True)
    rows = [row(label, s, (fabrics or {}).get(label)) for label, s in runs.items()]
    with atomic_open(rd.file(rd.COMPARISON_CSV), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    per_flow = {label: [{k: fl.get(k) for k in ("flow_id", "src", "dst", "bytes", "fct_ns",
                                                "standalone_fct_ns", "fct_slowdown")}
                        for fl in s["flows"]] for label, s in runs.items()}
    buckets = {label: slowdown_buckets(s.get("flows") or []) for label, s in runs.items()}
    queues = {label: s.get("queue_depth_dist") for label, s in runs.items()}
    atomic_write_text(rd.file(rd.COMPARISON_JSON), json.dumps(
        {"runs": rows, "flows": per_flow, "fct_slowdown_buckets": buckets,
         "queue_depth_dist": queues}, indent=1))
    plot_comparison(rd.file(rd.COMPARISON_PNG), runs, rows)
    if any(buckets.values()):
        columns, table = bucket_table(runs)
        with atomic_open(rd.file(rd.COMPARISON_SLOWDOWN_CSV), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            w.writeheader()
            w.writerows(table)
        plot_slowdown_comparison(rd.file(rd.COMPARISON_SLOWDOWN_PNG), buckets, rows)
    return rows


def plot_slowdown_comparison(path: Path, buckets: dict[str, list[dict]],
                             rows: list[dict]) -> Path:
    """The HPCC paper's two views of a run, the runs side by side: FCT
    slowdown by flow-size bucket (p95 solid, p50 dashed, log scale), and the
    egress queue-depth percentiles (sampled, every switch port pooled)."""
    # deferred: matplotlib (and the plots built on it) only when a figure is drawn
    from emulator.experiment.plots import colours, draw_slowdown_buckets
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt     # deferred: as matplotlib, after its backend is set
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [2, 1]})
    draw_slowdown_buckets(ax1, {k: v for k, v in buckets.items() if v})
    ax1.legend(fontsize=8)
    keys = ("queue_p50_bytes", "queue_p95_bytes", "queue_p99_bytes", "queue_max_sampled_bytes")
    width = 0.8 / max(1, len(rows))
    for i, (r, colour) in enumerate(zip(rows, colours(len(rows)))):
        ax2.bar([k + i * width for k in range(len(keys))],
                [(r[k] or 0) / 1000 for k in keys], width, color=colour, label=r["run"])
    ax2.set_xticks([k + width * (len(rows) - 1) / 2 for k in range(len(keys))],
                   ["p50", "p95", "p99", "max"])
    ax2.set_ylabel("egress queue depth, KB (sampled, all switch ports)")
    ax2.set_title("queue depth")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    try:
        atomic_savefig(fig, path, dpi=110)
    finally:
        plt.close(fig)
    return path


def plot_comparison(path: Path, runs: dict[str, dict], rows: list[dict]) -> Path:
    """Per-flow FCT slowdown, the runs' bars side by side; and each run's
    held time (pauses or credit stalls)."""
    import matplotlib       # deferred: only when a figure is drawn
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt     # deferred: as matplotlib, after its backend is set
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2),
                                   gridspec_kw={"width_ratios": [3, 1]})
    labels = list(runs)
    width = 0.8 / max(1, len(labels))
    first = next(iter(runs.values()))
    coll = (first.get("collectives") or {}).get("results") or []
    if len(first["flows"]) > MAX_FLOW_BARS:   # too many for a bar each: by size bucket
        from emulator.experiment.plots import draw_slowdown_buckets     # deferred: as matplotlib
        draw_slowdown_buckets(ax1, {label: b for label in labels
                                    if (b := slowdown_buckets(runs[label]["flows"]))})
        ax1.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        values, names = None, []
    elif first["flows"] or not coll:
        names = [f"{f['src']}->{f['dst']}" for f in first["flows"]]
        values = {label: [f.get("fct_slowdown") or 0 for f in runs[label]["flows"]]
                  for label in labels}
        ax1.set_ylabel("FCT slowdown (FCT / standalone FCT)")
        ax1.set_title("flows")
    else:                                    # a collective workload: busbw per size
        names = [f"{c['size_bytes']:,} B" for c in coll]
        values = {label: [c["busbw_GBps"] for c in
                          (runs[label].get("collectives") or {}).get("results") or []]
                  for label in labels}
        ax1.set_ylabel("busbw, GB/s (nccl-tests, out of place)")
        ax1.set_title("collective")
    for i, label in enumerate(labels if values is not None else []):
        ax1.bar([k + i * width for k in range(len(values[label]))], values[label], width,
                label=label)
    if values is not None:
        ax1.set_xticks([k + width * (len(labels) - 1) / 2 for k in range(len(names))], names,
                       rotation=30, ha="right", fontsize=8)
        ax1.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    held_us = [r["held_ns"] / 1000 for r in rows]
    ax2.bar(range(len(rows)), held_us, color=[f"C{i}" for i in range(len(rows))])
    ax2.set_ylim(0, max(1.0, max(held_us)) * 1.1)          # nothing held: still from 0
    ax2.set_xticks(range(len(rows)), [f"{r['run']}\n({r['held_by']})" for r in rows], fontsize=7)
    ax2.set_ylabel("held, µs (all ports, summed)")
    ax2.set_title("backpressure")
    fig.tight_layout()
    try:
        atomic_savefig(fig, path, dpi=110)
    finally:
        plt.close(fig)
    return path


def render_comparison_table(rows: list[dict], out: Path):
    """The terminal's table of ``comparison.csv``'s rows (a rich ``Table``)."""
    from rich.table import Table   # deferred: the CLI's table only, not the comparison files

    table = Table(title=f"comparison ({RunDir(out).file(RunDir.COMPARISON_CSV)})")
    table.add_column("")
    for r in rows:
        table.add_column(r["run"])
    for key in COLUMNS[2:]:
        table.add_row(key, *[str(r[key]) for r in rows])
    return table


def render_bucket_table(runs: dict[str, dict], out: Path):
    """The terminal's table of ``bucket_table`` (a rich ``Table``; None with
    one bucket or none)."""
    from rich.table import Table   # deferred: the CLI's table only, not the comparison files

    _, buckets = bucket_table(runs)
    if len(buckets) <= 1:
        return None
    bt = Table(title=f"FCT slowdown p50 / p95 / p99 by flow-size bucket "
                     f"({out / RunDir.COMPARISON_SLOWDOWN_CSV})")
    # the same flows (a seed's, on every fabric): one size column
    same = all(len({b[f"{label}_size_max_bytes"] for label in runs}) == 1 for b in buckets)
    bt.add_column("flows %")
    if same:
        bt.add_column("size (bytes)", justify="right")
    for label in runs:
        if not same:
            bt.add_column(f"{label}: size (bytes)", justify="right")
        bt.add_column(f"{label}: p50 / p95 / p99", justify="right")
    for b in buckets:
        cells = [f"{b[f'{next(iter(runs))}_size_max_bytes']:,}"] if same else []
        for label in runs:
            if b[f"{label}_flows"] is None:
                cells += [""] if same else ["", ""]
                continue
            cells += ([] if same else [f"{b[f'{label}_size_max_bytes']:,}"]) + [" / ".join(
                f"{b[f'{label}_slowdown_{p}']:.2f}" for p in ("p50", "p95", "p99"))]
        bt.add_row(f"{b['pct_from']}-{b['pct_to']}", *cells)
    return bt
