"""nccl-tests-style results: per collective and size, the time of one
iteration, algorithm and bus bandwidth, and #wrong; plus training-step times.

Conventions (nccl-tests doc/PERFORMANCE.md): ``size`` is the total buffer
in bytes (all_gather / reduce_scatter: count per rank x n x the element's
size), ``count`` = size / the element's size (``type``: nccl-tests' name of
it, float for float32, half for float16), algbw = size / time (all_to_allv: the most bytes a rank
sends or receives / time, as nccl-tests' AlltoAllvGetBw), busbw = algbw x
factor (``busbw_factor``). GB/s are 1e9 bytes per second. Time is fabric time (wall / D):
per rank, (end of its last timed iteration - its exit from the barrier) /
iters; ``time_us`` is the mean over ranks (nccl-tests' default ``-a 1``),
``time_max_us`` the slowest rank. #wrong: mismatching elements summed over
ranks (None: not checked, printed N/A). ``lost_fraction``: the largest share
of a rank's timed loop that a NIC of its process lost to the process being
late (``RoceNic.lost_ns``); the run's fidelity judges it. Each row also has
the in-place run's numbers (``inplace_*``; ``algorithms.in_place``).

``collectives.txt`` is nccl-tests' own table (``src/util.cu``: the header,
13-field rows -- size, count, type, redop, root, then time, algbw, busbw,
#wrong out-of-place and in-place, so column 8 is the out-of-place busbw --
and the "Out of bounds values" / "Avg bus bandwidth" footer), one block per
test; ``collectives.json`` is the shape nccl-tests' ``-J`` writes (config,
results with ``out_of_place`` / ``in_place``, out_of_bounds,
average_bus_bandwidth), every test's rows in one ``results`` list, each
named by its ``experiment_name`` (``all_reduce_perf ring``).
"""
from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

from emulator.atomic import atomic_open, atomic_write_text
from emulator.rundir import RunDir

from .dtypes import elem_bytes, nccl_name

_TIMED = ("time_us", "time_max_us", "algbw_GBps", "busbw_GBps", "wrong")
CSV_COLUMNS = ("collective", "algorithm", "nranks", "size_bytes", "count", "type", "redop",
               "iters", "warmup_iters", *_TIMED, *(f"inplace_{k}" for k in _TIMED), "lost_fraction")
# what ``write`` writes into a results directory
REPORT_FILES = (RunDir.COLLECTIVES_CSV, RunDir.COLLECTIVES_JSON, RunDir.COLLECTIVES_TXT,
                RunDir.TRAINING_JSON, RunDir.TRAINING_CSV)
NCCL_TESTS_JSON_VERSION = 1         # nccl-tests' JSON_FILE_VERSION this shape follows


# nccl-tests' program and its table's redop of each collective (src/*.cu:
# the collectives that reduce print the op, sendrecv_perf too; the others "none")
PROGRAMS = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf",
            "reduce_scatter": "reduce_scatter_perf", "all_to_all": "alltoall_perf",
            "broadcast": "broadcast_perf", "reduce": "reduce_perf", "send_recv": "sendrecv_perf",
            "all_to_allv": "alltoallv_perf"}
