"""Run every experiment file and print what the notes report for each.

    sudo .venv/bin/python bench/experiments.py [--target embedded|bmv2|auto] [experiments/*.yaml]

Per run: wall time, fabric time simulated, packets the switches forwarded,
the dilation factor, whether the data plane fell behind, drops and pauses.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    args = sys.argv[1:]
    target = "embedded"
    if args[:1] == ["--target"]:
        target, args = args[1], args[2:]
    files = args or sorted(str(p) for p in (REPO / "experiments").glob("*.yaml"))
    print(f"target {target}")
    print(f"{'experiment':<22} {'wall s':>7} {'fabric us':>10} {'packets':>9} {'dilation':>9} "
          f"{'behind':>7} {'complete':>9} {'drops':>6} {'pauses':>7} {'marks':>6}")
    for f in files:
        with tempfile.TemporaryDirectory(prefix="fabric-emu-exp-") as out:
            subprocess.run([sys.executable, "-m", "emulator.cli", "run", f, "--out", out,
                            "--target", target],
                           cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            summaries = sorted(Path(out).glob("**/summary.json"))
            for path in summaries:
                s = json.loads(path.read_text())
                prio = [q for p in s["ports"] for q in p.get("priorities", [])]
                name = s["experiment"] + ("" if len(summaries) == 1 else f" [{path.parent.name}]")
                print(f"{name[:22]:<22} {s['wall_s']:7.1f} {s['fabric_ns'] / 1000:10.1f} "
                      f"{sum(p['tx_packets'] for p in s['ports']):9,} {s['dilation']:9g} "
                      f"{str(s['fell_behind']):>7} {str(s['complete']):>9} "
                      f"{sum(q['drops'] for q in prio):6} {sum(q['pause_tx'] for q in prio):7} "
                      f"{sum(q['ecn_marks'] for q in prio):6}")


if __name__ == "__main__":
    main()
