"""The PFC watchdog's results (``switch.pfc_watchdog``, ``dataplane/pfcwd.py``):
summary.json's ``switches[].pfc_watchdog`` -- its settings, its counters per
(port, priority) queue that had a storm, and its events in fabric ns -- and
``pfcwd_events.csv`` (``timeseries``: one row per storm detected or restored).
"""
from __future__ import annotations

from emulator.dataplane.pfcwd import RESTORE_EVENT, STORM_EVENT

EVENTS = {STORM_EVENT: "storm_detected", RESTORE_EVENT: "storm_restored"}
COLUMNS = ("time_ns", "node", "port", "peer", "priority", "event", "action")
_COUNTERS = ("pfcwd_storms", "pfcwd_restores", "pfcwd_tx_drops", "pfcwd_rx_drops")


def event_row(sw: str, peer: str, r: dict, t_ns: float, action: str) -> dict:
    """A raw ``pfcwd_*`` event of switch ``sw`` as a ``pfcwd_events.csv`` row."""
    return {"time_ns": t_ns, "node": sw, "port": r["port"], "peer": peer,
            "priority": r["priority"], "event": EVENTS[r["event"]], "action": action}


def watchdog_block(exp, sw: str, stats: dict) -> dict | None:
    """``switches[].pfc_watchdog`` of ``sw`` but its events (None: off): the
    settings, the totals and the queues that had a storm."""
    spec = exp.spec.switch.pfc_watchdog
    if not spec.enabled:
        return None
    queues = []
    for port in stats.get("ports") or []:
        if not isinstance(port, dict):
            continue
        for prio in port.get("priorities") or []:
            counts = {k: int(prio.get(k) or 0) for k in _COUNTERS}
            if any(counts.values()):
                queues.append({"port": port.get("port"), "peer": _peer(exp, sw, port.get("port")),
                               "priority": prio.get("priority"),
                               "storms_detected": counts["pfcwd_storms"],
                               "storms_restored": counts["pfcwd_restores"],
                               "tx_drops": counts["pfcwd_tx_drops"],
                               "rx_drops": counts["pfcwd_rx_drops"],
                               "storming_at_end": bool(prio.get("pfcwd_storming"))})
    return {"action": spec.action, "detection_time_us": spec.detection_time_us,
            "restoration_time_us": spec.restoration_time_us,
            "storms_detected": sum(q["storms_detected"] for q in queues),
            "storms_restored": sum(q["storms_restored"] for q in queues),
            "dropped_frames": sum(q["tx_drops"] + q["rx_drops"] for q in queues),
            "queues": queues, "events": []}


def add_watchdog_events(summary, rows: list[dict]) -> None:
    """The converted events (fabric ns) into each switch's block."""
    by_node: dict[str, list[dict]] = {}
    for r in rows:
        by_node.setdefault(r["node"], []).append(
            {k: (round(r[k]) if k == "time_ns" else r[k]) for k in COLUMNS if k != "node"})
    for entry in summary.switches:
        block = entry.get("pfc_watchdog")
        if block is not None:
            block["events"] = by_node.get(entry["node"], [])


def watchdog_totals(summary: dict) -> tuple[int, int, int] | None:
    """(storms detected, restored, frames dropped) over the switches (None: off)."""
    blocks = [s["pfc_watchdog"] for s in summary.get("switches") or [] if s.get("pfc_watchdog")]
    if not blocks:
        return None
    return (sum(b["storms_detected"] for b in blocks), sum(b["storms_restored"] for b in blocks),
            sum(b["dropped_frames"] for b in blocks))


def _peer(exp, sw: str, port_no) -> str:
    try:
        return exp.fabric.port(sw, port_no).peer
    except (KeyError, TypeError):
        return ""