PRINTS_OP = ("all_reduce", "reduce_scatter", "reduce", "send_recv")


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' doc/PERFORMANCE.md "Summary" (and src/*.cu *GetBw):
    2(n-1)/n all_reduce; (n-1)/n all_gather, reduce_scatter, all_to_all and
    all_to_allv; 1 broadcast, reduce (all the data leaves / reaches the
    root) and send_recv (point to point: algbw is bus bandwidth)."""
    if n < 1:
        raise ValueError("n must be >= 1")
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all", "all_to_allv"):
        return (n - 1) / n
    if collective in ("broadcast", "reduce", "send_recv"):
        return 1.0
    raise ValueError(f"unknown collective {collective}")


def collective_rows(records: list[dict], dilation: float) -> list[dict]:
    """Rows from ``bench.measure`` records of every rank (all servers): one
    per collective, algorithm and size, out-of-place and in-place."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["collective"], r["algorithm"], r["size_bytes"], r.get("root"),
                           r.get("dtype", "float32"), r.get("op", "sum"), r.get("channels", 1),
                           r.get("pxn", False)), []).append(r)
    rows = []
    for (coll, alg, size, root, dtype, op, channels, pxn), rs in groups.items():
        n = rs[0]["nranks"]
        halves = {False: [r for r in rs if not r.get("in_place")],
                  True: [r for r in rs if r.get("in_place")]}
        for half in halves.values():
            if half and len(half) != n:
                raise ValueError(f"{coll} {size} B: records of {len(half)} ranks, expected {n}")
        row = {"collective": coll, "algorithm": alg, "nranks": n, "size_bytes": size,
               "count": size // elem_bytes(dtype), "type": nccl_name(dtype),
               "redop": op if coll in PRINTS_OP else "none",
               "iters": rs[0]["iters"],
               "warmup_iters": max(r.get("warmup_iters", 0) for r in rs)}
        if root is not None:
            row["root"] = root
        if channels != 1:
            row["channels"] = channels
        if pxn:
            row["pxn"] = True
        bw_bytes = rs[0].get("algbw_bytes", size)
        for prefix, half in (("", halves[False]), ("inplace_", halves[True])):
            timed = _timed(half, coll, bw_bytes, n, dilation)
            row.update({prefix + k: v for k, v in timed.items()})
        row["lost_fraction"] = _lost_fraction(rs)
        rows.append(row)
    return rows


def _timed(rs: list[dict], coll: str, size: int, n: int, dilation: float) -> dict:
    """time (mean over ranks), slowest rank, algbw (``size`` bytes / time),
    busbw, #wrong of one half of a row."""
    if not rs:
        return dict.fromkeys(_TIMED)
    per_rank_ns = [(r["end_ns"] - r["start_ns"]) / r["iters"] / dilation for r in rs]
    t_ns = statistics.fmean(per_rank_ns)
    algbw = size / t_ns if t_ns > 0 else 0.0          # bytes/ns == GB/s
    return {"time_us": t_ns / 1e3, "time_max_us": max(per_rank_ns) / 1e3, "algbw_GBps": algbw,
            "busbw_GBps": algbw * busbw_factor(coll, n),
            "wrong": None if any(r["wrong"] is None for r in rs) else sum(r["wrong"] for r in rs)}


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
    """Step times (compute + collective) and collective times, fabric us; of
    a parallelism-shaped step (``training.train``'s records), ``shaped_summary``."""
    if "shape" in records[0]:
        return shaped_summary(records, dilation)
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


def shaped_summary(records: list[dict], dilation: float) -> dict:
    """A parallelism-shaped loop's: the mean over ranks and steps of the step
    time and of each phase's time (fabric us), each phase's share of the mean
    step (they sum to 1: a rank's phases tile its step), #wrong."""
    steps = [s for r in records for s in r["steps"]]
    step_us = [(s["end_ns"] - s["start_ns"]) / dilation / 1e3 for s in steps]
    mean = statistics.fmean(step_us)
    phases = {}
    for p in steps[0]["phases_ns"]:
        t = [s["phases_ns"][p] / dilation / 1e3 for s in steps]
        phases[p] = {"time_us": statistics.fmean(t), "share": statistics.fmean(t) / mean,
                     "time_max_us": max(t)}
    wrong = None if any(r["wrong"] is None for r in records) else sum(r["wrong"] for r in records)
    return {"parallelism": records[0]["shape"], "nranks": records[0]["nranks"],
            "steps": len(steps) // len(records),
            "step_time_us": {"mean": mean, "p50": statistics.median(step_us), "max": max(step_us)},
            "phases": phases, "wrong": wrong, "lost_fraction": _lost_fraction(records)}


