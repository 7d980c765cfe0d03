"""Issue 12's dilation goal, measured: does every shipped experiment run not
behind at half the D it needed before the work on dilation?

    sudo .venv/bin/python bench/half_dilation.py [--fraction 0.5] [--repeat N]
                                                 [--calibrate] [--repo DIR] [NAME ...]

``BEFORE`` is the D each experiment needed with the code before that work
(9aaa47b): what ``dilation: auto`` chose from an empty cache on the
project's 2-core VM, or, where its full run then fell behind, the D of the
rerun that held (README, "Time dilation"). Per experiment:

* default: the full experiment (a sweep: every point) at the ladder step at or below ``BEFORE`` x
  ``--fraction`` (``--dilation`` fixed: no calibration, no rerun), ``--repeat``
  times: its verdict (``fell_behind``), ``worst_ratio`` (worst lateness
  over its limit; behind above 1) and the process that read worst;
* ``--calibrate``: ``dilation: auto`` from an empty cache (its own
  ``XDG_CACHE_HOME``), as a user's first run: the D the calibration chose,
  the D the run kept (raised by a rerun if the full run fell behind at the
  chosen one), and whether each is at most the fraction of ``BEFORE``.

The last line counts the experiments that met the goal. ``--repo`` runs
another checkout (a ``git worktree`` of an older commit) with this venv.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from emulator.experiment.dilation import LADDER  # noqa: E402
from emulator.experiment.sweep import run_summary_paths  # noqa: E402

# 9aaa47b's D (README's table, "D before"); the rerun's where the full run
# fell behind at the calibrated D (demo, incast-dcqcn, hol-victim,
# hol-victim-hpcc, pods-incast, allreduce-rail-congested). The fixed-D
# multitenant files went from 20000 to 10000 in their files.
BEFORE = {
    "demo": 12000, "incast-dcqcn": 4000, "incast-pfc": 2000, "incast-hpcc": 1500,
    "incast-nopfc": 2000, "incast-ib": 3000, "hol-victim": 6000, "hol-victim-dcqcn": 1500,
    "hol-victim-hpcc": 4000, "hol-victim-ib": 4000, "fairness": 1500, "fairness-hpcc": 1000,
    "fairness-ib": 2000, "websearch-dcqcn": 3000, "websearch-hpcc": 3000, "pods-incast": 8000,
    "allreduce-rail-nogdr": 16000, "allreduce-rail": 16000, "allreduce-rail-congested": 32000,
    "allreduce-rail-ib": 16000, "checkpoint-shared": 12000, "checkpoint-separate": 16000,
    "sweep-dcqcn": 2000,
}


def ladder_at_most(d: float) -> float:
    return float(max((s for s in LADDER if s <= d + 1e-9), default=LADDER[0]))


def worst_process(s: dict) -> str:
    """The switch or NIC whose lateness ratio is the run's worst (or what
    else made it behind: a timed collective, lost frames)."""
    ratios = [(x.get("ratio") or 0, x.get("node", "?")) for x in s.get("switches", []) + s.get("nics", [])]
    r, name = max(ratios, default=(0, "-"))
    behind = (s.get("fidelity") or {}).get("behind") or []
    if behind and name not in behind:
        return behind[0]
    return name


def run(repo: Path, name: str, out: Path, args: list[str],
        env: dict | None = None) -> tuple[list[dict], float]:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "emulator.cli", "run", f"experiments/{name}.yaml",
                    "--out", str(out), *args], cwd=repo, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # a sweep: every point, the first (the one calibrated; the others take
    # its D from the cache) first
    return ([json.loads(p.read_text()) for p in run_summary_paths(out)],
            time.monotonic() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", metavar="NAME", help="experiments of BEFORE (default: all)")
    ap.add_argument("--fraction", type=float, default=0.5, help="of the D before (default 0.5)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per experiment")
    ap.add_argument("--calibrate", action="store_true",
                    help="dilation: auto from an empty cache instead of a fixed D")
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout to run (default: this one)")
    a = ap.parse_args()
    unknown = [n for n in a.names if n not in BEFORE]
    if unknown:
        ap.error(f"{unknown[0]}: not an experiment of BEFORE")
    fraction, repeat, calibrate, repo = a.fraction, a.repeat, a.calibrate, a.repo.resolve()
    names = a.names or list(BEFORE)
    met = 0
    if calibrate:
        print(f"{'experiment':<26} {'before':>7} {'goal':>7} {'chosen':>7} {'kept':>7} {'by':>12} "
              f"{'worst':>6}  measurements (D, worst ratio)")
    else:
        print(f"{'experiment':<26} {'before':>7} {'D':>7} {'behind':>7} {'worst':>6} "
              f"{'worst process':<32} {'wall s':>7}")
    for name in names:
        goal = BEFORE[name] * fraction
        ok = True
        for _ in range(repeat):
            with tempfile.TemporaryDirectory(prefix="fabric-emu-half-") as tmp:
                out = Path(tmp) / "out"
                if calibrate:
                    env = dict(os.environ, XDG_CACHE_HOME=str(Path(tmp) / "cache"))
                    runs, _wall = run(repo, name, out, [], env)
                    if not runs:
                        print(f"{name:<26} no summary: the run failed", flush=True)
                        ok = False
                        continue
                    s = runs[0]
                    cal = s.get("dilation_calibration") or {}
                    meas = cal.get("measurements") or []
                    reruns = s.get("dilation_reruns") or []
                    chosen = reruns[0]["dilation"] if reruns else s["dilation"]
                    kept = max(r["dilation"] for r in runs)
                    ok = ok and chosen <= goal and kept <= goal
                    print(f"{name:<26} {BEFORE[name]:7g} {goal:7g} {chosen:7g} {kept:7g} "
                          f"{s.get('dilation_chosen_by', '?'):>12} "
                          f"{max(r['fidelity']['worst_ratio'] for r in runs):6.2f}  "
                          + ", ".join(f"{d:g}: {r:.2f}" for d, r in meas), flush=True)
                else:
                    d = ladder_at_most(goal)
                    runs, wall = run(repo, name, out, ["--dilation", f"{d:g}"])
                    if not runs:
                        print(f"{name:<26} no summary: the run failed", flush=True)
                        ok = False
                        continue
                    behind = any(r["fell_behind"] for r in runs)
                    worst = max(runs, key=lambda r: r["fidelity"]["worst_ratio"])
                    ok = ok and not behind
                    print(f"{name:<26} {BEFORE[name]:7g} {d:7g} {str(behind):>7} "
                          f"{worst['fidelity']['worst_ratio']:6.2f} {worst_process(worst)[:32]:<32} "
                          f"{wall:7.1f}", flush=True)
        met += ok
    what = "calibrated at or below" if calibrate else "not behind at"
    print(f"{met} of {len(names)} experiments {what} {fraction:g} x their D before"
          + (f" in all {repeat} runs" if repeat > 1 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
