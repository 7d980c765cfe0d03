"""Run fidelity: did the emulation keep the fabric's schedule closely enough
for its results to be true? (``summary.json``'s ``fell_behind``.)

Each process's lateness, in fabric time, is compared with the fabric's own timescales,
and frames the emulation lost count against the run; it fell behind when any ratio
(measure / limit) exceeds 1. The rules, and why: ``docs/lossless.md``, "Run fidelity:
the rules".

A virtual run (``emulator.experiment.time_mode``) is late nowhere by
construction: its verdict keeps the same keys, judges no lateness (rule
``virtual``: ratios and limits None, ``worst_ratio`` 0) and does not count
headroom drops against it (with no process late, they are the modelled
PFC's); frames the emulation lost (``link_losses``, ``socket_drops``) still
mark it: no clock makes a lost frame's results true.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from emulator.control.qos import mtu_frame_bytes
from emulator.experiment.model import Experiment
from emulator.experiment.time_mode import VIRTUAL, run_time_mode
from emulator.rundir import RawDir
from emulator.wire import WIRE_OVERHEAD_BYTES

if TYPE_CHECKING:  # pragma: no cover
    from emulator.experiment.summary_file import RunSummary

# Why the limits are this tight: with ECN and DCQCN on a fully loaded fabric
# (the demo: every host link at 100 %), a late process's catch-up burst is a
# queue no real fabric would have; nothing drains it at full load, the next
# bursts add to it, it crosses ECN's Kmin (5 frames by default) and the CNP's
# rate cut stretches flows by tens of microseconds. Measured on the demo at
# D = 8000 (2-core VM, 15 runs quiet, 9 with one core kept busy):
#   quiet: switch p99 <= 5.1 frames, NIC mean <= 0.18 frame -> slowest FCT +0.3..1.0 %
#   busy:  switch p99 >= 10 frames,  NIC mean 0.19..0.34    -> slowest FCT +2..13 %
# and at D = 16000 busy (p99 <= 3.4 frames, mean <= 0.1): +0.1..0.8 %.
SWITCH_P99_LIMIT_FRAMES = 6.0   # switch: p99 lateness above 6 MTU frame times ...
SWITCH_P99_LIMIT_HOPS = 2.0     # ... or above 2 hop times, whichever is smaller
# Spikes touch under 1 % of a switch's frames and leave its p99 alone; of
# fewer than 100 frames one is more than 1 %, and the p99 would be the
# maximum: the worst frame is spared (pods-incast: a super-spine that sent
# 68 frames read behind on one of them, its p50 0.03 of the limit).
SWITCH_P99_SPARE_FRAMES = 1
NIC_MEAN_LIMIT_FRAMES = 0.25    # NIC: mean transmit lag above a quarter of an MTU frame time
# A timed collective phase (nccl-tests row, training loop) whose NICs lost
# more than this share of its time to the process being late beyond the
# catch-up window (transmit time given up, receive stalls) reads slower than
# the fabric is: at 5 % the error is that of run-to-run noise.
LOST_LIMIT_FRACTION = 0.05
RULE = (f"behind if a switch's p99 frame lateness (its worst frame spared if it sent fewer "
        f"than 100) > {SWITCH_P99_LIMIT_FRAMES:g} x its MTU frame "
        f"time or {SWITCH_P99_LIMIT_HOPS:g} x its hop time (MTU frame serialization + link "
        f"delay), whichever is smaller, or a NIC's mean transmit lag > "
        f"{NIC_MEAN_LIMIT_FRAMES:g} x its MTU frame time, all in fabric ns, or a timed "
        f"collective lost > {LOST_LIMIT_FRACTION:.0%} of its time to stalls, or a switch "
        f"never read frames sent to it, or the kernel dropped frames at a switch port's or "
        f"a NIC's socket, or a switch dropped a paused lossless class beyond its headroom")


VIRTUAL_RULE = VIRTUAL
# A process's verdict fields measured from its lateness: None in a virtual run.
_FROM_LATENESS = ("late_fraction", "limit_fabric_ns", "tx_given_up_fabric_ns", "ratio")


def hop_ns(exp: Experiment, node: str) -> tuple[int, int]:
    """(MTU frame serialization, that + link delay) of ``node``'s fastest-crossed
    port, fabric ns: the timescales its lateness is measured against."""
    frame_bits = (mtu_frame_bytes(exp.spec.nic.mtu_bytes) + WIRE_OVERHEAD_BYTES) * 8
    best = None
    for p in exp.fabric.ports(node):
        link = exp.fabric.links[p.link_index]
        ser = frame_bits * 1e9 / link.rate_bps
        if best is None or ser + link.delay_ns < best[1]:
            best = (ser, ser + link.delay_ns)
    return (round(best[0]), round(best[1])) if best else (1, 1)


def percentile_ns(hist: list, q: float, spare: int = 0) -> int | None:
    """The ``q`` quantile of a ``[[lowest_ns, highest_ns, count], ...]`` histogram
    (ascending): the highest value of the bucket that holds it (an upper bound).
    ``spare``: the highest ``spare`` values may lie above it whatever ``q``
    (of fewer than 100 frames, a p99 would be their maximum)."""
    total = sum(n for _, _, n in hist)
    if not total:
        return None
    rank = q * total
    if spare and total > spare:
        rank = min(rank, total - spare)
    seen = 0
    for _, hi, n in hist:
        seen += n
        if seen >= rank:
            return hi
    return hist[-1][1]


def merge_hists(hists: list[list]) -> list[list]:
    merged: dict[tuple[int, int], int] = {}
    for h in hists:
        for lo, hi, n in h:
            merged[(lo, hi)] = merged.get((lo, hi), 0) + n
    return [[lo, hi, n] for (lo, hi), n in sorted(merged.items())]


def switch_limit_ns(frame_fabric_ns: int, hop_fabric_ns: int) -> float:
    """A switch's p99 lateness limit, fabric ns: a burst a few frames long,
    and never more than a couple of hops."""
    return min(SWITCH_P99_LIMIT_FRAMES * frame_fabric_ns, SWITCH_P99_LIMIT_HOPS * hop_fabric_ns)


def switch_verdict(stats: dict, d: float, hop_fabric_ns: int, frame_fabric_ns: int) -> dict:
    """One switch's lateness (its ``stats.json``) in fabric ns, and its ratio.
    Without a lateness histogram (BMv2) nothing is measured: ratio None."""
    ports = [p for p in stats.get("ports", []) if isinstance(p, dict) and "lateness_hist" in p]
    if not ports:
        return {"released_frames": None, "late_fraction": None, "p50_lateness_fabric_ns": None,
                "p99_lateness_fabric_ns": None, "max_lateness_fabric_ns": None,
                "hop_fabric_ns": hop_fabric_ns, "limit_fabric_ns": None, "ratio": None,
                "behind": False}
    hist = merge_hists([p["lateness_hist"] for p in ports])
    released = sum(n for _, _, n in hist)
    hop_wall = hop_fabric_ns * d
    # frames whose whole bucket lies beyond one hop: late by more than a hop
    late = sum(n for lo, _, n in hist if lo > hop_wall)
    p50, p99 = percentile_ns(hist, 0.5), percentile_ns(hist, 0.99, SWITCH_P99_SPARE_FRAMES)
    limit = switch_limit_ns(frame_fabric_ns, hop_fabric_ns)
    ratio = (p99 or 0) / d / limit
    return {"released_frames": released,
            "late_fraction": round(late / released, 5) if released else 0.0,
            "p50_lateness_fabric_ns": round((p50 or 0) / d),
            "p99_lateness_fabric_ns": round((p99 or 0) / d),
            "max_lateness_fabric_ns": round(max(p.get("max_lateness_ns", 0) for p in ports) / d),
            "hop_fabric_ns": hop_fabric_ns, "limit_fabric_ns": round(limit),
            "ratio": round(ratio, 4), "behind": ratio > 1}


def nic_verdict(nic_stats: dict, d: float, frame_fabric_ns: int) -> dict:
    """One NIC's transmit lag (its ``NicStats``) in fabric ns, and its ratio.
    The NIC keeps only the sum and the maximum: no fraction, no percentile."""
    packets = int(nic_stats.get("tx_packets") or 0)
    # the lag is kept for data-bearing frames (result files before it: every frame)
    lagged = int(nic_stats.get("tx_lag_frames", packets) or 0)
    mean_wall = nic_stats.get("tx_lag_sum_ns", 0) / lagged if lagged else 0.0
    ratio = mean_wall / d / (NIC_MEAN_LIMIT_FRAMES * frame_fabric_ns)
    samples = int(nic_stats.get("rx_late_samples") or 0)
    rx_hist = nic_stats.get("rx_late_hist") or []
    rx_mean_wall = nic_stats.get("rx_late_sum_ns", 0) / samples if samples else 0.0
    return {"tx_packets": packets, "late_fraction": None, "p99_lateness_fabric_ns": None,
            "mean_lateness_fabric_ns": round(mean_wall / d),
            "max_lateness_fabric_ns": round(nic_stats.get("tx_lag_max_ns", 0) / d),
            "tx_given_up_fabric_ns": round(nic_stats.get("tx_given_up_ns", 0) / d),
            "rx_wakeups": samples,
            "rx_mean_lateness_fabric_ns": round(rx_mean_wall / d),
            "rx_p50_lateness_fabric_ns": round((percentile_ns(rx_hist, 0.5) or 0) / d),
            "rx_p90_lateness_fabric_ns": round((percentile_ns(rx_hist, 0.9) or 0) / d),
            "rx_p99_lateness_fabric_ns": round((percentile_ns(rx_hist, 0.99) or 0) / d),
            "rx_max_lateness_fabric_ns": round(nic_stats.get("rx_late_max_ns", 0) / d),
            "mtu_frame_fabric_ns": frame_fabric_ns,
            # frames the kernel dropped at its sockets (``socket_drops`` judges them)
            "rx_socket_drops": int(nic_stats.get("rx_socket_drops") or 0),
            "ratio": round(ratio, 4), "behind": ratio > 1}


def nic_stats_by_host(exp: Experiment, agent_results: dict[str, dict],
                      run_dir: Path | RawDir) -> dict[str, dict]:
    """Fabric host (NIC) -> its ``NicStats``: plain host agents' ``nic``, and the
    workload's server agents' ``nics`` (their NICs in order, then a separate
    storage-read NIC) and storage agent's ``nic`` from their result files."""
    out = {h: r["nic"] for h, r in agent_results.items() if isinstance(r.get("nic"), dict)}
    wp = exp.workload
    if wp is None:
        return out
    readers = dict(wp.readers)
    names = list(wp.servers) + ([wp.storage_server] if wp.storage_server else [])
    for name in names:
        try:
            res = json.loads(RawDir(run_dir).result(name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(res.get("nic"), dict) and wp.storage_nic and name == wp.storage_server:
            out[wp.storage_nic] = res["nic"]
        nics = list(exp.fabric.server(name).nics)
        if readers.get(name) and readers[name] not in nics:
            nics.append(readers[name])
        for nic, st in zip(nics, res.get("nics") or []):
            if isinstance(st, dict):
                out[nic] = st
    return out


# Frames a sender put on a link that the switch at its far end never read
# (a switch process that fell behind its receive queue: BMv2's packet capture
# overflows so) are losses no wire has. Counters are read after the agents
# stopped, so a handful may still be unread: beyond this share of what was
# sent, and more than LINK_LOSS_MIN_FRAMES, the run lost frames.
LINK_LOSS_LIMIT_FRACTION = 0.001
LINK_LOSS_MIN_FRAMES = 3
# What a lossy link adds to worst_ratio: enough to raise D (doubling it on a
# rerun), not a measure of how much higher D must go.
LINK_LOSS_RATIO = 2.0


def frames_sent(src: str, dst: str, by_end: dict[tuple[str, str], dict],
                nic_stats: dict[str, dict]) -> int | None:
    """The frames ``src`` sent on its link to ``dst``: a NIC's ``tx_packets``;
    a switch port's ``tx_packets`` + its pause frames (``by_end``: (node,
    peer) -> summary.json's port entry). None: neither is known."""
    if src in nic_stats:
        return int(nic_stats[src].get("tx_packets") or 0)
    q = by_end.get((src, dst))
    if q is None:
        return None
    return q["tx_packets"] + sum(e.get("pause_tx") or 0 for e in q.get("priorities", []))


def link_losses(ports: list[dict], nic_stats: dict[str, dict],
                fault_lost: dict[tuple[str, str], int] | None = None) -> list[dict]:
    """Per link into a switch (from a NIC or a switch): frames sent that the
    switch never received, where more than the tolerance. Sent: a NIC's
    ``tx_packets``; a switch port's ``tx_packets`` + its pause frames. A
    switch's pause counters count XOFFs, the receiver counts XONs too, so
    for switch-to-switch links this is a lower bound. ``fault_lost``:
    (sender, receiver) -> frames scripted faults kept from the receiver
    (``experiment.fault_results``): the experiment's losses, not the emulation's."""
    fault_lost = fault_lost or {}
    by_end = {(p["node"], p["peer"]): p for p in ports}
    out = []
    for p in ports:
        src, dst = p["peer"], p["node"]          # frames from the peer into this port
        sent = frames_sent(src, dst, by_end, nic_stats)
        if sent is None:
            continue
        lost = sent - fault_lost.get((src, dst), 0) - int(p.get("rx_packets") or 0)
        if lost > max(LINK_LOSS_MIN_FRAMES, LINK_LOSS_LIMIT_FRACTION * sent):
            out.append({"from": src, "to": dst, "port": p["port"], "sent": sent,
                        "received": int(p.get("rx_packets") or 0), "lost": lost})
    return out


def _mark_behind(summary: "RunSummary", names: list[str], ratio: float) -> None:
    """Add what was behind (``names``) and its ratio to the summary's verdict."""
    fid = summary.fidelity
    fid.behind = sorted({*fid.behind, *names})
    fid.worst_ratio = round(max(fid.worst_ratio, ratio), 4)
    summary.fell_behind = summary.fell_behind or fid.worst_ratio > 1


def _emulator_losses_behind(summary: "RunSummary", names: list[str]) -> None:
    """Frames the emulation lost (no real fabric would): the run is behind."""
    if names:
        _mark_behind(summary, names, LINK_LOSS_RATIO)


def add_link_losses(summary: "RunSummary", losses: list[dict]) -> None:
    """Fold link losses into the verdict (summary ``link_losses``)."""
    summary.link_losses = losses
    _emulator_losses_behind(summary, [f"link {x['from']}->{x['to']}" for x in losses])


def socket_drops(ports: list[dict], nic_stats: dict[str, dict]) -> list[dict]:
    """Ports whose packet socket the kernel dropped frames at (its receive
    buffer full: the switch or NIC process did not read in time), before
    any pipeline or NIC counter saw them: a switch port's ``rx_socket_drops``
    (its ``stats.json``), a NIC's (its ``NicStats``; a host's single port,
    0). Every one is a frame the emulation lost: no tolerance."""
    out = [{"node": p["node"], "port": p["port"], "rx_socket_drops": int(p["rx_socket_drops"])}
           for p in ports if p.get("rx_socket_drops")]
    out += [{"node": h, "port": 0, "rx_socket_drops": int(st["rx_socket_drops"])}
            for h, st in sorted(nic_stats.items()) if st.get("rx_socket_drops")]
    return out


def add_socket_drops(summary: "RunSummary", drops: list[dict]) -> None:
    """Fold socket drops into the verdict (summary ``socket_drops``)."""
    summary.socket_drops = drops
    _emulator_losses_behind(summary, [f"socket {x['node']}:{x['port']}" for x in drops])


def headroom_drops(ports: list[dict]) -> list[dict]:
    """(switch, port, priority) cells that dropped frames of a paused lossless
    class beyond XOFF + headroom. The controller sizes headroom for the link's
    round trip plus ``REACTION_WALL_NS`` of process wake-up (emulator.net.fabric):
    a drop means a switch or NIC reacted later than that, which no real
    fabric's PFC does -- the emulation fell behind."""
    return [{"node": p["node"], "port": p["port"], "priority": e["priority"],
             "headroom_drops": e["headroom_drops"]}
            for p in ports for e in p.get("priorities", []) if e.get("headroom_drops")]


def add_headroom_drops(summary: "RunSummary", drops: list[dict]) -> None:
    """Fold headroom drops into the verdict (summary ``headroom_drops``); a
    virtual run's are listed, not judged: no process reacted late."""
    summary.headroom_drops = drops
    if summary.time == VIRTUAL:
        return
    _emulator_losses_behind(summary, [f"headroom {x['node']}:{x['port']}" for x in drops])


def run_fidelity(exp: Experiment, switch_stats: dict[str, dict],
                 nic_stats: dict[str, dict]) -> dict:
    """The verdict: ``{"fell_behind", "worst_ratio", "rule", limits, "behind": [names],
    "switches": {name: ...}, "nics": {host: ...}}``."""
    d = exp.dilation
    switches = {sw.name: switch_verdict(switch_stats.get(sw.name, {}), d,
                                        hop_ns(exp, sw.name)[1], hop_ns(exp, sw.name)[0])
                for sw in exp.fabric.switches()}
    nics = {h: nic_verdict(st, d, hop_ns(exp, h)[0]) for h, st in sorted(nic_stats.items())
            if h in exp.fabric}
    if run_time_mode(exp) == VIRTUAL:
        return virtual_fidelity(switches, nics)
    ratios = [v["ratio"] for v in [*switches.values(), *nics.values()] if v["ratio"] is not None]
    worst = max(ratios, default=0.0)
    return {"fell_behind": worst > 1, "worst_ratio": round(worst, 4), "rule": RULE,
            "switch_p99_limit_frames": SWITCH_P99_LIMIT_FRAMES,
            "switch_p99_limit_hops": SWITCH_P99_LIMIT_HOPS,
            "nic_mean_limit_frames": NIC_MEAN_LIMIT_FRAMES,
            "behind": sorted(n for n, v in [*switches.items(), *nics.items()] if v["behind"]),
            "switches": switches, "nics": nics}


def _unjudged(verdict: dict) -> dict:
    """A process's verdict in a virtual run: its counts and timescales, no
    lateness (None), not behind."""
    return {k: (None if k in _FROM_LATENESS or "lateness" in k else v)
            for k, v in verdict.items()} | {"behind": False}


def virtual_fidelity(switches: dict[str, dict], nics: dict[str, dict]) -> dict:
    """``run_fidelity``'s verdict for a virtual run: the same keys, rule
    ``virtual``, nothing judged from lateness."""
    return {"fell_behind": False, "worst_ratio": 0.0, "rule": VIRTUAL_RULE,
            "switch_p99_limit_frames": None, "switch_p99_limit_hops": None,
            "nic_mean_limit_frames": None, "behind": [],
            "switches": {n: _unjudged(v) for n, v in switches.items()},
            "nics": {n: _unjudged(v) for n, v in nics.items()}}


def add_collectives_fidelity(summary: "RunSummary", block: dict) -> None:
    """Fold the workload's timed phases into the verdict: a row (or the
    training loop) whose ``lost_fraction`` exceeds ``LOST_LIMIT_FRACTION``
    is distorted, and so is the run. (Not in a virtual run: the time lost
    is lateness, which it has none of.)"""
    if summary.time == VIRTUAL:
        return
    phases = [(f"{r['collective']} {r['size_bytes']} B", r.get("lost_fraction") or 0.0)
              for r in block.get("results", [])]
    if block.get("training"):
        phases.append(("training", block["training"].get("lost_fraction") or 0.0))
    summary.fidelity.lost_limit_fraction = LOST_LIMIT_FRACTION
    ratios = [(name, frac / LOST_LIMIT_FRACTION) for name, frac in phases]
    _mark_behind(summary, [f"collectives: {name}" for name, r in ratios if r > 1],
                 max((r for _, r in ratios), default=0.0))
