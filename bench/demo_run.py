"""Wall time and peak memory of an experiment run (default: the demo).

    sudo .venv/bin/python bench/demo_run.py [experiments/demo.yaml] [--repeat 3]

Runs ``fabric-emu run`` as a subprocess and samples /proc every 100 ms: the
peak of the summed resident memory of the run and every process it started
(switches, host agents, Mininet shells). Prints wall time, launch to the
agents' common start (their first data), the last flow's end to the
command's exit (results written, all torn down), the run's fabric span, and
the peak RSS and PSS.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def pss_bytes(pid: int) -> int:
    """Proportional set size: pages shared by n processes count 1/n in each,
    so the sum over a run's processes is the memory they hold together."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


SAMPLER_CPU_SHARE = 0.05     # of one core, at most: the run measured shares two cores with it


def peak_memory(proc: subprocess.Popen, interval_s: float = 0.1) -> tuple[int, int]:
    """Until ``proc`` exits: the peaks of the summed RSS and summed PSS of it
    and every process it started. Switches and agents are its children (the
    fork server's); Mininet shells too (via mnexec). RSS counts a shared page
    in every process; PSS splits it.

    A sweep costs the kernel a walk of every process's page tables (PSS): at
    64 hosts, 170 processes, a 200 ms interval took a third of a core from
    the run being measured and pushed it behind. Sweeps are spaced so that
    they take at most ``SAMPLER_CPU_SHARE`` of a core (``interval_s`` at least)."""
    peak_rss = peak_pss = 0
    while proc.poll() is None:
        t0 = time.process_time()
        pids = descendants(proc.pid)
        peak_rss = max(peak_rss, sum(rss_bytes(p) for p in pids))
        peak_pss = max(peak_pss, sum(pss_bytes(p) for p in pids))
        spent = time.process_time() - t0
        time.sleep(max(interval_s, spent / SAMPLER_CPU_SHARE - spent))
    return peak_rss, peak_pss


def run_once(experiment: str) -> dict:
    """One run: wall and memory, and the two ends users wait at: launch to the
    agents' common start (their first data frame), and the last flow's end
    (start + fabric span x dilation) to the command's exit (results written,
    fabric torn down)."""
    with tempfile.TemporaryDirectory(prefix="fabric-emu-bench-") as out:
        t0 = time.monotonic()
        launch_unix_ns = time.time_ns()
        proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", experiment, "--out", out],
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        exited = []           # the exit's time to the ms, whatever the sampling interval
        waiter = threading.Thread(target=lambda: (proc.wait(), exited.append(time.time_ns())))
        waiter.start()
        peak, peak_pss = peak_memory(proc)
        waiter.join()
        exit_unix_ns = exited[0]
        wall = time.monotonic() - t0
        summary = json.loads((Path(out) / "summary.json").read_text())
    start = summary["start_unix_ns"]
    last_end = start + summary["fabric_ns"] * summary["dilation"]
    return {"wall_s": wall, "launch_to_start_s": (start - launch_unix_ns) / 1e9,
            "end_to_exit_s": (exit_unix_ns - last_end) / 1e9,
            "peak_rss_mb": peak / 2**20, "peak_pss_mb": peak_pss / 2**20, "complete": summary["complete"],
            "run_wall_s": summary["wall_s"], "fabric_ns": summary["fabric_ns"],
            "fell_behind": summary["fell_behind"],
            "packets": sum(p["tx_packets"] for p in summary["ports"])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("experiment", nargs="?", default="experiments/demo.yaml")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print(f"{a.experiment}: {a.repeat} runs")
    print(f"{'wall s':>8} {'launch->start s':>16} {'end->exit s':>12} {'peak RSS MB':>12} {'peak PSS MB':>12} {'fabric us':>10} {'switch pkts':>12} {'complete':>9} {'fell behind':>12}")
    for _ in range(a.repeat):
        r = run_once(a.experiment)
        print(f"{r['wall_s']:8.1f} {r['launch_to_start_s']:16.2f} {r['end_to_exit_s']:12.2f} {r['peak_rss_mb']:12.0f} {r['peak_pss_mb']:12.0f} {r['fabric_ns'] / 1000:10.1f} "
              f"{r['packets']:12,} {str(r['complete']):>9} {str(r['fell_behind']):>12}")


if __name__ == "__main__":
    main()