def _float(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: 2 decimals, fewer, then exponent, to fit ``width``."""
    for fmt in (f"{{:{width}.2f}}", f"{{:{width}.1f}}", f"{{:{width}.0f}}"):
        text = fmt.format(value)
        if len(text) <= width:
            return text
    return (f"{{:{width}.1e}}" if width >= 7 else f"{{:{width}.0e}}").format(value)


def _half(row: dict, prefix: str) -> str:
    """One half of a row, as nccl-tests' writeBenchmarkLineBody prints it."""
    t, alg, bus, wrong = (row[prefix + k] for k in ("time_us", "algbw_GBps", "busbw_GBps", "wrong"))
    if t is None:                                   # not measured: nccl-tests' null body
        return " " * 32
    head = f"  {_float(t, 7):>7}  {_float(alg, 6):>6}  {_float(bus, 6):>6}"
    return head + ("    N/A" if wrong is None else f"  {wrong:6g}")


def _tests(rows: list[dict]) -> dict[tuple, list[dict]]:
    blocks: dict[tuple, list[dict]] = {}
    for r in rows:
        blocks.setdefault((r["collective"], r["algorithm"], r["nranks"], r.get("root", -1),
                           r["type"], r["redop"], r.get("channels", 1), r.get("pxn", False)),
                          []).append(r)
    return {k: sorted(v, key=lambda r: r["size_bytes"]) for k, v in blocks.items()}


def _avg_busbw(rows: list[dict]) -> float:
    """nccl-tests' "Avg bus bandwidth": the mean over every row's both halves."""
    bus = [r[k] for r in rows for k in ("busbw_GBps", "inplace_busbw_GBps") if r[k] is not None]
    return statistics.fmean(bus) if bus else 0.0


def _wrong_total(rows: list[dict]) -> int:
    return sum(r[k] or 0 for r in rows for k in ("wrong", "inplace_wrong"))


def format_table(rows: list[dict]) -> str:
    """The rows as nccl-tests prints them, one block per test (collective, algorithm)."""
    out = io.StringIO()
    for (coll, alg, n, root, _, _, channels, pxn), rs in _tests(rows).items():
        prog = PROGRAMS[coll]
        sizes = [r["size_bytes"] for r in rs]
        out.write(f"# Collective test starting: {prog}\n")
        chans = (f", {channels} channels" if channels != 1 else "") + (", pxn" if pxn else "")
        out.write(f"# ai-fabric-emulator: {coll} ({alg}{chans}), {n} ranks, one process per "
                  "server; times in fabric time\n")
        out.write(f"# nThread 1 nGpus 1 minBytes {min(sizes)} maxBytes {max(sizes)} "
                  f"step: {_step(sizes)} warmup iters: {rs[0]['warmup_iters']} iters: {rs[0]['iters']} agg iters: 1 "
                  f"validation: {int(any(r['wrong'] is not None for r in rs))} graph: 0\n")
        out.write("#\n#\n")
        out.write(f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place"
                  "                       in-place          \n")
        out.write(f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  "
                  f"{'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}  {'time':>7}  "
                  f"{'algbw':>6}  {'busbw':>6}  {'#wrong':>6} \n")
        out.write(f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  "
                  f"{'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  "
                  f"{'(GB/s)':>6}  {'':>6} \n")
        for r in rs:
            out.write(f"{r['size_bytes']:12d}  {r['count']:12d}  {r['type']:>8}  "
                      f"{r['redop']:>6}  {root:6d}" + _half(r, "") + _half(r, "inplace_") + "\n")
        wrong = _wrong_total(rs)
        out.write(f"# {'Out of bounds values':<20} : {wrong} {'FAILED' if wrong else 'OK'}\n")
        out.write(f"# {'Avg bus bandwidth':<20} : {_avg_busbw(rs):g} \n")
        out.write("#\n")
        out.write(f"# Collective test concluded: {prog}\n")
    return out.getvalue()


def _step(sizes: list[int]) -> str:
    """nccl-tests' "step:" -- a factor when the sizes grow geometrically."""
    if len(sizes) > 1 and all(b % a == 0 and b // a == sizes[1] // sizes[0]
                              for a, b in zip(sizes, sizes[1:])):
        return f"{sizes[1] // sizes[0]}(factor)"
    return f"{sizes[1] - sizes[0] if len(sizes) > 1 else 0}(bytes)"


def nccl_tests_json(rows: list[dict]) -> dict:
    """The rows in the shape of nccl-tests' JSON output (``-J``, ``src/util.cu``)."""
    def half(r, prefix):
        if r[prefix + "time_us"] is None:
            return None
        return {"time": r[prefix + "time_us"], "alg_bw": r[prefix + "algbw_GBps"],
                "bus_bw": r[prefix + "busbw_GBps"], "nwrong": r[prefix + "wrong"]}

    results = [{"size": r["size_bytes"], "count": r["count"], "type": r["type"],
                "redop": r["redop"], "root": f"{r.get('root', -1):6d}",
                "out_of_place": half(r, ""), "in_place": half(r, "inplace_"),
                "actual_iterations": r["iters"],
                "experiment_name": f"{PROGRAMS[r['collective']]} {r['algorithm']}"}
               for rs in _tests(rows).values() for r in rs]
    sizes = [r["size_bytes"] for r in rows] or [0]
    wrong = _wrong_total(rows)
    return {"version": NCCL_TESTS_JSON_VERSION,
            "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": min(sizes),
                       "maximum_bytes": max(sizes),
                       "warmup_iters": rows[0]["warmup_iters"] if rows else 0,
                       "iterations": rows[0]["iters"] if rows else 0,
                       "aggregated_iterations": 1, "validation": 1, "graph": 0,
                       "time_base": "fabric"},
            "results": results,
            "out_of_bounds": {"count": wrong, "okay": wrong == 0},
            "average_bus_bandwidth": {"bandwidth": _avg_busbw(rows), "okay": "unchecked"}}


