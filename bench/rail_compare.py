"""Collective algorithms x congestion control on the 64-GPU rails, one table.

    sudo .venv/bin/python bench/rail_compare.py --out DIR [--lock FILE]
        [--variants ring,ring-4ch] [--cc dcqcn,hpcc] [--set KEY=VALUE ...] [EXPERIMENT]

EXPERIMENT (default experiments/allreduce-rail-64.yaml: 64 GPUs on
topologies/rail-8x8-2su.yaml) runs once per variant and congestion control,
each made by ``--set`` overrides (``VARIANTS``, ``CCS``; the ``--set``
given here apply to every run, e.g. a shorter size list). A new algorithm
is one more entry of ``VARIANTS`` (NCCL's tree: ``workload.algorithm=tree``;
PXN: ``workload.pxn=true``). Every run is validated before the first
starts (a bad one: one line, exit 2). Each run is ``fabric-emu run`` into
DIR/<variant>-<cc>; ``--lock``: hold that file's lock (flock) for each run
only, where fabrics share a machine.

The table (markdown, printed and written to DIR/compare.md): per run, the
out-of-place busbw of every size (GB/s, fabric time), the rows' #wrong, the
bytes each spine sent (MB, the switches' port counters in summary.json:
what left the rails) and the run's wall time.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from emulator.atomic import atomic_write_text  # noqa: E402
from emulator.errors import ConfigError  # noqa: E402
from emulator.experiment.model import experiment_from_dict, read_experiment_data  # noqa: E402
from emulator.experiment.overrides import apply_sets  # noqa: E402

VARIANTS = {"ring": (), "ring-4ch": ("workload.channels=4",),
            "tree": ("workload.algorithm=tree",), "ring-pxn": ("workload.pxn=true",)}
DEFAULT_VARIANTS = ("ring", "ring-4ch")
# HPCC as the shipped *-hpcc twins run it: no ECN marking (it reads INT)
CCS = {"dcqcn": ("cc=dcqcn",), "hpcc": ("cc=hpcc", "qos.ecn.enabled=false")}


def runs(variants, ccs, sets) -> list[tuple[str, str, tuple[str, ...]]]:
    """(variant, cc, every --set of its run)."""
    return [(v, c, (*sets, *VARIANTS[v], *CCS[c])) for v in variants for c in ccs]


def validate(path: Path, plan) -> None:
    """Load every run's experiment: a bad variant fails before the first run."""
    for _v, _c, sets in plan:
        experiment_from_dict(apply_sets(read_experiment_data(path), list(sets)), path)


@contextmanager
def held(lock: Path | None):
    if lock is None:
        yield
        return
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_one(path: Path, sets, out: Path, lock: Path | None) -> tuple[dict | None, float]:
    """(summary.json of the run or None, its wall s); its output in out.log."""
    cmd = [sys.executable, "-m", "emulator.cli", "run", str(path), "--out", str(out)]
    for s in sets:
        cmd += ["--set", s]
    out.parent.mkdir(parents=True, exist_ok=True)
    with held(lock), open(out.with_suffix(".log"), "w") as log:
        t0 = time.monotonic()
        subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        wall_s = time.monotonic() - t0
    summary = out / "summary.json"
    return (json.loads(summary.read_text()) if summary.exists() else None), wall_s


def row_of(summary: dict | None) -> dict:
    """busbw by size, #wrong, bytes sent by each spine."""
    if summary is None or not summary.get("collectives"):
        return {"busbw": {}, "wrong": None, "spines": {}, "complete": False}
    res = summary["collectives"]["results"]
    spines: dict[str, int] = {}
    for p in summary["ports"]:
        if p["role"] == "spine":
            spines[p["node"]] = spines.get(p["node"], 0) + p["tx_bytes"]
    return {"busbw": {r["size_bytes"]: r["busbw_GBps"] for r in res},
            "wrong": sum((r["wrong"] or 0) + (r.get("inplace_wrong") or 0) for r in res),
            "spines": spines, "complete": bool(summary["complete"])}


def table(rows: list[tuple[str, str, dict, float]]) -> str:
    sizes = sorted({s for *_, r, _w in rows for s in r["busbw"]})
    spines = sorted({n for *_, r, _w in rows for n in r["spines"]})
    head = (["variant", "cc"] + [f"busbw {_size(s)} (GB/s)" for s in sizes] + ["#wrong"]
            + [f"{n} (MB)" for n in spines] + ["wall (s)"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v, c, r, wall_s in rows:
        cells = [v, c] + [f"{r['busbw'][s]:.2f}" if s in r["busbw"] else "-" for s in sizes]
        cells.append("failed" if not r["complete"] else str(r["wrong"]))
        cells += [f"{r['spines'].get(n, 0) / 1e6:.1f}" for n in spines]
        cells.append(f"{wall_s:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10} KiB"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("experiment", nargs="?", default=str(REPO / "experiments" / "allreduce-rail-64.yaml"))
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--lock", type=Path)
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    ap.add_argument("--cc", default="dcqcn,hpcc")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    a = ap.parse_args(argv)
    path = Path(a.experiment)
    variants, ccs = a.variants.split(","), a.cc.split(",")
    for name, given, known in (("--variants", variants, VARIANTS), ("--cc", ccs, CCS)):
        bad = [x for x in given if x not in known]
        if bad:
            print(f"rail_compare: {name}: {bad[0]!r} is none of {', '.join(known)}", file=sys.stderr)
            return 2
    plan = runs(variants, ccs, a.sets)
    try:
        validate(path, plan)
    except ConfigError as e:
        print(f"rail_compare: {e}", file=sys.stderr)
        return 2
    rows = []
    for v, c, sets in plan:
        summary, wall_s = run_one(path, sets, a.out / f"{v}-{c}", a.lock)
        rows.append((v, c, row_of(summary), wall_s))
        print(f"{v} {c}: {wall_s:.0f} s", file=sys.stderr)
    text = table(rows)
    atomic_write_text(a.out / "compare.md", text)
    print(text, end="")
    return 0 if all(r["complete"] for *_, r, _w in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
