"""nccl-tests-style results: per collective and size, the time of one
iteration, algorithm and bus bandwidth, and #wrong; plus training-step times.

Conventions (nccl-tests doc/PERFORMANCE.md): ``size`` is the total buffer
in bytes (all_gather / reduce_scatter: count per rank x n x 4), ``count`` =
size / 4 (float32), algbw = size / time, busbw = algbw x factor with factor
2(n-1)/n for all_reduce and (n-1)/n for all_gather, reduce_scatter and
all_to_all. GB/s are 1e9 bytes per second. Time is fabric time (wall / D):
per rank, (end of its last timed iteration - its exit from the barrier) /
iters; ``time_us`` is the mean over ranks (nccl-tests' default ``-a 1``),
``time_max_us`` the slowest rank. #wrong: mismatching elements summed over
ranks (None: not checked, printed N/A). ``lost_fraction``: the largest share
of a rank's timed loop that a NIC of its process lost to the process being
late (``RoceNic.lost_ns``); the run's fidelity judges it.
"""
from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

CSV_COLUMNS = ("collective", "algorithm", "nranks", "size_bytes", "count", "type", "redop",
               "iters", "time_us", "time_max_us", "algbw_GBps", "busbw_GBps", "wrong",
               "lost_fraction")


def busbw_factor(collective: str, n: int) -> float:
    if n < 1:
        raise ValueError("n must be >= 1")
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    raise ValueError(f"unknown collective {collective}")


def collective_rows(records: list[dict], dilation: float) -> list[dict]:
    """Rows from ``bench.measure`` records of every rank (all servers)."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["collective"], r["algorithm"], r["size_bytes"]), []).append(r)
    rows = []
    for (coll, alg, size), rs in groups.items():
        n = rs[0]["nranks"]
        if len(rs) != n:
            raise ValueError(f"{coll} {size} B: records of {len(rs)} ranks, expected {n}")
        per_rank_ns = [(r["end_ns"] - r["start_ns"]) / r["iters"] / dilation for r in rs]
        t_ns = statistics.fmean(per_rank_ns)
        algbw = size / t_ns if t_ns > 0 else 0.0          # bytes/ns == GB/s
        wrong = None if any(r["wrong"] is None for r in rs) else sum(r["wrong"] for r in rs)
        rows.append({"collective": coll, "algorithm": alg, "nranks": n, "size_bytes": size,
                     "count": size // 4, "type": "float",
                     "redop": "sum" if coll in ("all_reduce", "reduce_scatter") else "none", "iters": rs[0]["iters"],
                     "time_us": t_ns / 1e3, "time_max_us": max(per_rank_ns) / 1e3,
                     "algbw_GBps": algbw, "busbw_GBps": algbw * busbw_factor(coll, n),
                     "wrong": wrong, "lost_fraction": _lost_fraction(rs)})
    return rows


def _lost_fraction(records: list[dict]) -> float:
    """max over ranks of lost_ns / the rank's timed wall span."""
    out = 0.0
    for r in records:
        if "steps" in r:
            span = (r["steps"][-1]["end_ns"] - r["steps"][0]["start_ns"]) if r["steps"] else 0
        else:
            span = r["end_ns"] - r["start_ns"]
        if span > 0:
            out = max(out, r.get("lost_ns", 0) / span)
    return round(out, 4)


def training_summary(records: list[dict], dilation: float) -> dict:
    """Step times (compute + collective) and collective times, fabric us."""
    steps, colls = [], []
    for r in records:
        for s in r["steps"]:
            steps.append((s["end_ns"] - s["start_ns"]) / dilation / 1e3)
            colls.append((s["end_ns"] - s["collective_start_ns"]) / dilation / 1e3)
    r0 = records[0]
    wrong = None if any(r["wrong"] is None for r in records) else sum(r["wrong"] for r in records)
    return {"collective": r0["collective"], "algorithm": r0["algorithm"], "nranks": r0["nranks"],
            "size_bytes": r0["size_bytes"], "compute_us": r0["compute_ns"] / dilation / 1e3,
            "steps": len(steps) // len(records),
            "step_time_us": {"mean": statistics.fmean(steps), "p50": statistics.median(steps),
                             "max": max(steps)},
            "collective_time_us": {"mean": statistics.fmean(colls), "max": max(colls)},
            "wrong": wrong, "lost_fraction": _lost_fraction(records)}


def format_table(rows: list[dict]) -> str:
    """The rows as nccl-tests prints them (one block per collective/algorithm)."""
    out = io.StringIO()
    blocks: dict[tuple, list[dict]] = {}
    for r in rows:
        blocks.setdefault((r["collective"], r["algorithm"], r["nranks"]), []).append(r)
    for (coll, alg, n), rs in blocks.items():
        out.write(f"# {coll} ({alg}), {n} ranks, fabric time\n")
        out.write(f"#{'size':>11} {'count':>12} {'type':>6} {'redop':>6} {'time':>10} "
                  f"{'algbw':>8} {'busbw':>8} {'#wrong':>7}\n")
        out.write(f"#{'(B)':>11} {'(elements)':>12} {'':>6} {'':>6} {'(us)':>10} "
                  f"{'(GB/s)':>8} {'(GB/s)':>8} {'':>7}\n")
        for r in sorted(rs, key=lambda r: r["size_bytes"]):
            wrong = "N/A" if r["wrong"] is None else str(r["wrong"])
            out.write(f" {r['size_bytes']:>11} {r['count']:>12} {r['type']:>6} {r['redop']:>6} "
                      f"{r['time_us']:>10.1f} {r['algbw_GBps']:>8.2f} {r['busbw_GBps']:>8.2f} "
                      f"{wrong:>7}\n")
        bus = [r["busbw_GBps"] for r in rs]
        out.write(f"# Avg bus bandwidth    : {statistics.fmean(bus):.3f}\n")
    return out.getvalue()


def write(out_dir, rows: list[dict], training: dict | None = None) -> dict[str, Path]:
    """``collectives.csv``, ``collectives.json`` (rows + training) and
    ``collectives.txt`` (the table) in ``out_dir``."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    paths = {"csv": d / "collectives.csv", "json": d / "collectives.json",
             "txt": d / "collectives.txt"}
    with open(paths["csv"], "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("N/A" if r[k] is None else
                            round(r[k], 4) if isinstance(r[k], float) else r[k])
                        for k in CSV_COLUMNS})
    paths["json"].write_text(json.dumps({"collectives": rows, "training": training}, indent=1))
    paths["txt"].write_text(format_table(rows))
    return paths