def _write_csv(path: Path, columns: tuple, rows: list[dict]) -> None:
    with atomic_open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("N/A" if r[k] is None else
                            round(r[k], 4) if isinstance(r[k], float) else r[k])
                        for k in columns})


def write(out_dir, rows: list[dict], training: dict | None = None) -> dict[str, Path]:
    """``collectives.csv`` (the rows), ``collectives.json`` (nccl-tests' JSON
    shape), ``collectives.txt`` (nccl-tests' table) and, with a training
    loop, ``training.json`` in ``out_dir``."""
    rd = RunDir.of(out_dir)
    rd.path.mkdir(parents=True, exist_ok=True)
    paths = {"csv": rd.file(rd.COLLECTIVES_CSV), "json": rd.file(rd.COLLECTIVES_JSON),
             "txt": rd.file(rd.COLLECTIVES_TXT)}
    _write_csv(paths["csv"], CSV_COLUMNS, rows)
    atomic_write_text(paths["json"], json.dumps(nccl_tests_json(rows), indent=1))
    atomic_write_text(paths["txt"], format_table(rows))
    if training is not None:
        paths["training"] = rd.file(rd.TRAINING_JSON)
        atomic_write_text(paths["training"], json.dumps(training, indent=1))
    if training is not None and "phases" in training:    # parallelism-shaped (``training.py``)
        paths["training_csv"] = rd.file(rd.TRAINING_CSV)
        _write_csv(paths["training_csv"], TRAINING_CSV_COLUMNS, training_csv_rows(training))
    return paths


TRAINING_CSV_COLUMNS = ("phase", "time_us", "share", "time_max_us")


def training_csv_rows(training: dict) -> list[dict]:
    """training.csv of a parallelism-shaped loop: a row per phase, then the step."""
    rows = [{"phase": p, **v} for p, v in training["phases"].items()]
    st = training["step_time_us"]
    rows.append({"phase": "step", "time_us": st["mean"], "share": 1.0, "time_max_us": st["max"]})
    return rows
