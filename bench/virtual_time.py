"""Virtual time against dilated time, side by side: the same experiments run
both ways on this machine, as loaded now.

    sudo .venv/bin/python bench/virtual_time.py [EXPERIMENT.yaml ...]
         [--dilation auto|N] [--repeat N] [--set KEY=VALUE ...]

Default: ``experiments/demo.yaml``. Per experiment and clock, ``--repeat``
runs of ``fabric-emu run --time virtual`` and ``--time dilated`` (at
``--dilation``, default the file's: ``auto`` is the cache's or a
calibration's, whose time counts, as a user's would). Columns:

* ``cmd s``: the whole command (calibration and reruns included);
  ``traffic s``: the agents' start to their end (``wall_phases_s``);
  ``PSS MB``: the peak of the run's summed proportional memory;
* ``windows``: virtual time's windows, and the wall per window;
* ``D``: the dilation of the run kept (1 in virtual time);
* the key figures, fabric time: FCT p50 and max (µs), PFC pauses sent,
  ECN marks, CNPs received, drops, retransmitted packets, the busbw of a
  collective workload (GB/s, its largest size);
* ``same``: with ``--repeat`` > 1, whether every run's summary.json equals
  the first's but for its wall-time fields, and every CSV and pcap is
  byte-identical (virtual time: always yes; dilated: no).
"""
from __future__ import annotations

import argparse
import filecmp
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from demo_run import peak_memory  # noqa: E402

WALL_KEYS = {"wall_s", "wall_phases_s", "coordinator_wall_s", "switch_processes_wall",
             "dilation_measurements", "reruns"}


def cnps_received(out: Path) -> int:
    path = out / "cnp.csv"
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines()[1:] if line.endswith(",rx"))


def key_figures(s: dict) -> dict:
    ports = s.get("ports") or []
    prios = [q for p in ports for q in p.get("priorities", [])]
    fcts = sorted(f["fct_ns"] for f in s.get("flows", []) if f.get("fct_ns") is not None)
    coll = (s.get("collectives") or {}).get("results") or []
    return {"fct_p50_us": fcts[(len(fcts) - 1) // 2] / 1e3 if fcts else None,
            "fct_max_us": fcts[-1] / 1e3 if fcts else None,
            "pauses": sum(q.get("pause_tx", 0) for q in prios),
            "ecn": sum(q.get("ecn_marks", 0) for q in prios),
            "drops": sum(p.get("drops", 0) for p in ports),
            "retx": sum(f.get("retransmitted_packets", 0) for f in s.get("flows", [])),
            "busbw": coll[-1].get("busbw_GBps") if coll else None}


def strip_wall(x):
    if isinstance(x, dict):
        return {k: strip_wall(v) for k, v in x.items() if k not in WALL_KEYS}
    if isinstance(x, list):
        return [strip_wall(v) for v in x]
    return x


def same_run(a: Path, b: Path) -> bool:
    sa = strip_wall(json.loads((a / "summary.json").read_text()))
    sb = strip_wall(json.loads((b / "summary.json").read_text()))
    if sa != sb:
        return False
    files = [p.relative_to(a) for p in a.rglob("*") if p.suffix in (".csv", ".pcap", ".pcapng")]
    return all((b / f).exists() and filecmp.cmp(a / f, b / f, shallow=False) for f in files)


def run(exp: str, out: Path, clock: str, dilation: str | None, sets: list[str]) -> dict:
    cmd = [sys.executable, "-m", "emulator.cli", "run", exp, "--out", str(out), "--time", clock,
           "--pcap"]
    if clock == "dilated" and dilation:
        cmd += ["--dilation", dilation]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.monotonic()
    log = open(out.with_suffix(".log"), "w+")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    _, pss = peak_memory(proc, interval_s=0.1)
    cmd_s = time.monotonic() - t0
    path = out / "summary.json"
    if proc.returncode != 0 or not path.exists():
        log.seek(0)
        return {"error": (log.read().strip().splitlines() or ["no output"])[-1]}
    s = json.loads(path.read_text())
    vt = s.get("virtual_time") or {}
    traffic = (s.get("wall_phases_s") or {}).get("traffic")
    return {"cmd_s": cmd_s, "traffic_s": traffic, "pss_mb": pss / 2**20,
            "windows": vt.get("windows"), "D": s["dilation"], "behind": s["fell_behind"],
            "cnps": cnps_received(out), **key_figures(s)}


def fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("experiments", nargs="*", default=["experiments/demo.yaml"])
    ap.add_argument("--dilation", default=None, help="the dilated runs' D (default: the file's)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--set", dest="sets", action="append", default=[])
    a = ap.parse_args()
    head = (f"{'experiment':<24} {'clock':<8} {'cmd s':>6} {'traffic s':>9} {'PSS MB':>7} "
            f"{'windows':>7} {'us/win':>7} {'D':>7} {'p50 us':>8} {'max us':>8} {'pauses':>6} "
            f"{'ECN':>5} {'CNPs':>5} {'drops':>5} {'retx':>5} {'busbw':>6} {'same':>5}")
    print(head, flush=True)
    with tempfile.TemporaryDirectory(prefix="fabric-emu-vt-bench-") as tmp:
        for exp in a.experiments:
            for clock in ("virtual", "dilated"):
                outs = []
                for i in range(a.repeat):
                    out = Path(tmp) / f"{Path(exp).stem}-{clock}-{i}"
                    r = run(exp, out, clock, a.dilation, a.sets)
                    outs.append(out)
                    name = Path(exp).stem
                    if "error" in r:
                        print(f"{name:<24} {clock:<8} failed: {r['error']}", flush=True)
                        continue
                    same = "-" if i == 0 else ("yes" if same_run(outs[0], out) else "no")
                    per_win = (r["traffic_s"] * 1e6 / r["windows"]
                               if r["windows"] and r["traffic_s"] else None)
                    print(f"{name:<24} {clock:<8} {r['cmd_s']:6.1f} {fmt(r['traffic_s'], '9.2f')} "
                          f"{r['pss_mb']:7.0f} {fmt(r['windows'], '7d')} {fmt(per_win, '7.0f')} "
                          f"{r['D']:7g} {fmt(r['fct_p50_us'], '8.1f')} {fmt(r['fct_max_us'], '8.1f')} "
                          f"{r['pauses']:6d} {r['ecn']:5d} {r['cnps']:5d} {r['drops']:5d} "
                          f"{r['retx']:5d} {fmt(r['busbw'], '6.2f')} {same:>5}", flush=True)


if __name__ == "__main__":
    main()
