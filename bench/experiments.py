"""Run every experiment file and print what the notes report for each.

    sudo .venv/bin/python bench/experiments.py [--target embedded|bmv2|auto] [--dilation auto|N]
                                               [experiments/*.yaml]

Per run: wall time, fabric time simulated, packets the switches forwarded,
the dilation factor, whether the run fell behind, drops, pauses and ECN
marks, FCT median and max (fabric us), retransmitted packets, ACK timeouts, and the best
collective busbw (GB/s): the numbers a change must keep, side by side.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from emulator.experiment.sweep import run_summary_paths  # noqa: E402


def main() -> None:
    args = sys.argv[1:]
    target, dilation = "embedded", []
    while args[:1] in (["--target"], ["--dilation"]):
        if args[0] == "--target":
            target = args[1]
        else:
            dilation = ["--dilation", args[1]]
        args = args[2:]
    # A cluster experiment needs its servers (docs/how-to/cluster.md): named only.
    files = args or sorted(str(p) for p in (REPO / "experiments").glob("*.yaml")
                           if "\ncluster:" not in p.read_text())
    print(f"target {target}")
    print(f"{'experiment':<22} {'wall s':>7} {'fabric us':>10} {'packets':>9} {'dilation':>9} "
          f"{'behind':>7} {'complete':>9} {'drops':>6} {'pauses':>7} {'marks':>6} {'fct p50':>8} "
          f"{'fct max':>8} {'retx':>6} {'tmo':>4} {'busbw':>6}")
    for f in files:
        with tempfile.TemporaryDirectory(prefix="fabric-emu-exp-") as out:
            subprocess.run([sys.executable, "-m", "emulator.cli", "run", f, "--out", out,
                            "--target", target, *dilation],
                           cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            summaries = run_summary_paths(out)
            for path in summaries:
                s = json.loads(path.read_text())
                prio = [q for p in s["ports"] for q in p.get("priorities", [])]
                fcts = [f["fct_ns"] for f in s["flows"] if f.get("fct_ns") is not None]
                rows = (s.get("collectives") or {}).get("results") or []
                name = s["experiment"] + ("" if len(summaries) == 1 else f" [{path.parent.name}]")
                print(f"{name[:22]:<22} {s['wall_s']:7.1f} {s['fabric_ns'] / 1000:10.1f} "
                      f"{sum(p['tx_packets'] for p in s['ports']):9,} {s['dilation']:9g} "
                      f"{str(s['fell_behind']):>7} {str(s['complete']):>9} "
                      f"{sum(q['drops'] for q in prio):6} {sum(q['pause_tx'] for q in prio):7} "
                      f"{sum(q['ecn_marks'] for q in prio):6} "
                      f"{statistics.median(fcts) / 1000 if fcts else 0:8.1f} "
                      f"{max(fcts) / 1000 if fcts else 0:8.1f} "
                      f"{sum(f.get('retransmitted_packets') or 0 for f in s['flows']):6} "
                      f"{sum(f.get('timeouts') or 0 for f in s['flows']):4} "
                      f"{max((r['busbw_GBps'] for r in rows), default=0):6.2f}")


if __name__ == "__main__":
    main()
