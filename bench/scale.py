"""How the emulator scales with the fabric: bring-up time, the dilation D it
reaches without falling behind, wall time and peak memory, for leaf/spine
fabrics of 8 to 64 hosts running an all-to-all of RDMA WRITEs.

    sudo .venv/bin/python bench/scale.py [--hosts 8,16,32,64] [--size-kib 64]
                                         [--dilation auto|N] [--per-process auto|N]
                                         [--repo DIR]

Per size, one ``fabric-emu run`` with ``dilation: auto`` and an empty
dilation cache (its own ``XDG_CACHE_HOME``), so the D printed is the one the
calibration measured (raised by a rerun if the run still fell behind), on
this machine as loaded now. Columns:

* ``bring-up s``: switches started and programmed (``wall_phases_s``, or
  the runner's "fabric up" line for a version without it);
* ``ready s``: agents launched until all could start;
* ``D``, ``by``: the dilation of the run kept and who chose it;
* ``run s``: that run's wall time, launch to results; ``cmd s``: the
  whole command, calibration runs included;
* ``RSS MB``, ``PSS MB``: the largest summed memory of the command and
  every process it started (switches, agents, Mininet shells), sampled
  every 200 ms: resident (shared pages counted in every process that maps
  them) and proportional (shared pages split among them: what the run
  holds in all);
* ``behind``, ``complete``: the kept run's verdict; ``worst``: its worst
  lateness as a fraction of the limit (``fidelity.worst_ratio``; behind
  above 1, the calibration keeps a D at 0.5 or below).

``--repo`` runs another checkout (e.g. a ``git worktree`` of an older
commit) with this venv's Python, for before/after tables.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo_run import peak_memory  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

# hosts -> (spines, leaves, hosts per leaf): 4 hosts per leaf, as a 32-host
# fabric of 4 spines and 8 leaves
SHAPES = {8: (2, 2, 4), 16: (2, 4, 4), 32: (4, 8, 4), 64: (4, 16, 4)}


def write_files(d: Path, hosts: int, size_kib: int, dilation: str,
                per_process: str | None = None) -> Path:
    spines, leaves, per_leaf = SHAPES[hosts]
    (d / "topo.yaml").write_text(f"""name: scale-{hosts}
clos:
  spines: {spines}
  leaves: {leaves}
  hosts_per_leaf: {per_leaf}
  host_link:   {{rate_gbps: 100, delay_us: 1}}
  fabric_link: {{rate_gbps: 100, delay_us: 1}}
addressing:
  host_prefix: 10.0.0.0/16
""")
    (d / "exp.yaml").write_text(f"""name: scale-{hosts}
topology: topo.yaml
dilation: {dilation}
switch: {{buffer_bytes: 1000000}}
nic: {{mtu_bytes: 1024}}
traffic:
  - pattern: all-to-all
    op: write
    size_bytes: {size_kib * 1024}
limits: {{wall_s: 600}}
""" + (f"agents: {{per_process: {per_process}}}\n" if per_process else ""))
    return d / "exp.yaml"


def run_one(repo: Path, hosts: int, size_kib: int, dilation: str,
            per_process: str | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="fabric-emu-scale-") as tmp:
        tmp = Path(tmp)
        exp = write_files(tmp, hosts, size_kib, dilation, per_process)
        out = tmp / "out"
        env = {**os.environ, "XDG_CACHE_HOME": str(tmp / "cache")}
        t0 = time.monotonic()
        log = open(tmp / "log", "w+")
        proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(exp), "--out", str(out)],
                                cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT)
        peak, peak_pss = peak_memory(proc, interval_s=0.2)
        cmd_s = time.monotonic() - t0
        log.seek(0)
        text = log.read()
        path = out / "summary.json"
        if not path.exists():
            return {"hosts": hosts, "error": text.strip().splitlines()[-1:] or ["no summary"]}
        s = json.loads(path.read_text())
        phases = s.get("wall_phases_s") or {}
        ups = re.findall(r"fabric up and programmed in ([0-9.]+) s", text)
        return {"hosts": hosts, "switches": sum(SHAPES[hosts][:2]),
                "flows": len(s["flows"]), "cmd_s": cmd_s, "run_s": s["wall_s"],
                "bring_up_s": phases.get("bring_up", float(ups[-1]) if ups else None),
                "ready_s": phases.get("agents_ready"),
                "dilation": s["dilation"], "chosen_by": s.get("dilation_chosen_by", "?"),
                "peak_mb": peak / 2**20, "peak_pss_mb": peak_pss / 2**20,
                "fell_behind": s["fell_behind"], "complete": s["complete"],
                "worst": (s.get("fidelity") or {}).get("worst_ratio"),
                "fabric_us": s["fabric_ns"] / 1000}


def fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", default="8,16,32,64")
    ap.add_argument("--size-kib", type=int, default=64)
    ap.add_argument("--dilation", default="auto")
    ap.add_argument("--repo", type=Path, default=REPO)
    ap.add_argument("--per-process", default=None,
                    help="host agents per process (agents.per_process: auto|N; default: the file's)")
    a = ap.parse_args()
    sizes = [int(x) for x in a.hosts.split(",")]
    bad = [n for n in sizes if n not in SHAPES]
    if bad:
        ap.error(f"--hosts: {bad} not among {sorted(SHAPES)}")
    print(f"all-to-all, {a.size_kib} KiB per pair, dilation {a.dilation}, "
          f"agents per process {a.per_process or 'default'}, code {a.repo}")
    print(f"{'hosts':>5} {'sw':>3} {'flows':>6} {'bring-up s':>10} {'ready s':>8} {'D':>7} {'by':>12} "
          f"{'run s':>7} {'cmd s':>7} {'RSS MB':>7} {'PSS MB':>7} {'behind':>7} {'worst':>6} {'complete':>9} "
          f"{'fabric us':>10}",
          flush=True)
    for n in sizes:
        r = run_one(a.repo, n, a.size_kib, a.dilation, a.per_process)
        if "error" in r:
            print(f"{n:>5} failed: {r['error']}", flush=True)
            continue
        print(f"{n:>5} {r['switches']:>3} {r['flows']:>6} {fmt(r['bring_up_s'], '10.2f')} "
              f"{fmt(r['ready_s'], '8.2f')} {r['dilation']:7g} {r['chosen_by']:>12} "
              f"{r['run_s']:7.1f} {r['cmd_s']:7.1f} {r['peak_mb']:7.0f} {r['peak_pss_mb']:7.0f} {str(r['fell_behind']):>7} {fmt(r['worst'], '6.2f')} "
              f"{str(r['complete']):>9} {r['fabric_us']:10.1f}", flush=True)


if __name__ == "__main__":
    main()
