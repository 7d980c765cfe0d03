"""Where a virtual-time run's CPU goes: per switch hop, per NIC frame, per window.

    sudo .venv/bin/python bench/frame_cost.py [EXPERIMENT.yaml ...] [--scale 32,64]
                                              [--repeat N] [--set KEY=VALUE ...]

Default: ``experiments/demo.yaml``; ``--scale N``: ``bench/scale.py``'s
all-to-all of 64 KiB on N hosts. Per run, one ``fabric-emu run --time
virtual --no-plots``, and from its run directory:

* ``sw CPU s`` / ``hops`` / ``us/hop``: the switch processes' CPU (each
  one's ``cpu_s``, ``summary.json``'s ``virtual_time.switch_processes_wall``)
  over the frames the switches' ports received (a frame through one switch
  is one hop);
* ``NIC CPU s`` / ``NIC frames`` / ``us/frame``: the agent processes' CPU
  (the largest ``cpu_s`` of the hosts a process runs: their reports read one
  process's clock) over the frames the NICs sent (each is also received by
  one: the cost is of both ends);
* ``windows`` and ``wall us/win``: virtual time's windows and the traffic's
  wall time per window (its work and the barrier's GO and REPORT messages); ``sw wait s``: the switch processes' time blocked
  at the barrier (waiting for the agents' work, or for the window).

CPU seconds are the processes' own (``time.process_time``), so a busy
machine moves them less than wall times, but they are not counts: compare
runs taken in the same minutes.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from emulator.rundir import RunDir  # noqa: E402
from scale import write_files  # noqa: E402


def agent_cpu_s(run_dir: RunDir) -> float:
    """The agents' processes' CPU: a pack's hosts share one process, whose
    clock each host's report read when it ended (the latest is the total)."""
    raw = run_dir.raw
    packed: set[str] = set()
    total = 0.0
    for pack in sorted(Path(raw).glob("*.pack.json")):
        members = json.loads(pack.read_text()).get("members", [])
        if not members or not isinstance(members[0], dict):
            continue                                   # a switch pack: its configs' paths
        names = [Path(m["config"]).name.removesuffix(".agent.json") for m in members]
        packed.update(names)
        total += max(json.loads(raw.result(n).read_text())["cpu_s"] for n in names)
    for result in sorted(Path(raw).glob("*.result.json")):
        name = result.name.removesuffix(".result.json")
        if name not in packed:
            total += json.loads(result.read_text())["cpu_s"]
    return total


def cost(out: Path) -> dict:
    rd = RunDir(out)
    s = json.loads(rd.summary.read_text())
    vt = s.get("virtual_time") or {}
    procs = vt.get("switch_processes_wall") or {}
    sw_cpu = sum(p["cpu_s"] for p in procs.values())
    hops = sum(p["rx_packets"] for p in s["ports"])
    nic_frames = sum(n["tx_packets"] for n in s["nics"])
    nic_cpu = agent_cpu_s(rd)
    traffic_s = (s.get("wall_phases_s") or {}).get("traffic", 0.0)
    windows = vt.get("windows", 0)
    return {"sw_cpu_s": sw_cpu, "hops": hops, "us_per_hop": sw_cpu / hops * 1e6 if hops else 0.0,
            "nic_cpu_s": nic_cpu, "nic_frames": nic_frames,
            "us_per_frame": nic_cpu / nic_frames * 1e6 if nic_frames else 0.0,
            "windows": windows, "us_per_window": traffic_s / windows * 1e6 if windows else 0.0,
            "sw_wait_s": sum(p["wait_s"] for p in procs.values()), "traffic_s": traffic_s}


def run(exp: str, out: Path, sets: list[str]) -> dict:
    cmd = [sys.executable, "-m", "emulator.cli", "run", exp, "--out", str(out), "--time", "virtual",
           "--no-plots"]
    for kv in sets:
        cmd += ["--set", kv]
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cost(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("experiments", nargs="*")
    ap.add_argument("--scale", default="", help="host counts of bench/scale.py's all-to-all, e.g. 32,64")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    cols = (("experiment", 24, "s"), ("sw CPU s", 9, ".2f"), ("hops", 9, ","), ("us/hop", 7, ".1f"),
            ("NIC CPU s", 10, ".2f"), ("NIC frames", 11, ","), ("us/frame", 9, ".1f"),
            ("windows", 8, ","), ("wall us/win", 11, ".0f"), ("sw wait s", 10, ".2f"),
            ("traffic s", 10, ".2f"))
    print(" ".join(f"{c:>{w}}" if i else f"{c:<{w}}" for i, (c, w, _) in enumerate(cols)))
    keys = ("sw_cpu_s", "hops", "us_per_hop", "nic_cpu_s", "nic_frames", "us_per_frame", "windows",
            "us_per_window", "sw_wait_s", "traffic_s")
    scale = [int(n) for n in a.scale.split(",") if n]
    runs = ([] if scale and not a.experiments else a.experiments or ["experiments/demo.yaml"]) + scale
    for what in runs:
        for _ in range(a.repeat):
            with tempfile.TemporaryDirectory(prefix="fabric-emu-cost-") as d:
                exp = str(write_files(Path(d), what, 64, "auto")) if isinstance(what, int) else what
                r = run(exp, Path(d) / "out", a.sets)
            vals = [f"all-to-all, {what} hosts" if isinstance(what, int) else Path(what).stem] + \
                [r[k] for k in keys]
            print(" ".join(f"{v:<{w}{f}}" if i == 0 else f"{v:>{w}{f}}"
                           for i, (v, (_, w, f)) in enumerate(zip(vals, cols))), flush=True)


if __name__ == "__main__":
    main()
