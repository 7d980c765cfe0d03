"""A run's ``{sw}.stats.json`` and raw logs where no switch process wrote
them for that run: BMv2's, from fabric.p4's counters over P4Runtime, and a
live fabric's run, cut from the logs of the fabric it ran on."""
from __future__ import annotations

import json
from pathlib import Path

from emulator.atomic import atomic_open, atomic_write_text
from emulator.rundir import RawDir


def counters_since(now: dict, before: dict) -> dict:
    """Counter cells minus their values before (cells are dicts of counts)."""
    if not before:
        return now
    return {k: {f: v - before.get(k, {}).get(f, 0) for f, v in cell.items()}
            for k, cell in now.items()}


def write_stats_window(fabric_dir: Path, run_dir: Path, start: dict[str, dict],
                       end: dict[str, dict]) -> None:
    """A live fabric's run, as its own run directory: each switch's
    ``stats.json`` is its ``end`` snapshot (counters and peaks since
    ``start``), and its raw logs are the rows appended between the two
    snapshots, under the logs' header."""
    raw, fabric_raw = RawDir(run_dir), RawDir(fabric_dir)
    for name, stats in end.items():
        atomic_write_text(raw.stats(name), json.dumps(stats, indent=1))
        first = start.get(name, {}).get("raw_log_bytes", {})
        for kind, last in stats.get("raw_log_bytes", {}).items():
            src = fabric_raw.log(name, kind)
            with src.open("rb") as f, atomic_open(raw.log(name, kind), "wb") as out:
                out.write(f.readline())                   # the header
                f.seek(max(first.get(kind, 0), f.tell()))
                out.write(f.read(last - f.tell()))


def write_p4_counter_stats(controller, run_dir: Path, before: dict | None = None) -> None:
    """``{sw}.stats.json`` from fabric.p4's per-(port, priority) counters
    (minus ``before``, ``read_priority_counters`` earlier: a live fabric's run).

    The embedded target writes this file itself, with what its traffic
    manager measures (drops, pause time, peak depth). BMv2 has only the P4
    counters: drops are what ingress enqueued minus what egress sent; pause
    time and queue peaks are not known (null in summary.json).
    """
    by_switch: dict[str, dict[int, list[dict]]] = {}
    for (sw, port, prio), c in counters_since(controller.read_priority_counters(), before or {}).items():
        by_switch.setdefault(sw, {}).setdefault(port, []).append({
            "priority": prio, "tx_packets": c.get("tx_packets", 0), "tx_bytes": c.get("tx_bytes", 0),
            "drops": max(0, c.get("enq_packets", 0) - c.get("tx_packets", 0)),
            "ecn_marks": c.get("ecn_mark_packets", 0),
            "pause_tx": c.get("pause_tx_packets", 0), "pause_rx": c.get("pause_rx_packets", 0),
            "headroom_drops": 0,       # BMv2 has no headroom accounting
            "paused_ns": None, "max_depth_bytes": None})
    for sw in controller.conns:
        ports = [{"port": port, "priorities": prios} for port, prios in sorted(by_switch.get(sw, {}).items())]
        atomic_write_text(RawDir(run_dir).stats(sw),
                          json.dumps({"source": "fabric.p4 counters", "ports": ports}, indent=1))
