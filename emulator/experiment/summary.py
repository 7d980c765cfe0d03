"""summary.json: the contract of a run's results (docs/how-to/results.md; every key:
docs/reference/summary.md).

Times of flows are fabric nanoseconds: wall-clock measurements divided by the
dilation factor. Per-priority port counters come from each switch's
``{sw}.stats.json`` (``docs/lossless.md``); ``paused_ns`` there is wall
(dilated) time and is divided by the dilation here.

``fell_behind``: whether the emulation's lateness distorted the results,
judged in fabric time by ``fidelity.run_fidelity`` (the rule: a switch's p99
frame lateness above 6 MTU frame times or 2 hop times -- MTU frame
serialization + link delay --, whichever is smaller, or a NIC's mean transmit
lag above a quarter of an MTU frame time). The numbers behind it:
``switches`` (per switch: late fraction = frames later than one hop,
p50/p99/max lateness, hop time, limit, ratio to it), ``nics`` (per NIC: mean
and max lag, MTU frame time, ratio) and ``fidelity`` (rule, limits,
``worst_ratio``, who was behind). See docs/lossless.md, "Run fidelity".

``time``: the clock the run kept (``emulator.experiment.time_mode``). A
virtual run's D is 1 and nothing in it is late: its verdict's rule is
``virtual`` (``fidelity.virtual_fidelity``). Before version 6 every run was
dilated.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

from rich.table import Table

from emulator.experiment.fidelity import (
    add_headroom_drops, add_link_losses, add_socket_drops, headroom_drops, link_losses,
    nic_stats_by_host, run_fidelity, socket_drops,
)
from emulator.experiment.fault_results import fault_lost_by_direction, fault_summary
from emulator.experiment.ideal_fct import flow_paths, flow_priority, standalone_fct_ns
from emulator.experiment.model import Experiment
from emulator.experiment.pfcwd_results import watchdog_block, watchdog_totals
from emulator.experiment.results_io import read_stats, stats_by_port_priority
from emulator.experiment.summary_file import Fidelity, RunSummary
from emulator.experiment.time_mode import VIRTUAL, run_time_mode
from emulator.rundir import RawDir

SUMMARY_VERSION = 6           # 2: ports[].priorities, flows[].priority/standalone_fct_ns/fct_slowdown
                              # 3: fell_behind in fabric time: switches[] lateness, nics[], fidelity
                              #    and flows[].retransmitted_packets/timeouts/naks
                              # 4: fct_slowdown_buckets, queue_depth_dist, generated_traffic
                              #    (emulator/experiment/distributions.py, traffic_gen.py)
                              # 5: ports[].rx_socket_drops, nics[].rx_socket_drops, socket_drops
                              # 6: time (virtual | dilated); a virtual run's fidelity rule
                              #    "virtual" (emulator/experiment/time_mode.py)
# Loss recovery of a flow, from its sender's QP: packets sent again (go-back-N
# after a NAK or an ACK timeout), ACK timeouts, NAKs received.
FLOW_RECOVERY_COUNTERS = ("retransmitted_packets", "timeouts", "naks")
# Per-priority counters of a port, as in stats.json; paused_ns converted to fabric ns.
PRIORITY_COUNTERS = ("tx_packets", "tx_bytes", "drops", "headroom_drops", "ecn_marks",
                     "pause_tx", "pause_rx", "paused_ns", "max_depth_bytes")


def _priority_entries(per_queue: dict[tuple[int, int], dict], port: int, d: float) -> list[dict]:
    out = []
    for (p, prio), c in sorted(per_queue.items()):
        if p != port:
            continue
        entry = {"priority": prio}
        for k in PRIORITY_COUNTERS:
            v = c.get(k, 0)
            if v is None:              # not measured by this target (BMv2: see runner)
                entry[k] = None
                continue
            entry[k] = round(v / d) if k == "paused_ns" else int(v)
        out.append(entry)
    return out


# Per-VL counters of an InfiniBand port, as in its switch's stats.json
# (emulator/ib/switch.py); stalled_ns converted to fabric ns.
VL_COUNTERS = ("tx_packets", "tx_bytes", "stalls", "stalled_ns", "overruns", "fc_tx", "fc_rx",
               "max_depth_bytes")


def _port_stats(stats: dict, port: int) -> dict:
    """A port's entry in its switch's stats.json ({} if it has none)."""
    return next((x for x in stats.get("ports", []) if isinstance(x, dict) and x.get("port") == port),
                {})


def _socket_drops(port_stats: dict) -> int | None:
    """Frames the kernel dropped at the port's socket before the switch read
    them (the embedded targets count them; BMv2's stats do not: None)."""
    v = port_stats.get("rx_socket_drops")
    return None if v is None else int(v)


def _fcs_errors(port_stats: dict) -> dict:
    """``rx_fcs_errors``: frames with a bad FCS the port dropped on arrival
    (a link's bit errors, virtual time's trailer); absent where not counted."""
    v = port_stats.get("rx_fcs_errors")
    return {} if v is None else {"rx_fcs_errors": int(v)}


# A NIC's drops of corrupted frames: its ICRC check's, and its MAC's (a bad
# FCS on a frame its ICRC does not cover); its QPs that went to the error
# state, by cause (retries or RNR retries exhausted), and the work requests
# flushed with them.
NIC_ERROR_COUNTERS = ("rx_icrc_errors", "rx_fcs_errors", "qp_errors", "retry_exc_errors",
                      "rnr_retry_exc_errors", "wr_flush_errors", "tx_link_down", "link_down_events")


def _rx_errors(nic: dict) -> dict:
    """A NIC's ``NIC_ERROR_COUNTERS``; absent where not counted."""
    return {k: int(nic[k]) for k in NIC_ERROR_COUNTERS if k in nic}


def _ib_port_entry(stats: dict, port: int, counters: dict, d: float) -> dict:
    """An InfiniBand port's summary: what it received (ib.p4's counters),
    what it sent and how long each VL stalled for want of credit -- the
    credit-based fabric's counterpart of PFC's pause time -- and its
    overruns (a packet beyond the buffer the port granted: never, if its
    peer obeys the credits) as its drops."""
    p = _port_stats(stats, port)
    vls = [{"vl": v["vl"], **{k: (round(v.get(k, 0) / d) if k == "stalled_ns" else int(v.get(k, 0)))
                             for k in VL_COUNTERS}} for v in p.get("vls", [])]
    return {"rx_packets": counters.get("rx_packets", 0), "rx_bytes": counters.get("rx_bytes", 0),
            "tx_packets": sum(v["tx_packets"] for v in vls),
            "tx_bytes": sum(v["tx_bytes"] for v in vls),
            "drops": sum(v["overruns"] for v in vls), "pipeline_drops": 0,
            "rx_socket_drops": _socket_drops(p),
            "fecn_marks": counters.get("fecn_mark_packets", 0),
            "credit_stalled_ns": sum(v["stalled_ns"] for v in vls),
            "vls": vls, "priorities": []}


def build_summary(exp: Experiment, target: str, agent_results: dict[str, dict],
                  counters: dict[tuple[str, int], dict], run_dir: Path | RawDir,
                  wall_s: float) -> RunSummary:
    """The run's summary from its agents' results, the switches' ``counters``
    and the raw directory's stats; the endpoint and workload blocks, the
    runner's and the dilation's keys are added later (``RunSummary``)."""
    raw = RawDir(run_dir)
    flows, fabric_ns = _flow_entries(exp, agent_results)
    stats = {sw.name: read_stats(raw.stats(sw.name)) for sw in exp.fabric.switches()}
    ports = _port_entries(exp, stats, counters)
    nic_stats = nic_stats_by_host(exp, agent_results, raw)
    fid = run_fidelity(exp, stats, nic_stats)
    switches = [{"node": sw.name, "device_id": exp.fabric.device_id(sw.name),
                 "tx_packets": sum(p["tx_packets"] for p in ports if p["node"] == sw.name),
                 **fid["switches"][sw.name]} for sw in exp.fabric.switches()]
    for entry in switches:
        wd = watchdog_block(exp, entry["node"], stats[entry["node"]])
        if wd is not None:
            entry["pfc_watchdog"] = wd
    nics = [{"node": h, **v, **_rx_errors(nic_stats.get(h) or {})} for h, v in fid["nics"].items()]
    fidelity = {k: v for k, v in fid.items() if k not in ("switches", "nics", "fell_behind")}
    summary = RunSummary(
        summary_version=SUMMARY_VERSION,
        experiment=exp.name, source=exp.source, topology=exp.fabric.name,
        target=target, link_layer=exp.fabric.link_layer,
        time=run_time_mode(exp), dilation=exp.dilation, wall_s=round(wall_s, 3),
        fabric_ns=fabric_ns, fell_behind=fid["fell_behind"],
        complete=all(f["complete"] for f in flows),
        lossless_priorities=lossless_priorities(exp),
        flows=flows, ports=ports, switches=switches, nics=nics,
        fidelity=Fidelity(**fidelity))
    faults = fault_summary(exp, stats, nic_stats, raw.reroute(), _fabric_end_ns(exp, stats, fabric_ns),
                           raw.bmv2_faults(), ports)
    if faults is not None:
        if faults.reroutes:
            faults.blackholed_frames = sum(p["pipeline_drops"] for p in ports)
        summary.faults = faults
    add_link_losses(summary, link_losses(ports, nic_stats, fault_lost_by_direction(faults)))
    add_socket_drops(summary, socket_drops(ports, nic_stats))
    add_headroom_drops(summary, headroom_drops(ports))
    return summary


def _fabric_end_ns(exp: Experiment, stats: dict[str, dict], flows_end_ns: int) -> int:
    """The last fabric ns the run saw: a controller's write timed later never
    took effect. The flows' last completion (``flows_end_ns``; 0 for a
    workload, which has no flows) or, in virtual time, the latest switch's
    clock when it stopped (its stats' ``until_ns``: an idle switch's stops at
    its last event), whichever is later."""
    ends = [s["until_ns"] for s in stats.values() if s and s.get("until_ns") is not None]
    if run_time_mode(exp) != VIRTUAL or not ends:
        return flows_end_ns
    return max(flows_end_ns, *ends)


def _flow_entries(exp: Experiment, agent_results: dict[str, dict]) -> tuple[list[dict], int]:
    """summary.json's ``flows``, and the fabric time from the first post to
    the last completion (``fabric_ns``)."""
    d = exp.dilation
    sent = {}
    received = {}
    for res in agent_results.values():
        for s in res.get("send", []):
            sent[s["flow_id"]] = s
        for r in res.get("expect", []):
            received[r["flow_id"]] = r
    priority = flow_priority(exp)
    paths = flow_paths(exp)
    flows = []
    first_post = last_done = None
    for f in exp.flows:
        s, r = sent.get(f.flow_id, {}), received.get(f.flow_id, {})
        complete = bool(s.get("complete")) and bool(r.get("complete")) and bool(r.get("intact"))
        fct_ns = round(s["fct_ns"] / d) if s.get("complete") and s.get("fct_ns") is not None else None
        if s.get("post_unix_ns"):
            first_post = min(first_post or s["post_unix_ns"], s["post_unix_ns"])
        if s.get("complete_unix_ns"):
            last_done = max(last_done or 0, s["complete_unix_ns"])
        try:
            ideal_ns = standalone_fct_ns(exp, f, paths)
        except ValueError:          # no route: cannot happen in a validated fabric
            ideal_ns = None
        flows.append({
            "flow_id": f.flow_id, "src": f.src, "dst": f.dst, "op": f.op,
            "bytes": f.size_bytes, "delivered_bytes": int(r.get("delivered_bytes", 0)),
            "intact": bool(r.get("intact", False)), "complete": complete, "fct_ns": fct_ns,
            "start_ns": f.start_fabric_ns,
            "src_qpn": f.src_qpn, "dst_qpn": f.dst_qpn, "udp_sport": f.udp_sport,
            "priority": priority, "standalone_fct_ns": ideal_ns,
            "fct_slowdown": (round(fct_ns / ideal_ns, 4)
                             if fct_ns is not None and ideal_ns else None),
            # what the sender's QP went through (host agent results)
            **{k: int(s.get(k, 0)) for k in FLOW_RECOVERY_COUNTERS},
            **_flow_status(f, s, d),
        })
    fabric_ns = round((last_done - first_post) / d) if first_post and last_done else 0
    return flows, fabric_ns


def _flow_status(f, s: dict, d: float) -> dict:
    """``status``: the work completion of the flow's send (``WcStatus``'s
    name; None before it completed); ``failed``: its QP failed
    (RETRY_EXC_ERR, ...); ``failed_ns``: then, when (fabric ns from the
    run's start: the flow's start plus post to the failed completion)."""
    status = s.get("status")
    failed = status is not None and status != "SUCCESS"
    after = s.get("failed_after_ns")
    return {"status": status, "failed": failed,
            "failed_ns": (f.start_fabric_ns + round(after / d)
                          if failed and after is not None else None)}


def _port_entries(exp: Experiment, stats: dict[str, dict],
                  counters: dict[tuple[str, int], dict]) -> list[dict]:
    """summary.json's ``ports``: every switch port's counters (``counters``:
    fabric.p4's) and its switch's stats (``stats``: per switch)."""
    d = exp.dilation
    ports = []
    ib = exp.fabric.link_layer == "infiniband"
    for sw in exp.fabric.switches():
        per_queue = stats_by_port_priority(stats[sw.name])
        for p in exp.fabric.ports(sw.name):
            c = counters.get((sw.name, p.port_no), {})
            if ib:
                ports.append({"node": sw.name, "role": sw.role, "port": p.port_no,
                              "ifname": p.ifname, "peer": p.peer,
                              **_ib_port_entry(stats[sw.name], p.port_no, c, d)})
                continue
            ports.append({
                "node": sw.name, "role": sw.role, "port": p.port_no, "ifname": p.ifname,
                "peer": p.peer,
                "rx_packets": c.get("rx_packets", 0), "rx_bytes": c.get("rx_bytes", 0),
                "tx_packets": c.get("tx_packets", 0), "tx_bytes": c.get("tx_bytes", 0),
                # What ingress handed to this port but egress never sent: the
                # traffic manager dropped it (buffer full).
                "drops": max(0, c.get("enq_packets", 0) - c.get("tx_packets", 0)),
                "pipeline_drops": c.get("pipeline_drop_packets", 0),
                "rx_socket_drops": _socket_drops(_port_stats(stats[sw.name], p.port_no)),
                **_fcs_errors(_port_stats(stats[sw.name], p.port_no)),
                "priorities": _priority_entries(per_queue, p.port_no, d),
            })
    return ports


def lossless_priorities(exp: Experiment) -> list[int]:
    """The priorities PFC protects in this run (none without PFC; none on
    InfiniBand, whose data VLs credits keep lossless)."""
    if exp.fabric.link_layer == "infiniband":
        return []
    qos = exp.spec.qos
    return [qos.roce_priority] if qos is not None and qos.pfc.enabled else []


def priority_totals(summary: dict) -> dict[str, int]:
    """Sums over every port and priority of the per-priority counters."""
    tot = {k: 0 for k in PRIORITY_COUNTERS if k != "max_depth_bytes"}
    tot["max_depth_bytes"] = 0
    for p in summary.get("ports", []):
        for q in p.get("priorities", []):
            for k in tot:
                if k == "max_depth_bytes":
                    tot[k] = max(tot[k], q.get(k, 0) or 0)
                else:
                    tot[k] += q.get(k, 0) or 0
    return tot


def _what_ran(summary: dict) -> str:
    """The title's count: flows, or a workload's collectives (a workload has no flows)."""
    flows = summary["flows"]
    coll = summary.get("collectives")
    if flows or coll is None:
        return f"{sum(1 for f in flows if f['complete'])}/{len(flows)} flows complete"
    return "collectives " + ("complete" if coll.get("complete") else "INCOMPLETE")


def _fabric_time(summary: dict) -> str:
    """Fabric time of the flows (first post to last completion), else of the
    whole virtual-time run (a workload's), else nothing to say."""
    if summary["flows"] or "virtual_time" not in summary:
        return f"fabric {summary['fabric_ns'] / 1000:.1f} µs" if summary["flows"] else "no flows"
    return f"fabric {summary['virtual_time']['fabric_ns'] / 1000:.1f} µs in all"


def render_summary(summary: dict) -> Table:
    flows = summary["flows"]
    done = [f for f in flows if f["complete"]]
    fcts = sorted(f["fct_ns"] for f in done if f["fct_ns"] is not None)
    virtual = summary.get("time") == VIRTUAL
    t = Table(title=f"{summary['experiment']} on {summary['target']}: {_what_ran(summary)}, "
                    f"wall {summary['wall_s']:.1f} s, " + _fabric_time(summary) + " ("
                    + ("virtual time" if virtual else f"dilation {summary['dilation']:g}") + ")"
                    + (", FELL BEHIND" if summary["fell_behind"] else ""))
    for col in ("metric", "value"):
        t.add_column(col)
    delivered = sum(f["delivered_bytes"] for f in flows)
    if virtual:
        t.add_row("fidelity", "virtual time: nothing late by construction" + (
            f"; frames lost ({', '.join(summary['fidelity']['behind'])})"
            if summary["fell_behind"] and "fidelity" in summary else ""))
    elif "fidelity" in summary:
        t.add_row("worst lateness / its limit (behind above 1)",
                  f"{summary['fidelity']['worst_ratio']:.2f}"
                  + (f" ({', '.join(summary['fidelity']['behind'])})" if summary["fell_behind"] else ""))
    t.add_row("bytes delivered", f"{delivered:,} of {sum(f['bytes'] for f in flows):,}")
    if fcts:
        t.add_row("FCT min / median / max (fabric µs)",
                  f"{fcts[0] / 1000:.1f} / {fcts[len(fcts) // 2] / 1000:.1f} / {fcts[-1] / 1000:.1f}")
    slow = sorted(f["fct_slowdown"] for f in done if f.get("fct_slowdown") is not None)
    if slow:
        t.add_row("FCT slowdown median / max (vs alone)",
                  f"{slow[len(slow) // 2]:.2f} / {slow[-1]:.2f}")
    for g in summary.get("generated_traffic") or []:
        t.add_row(f"traffic[{g['entry']}] {g['pattern']} {g['distribution']}: offered load",
                  f"{g['offered_load']:.3f} of {g['load']:g} asked ({g['flows']} flows over "
                  f"{g['duration_us']:g} µs, per host {g['offered_load_min']:.2f}.."
                  f"{g['offered_load_max']:.2f})")
    t.add_row("retransmitted packets / ACK timeouts / NAKs",
              " / ".join(f"{sum(f.get(k, 0) for f in flows):,}" for k in FLOW_RECOVERY_COUNTERS))
    t.add_row("switch drops (queue / pipeline)",
              f"{sum(p['drops'] for p in summary['ports'])} / "
              f"{sum(p['pipeline_drops'] for p in summary['ports'])}")
    wd = watchdog_totals(summary)
    if wd is not None:
        t.add_row("PFC watchdog: storms detected / restored / frames dropped",
                  " / ".join(f"{n:,}" for n in wd))
    if isinstance(summary.get("faults"), dict):
        fl = summary["faults"]
        t.add_row("link faults: frames lost / corrupted (dropped by FCS / ICRC)",
                  f"{fl.get('lost_frames', 0):,} / {fl.get('corrupted_frames', 0):,} "
                  f"({fl.get('switch_fcs_errors', 0) + fl.get('nic_fcs_errors', 0):,} / "
                  f"{fl.get('nic_icrc_errors', 0):,})")
        if fl.get("reroutes"):
            t.add_row("reroutes: detected -> converged (fabric µs)",
                      ", ".join(f"{r['detected_ns'] / 1000:g} -> "
                                + (f"{r['converged_ns'] / 1000:g}" if r.get("converged_ns") is not None
                                   else f"(due {r['due_ns'] / 1000:g}, after the end)")
                                for r in fl["reroutes"]))
    if summary.get("socket_drops"):
        t.add_row("frames dropped at a socket, unread (emulator losses)",
                  ", ".join(f"{x['node']}:{x['port']} {x['rx_socket_drops']:,}"
                            for x in summary["socket_drops"]))
    if any(p.get("priorities") for p in summary["ports"]):
        tot = priority_totals(summary)
        t.add_row("ECN marks / PFC pauses sent / headroom drops",
                  f"{tot['ecn_marks']:,} / {tot['pause_tx']:,} / {tot['headroom_drops']:,}")
        t.add_row("max queue depth (bytes)", f"{tot['max_depth_bytes']:,}" if summary["target"] != "bmv2"
                  else "not measured on BMv2 (counters only)")
    q = summary.get("queue_depth_dist")
    if q and q.get("samples"):
        t.add_row("egress queue depth p50 / p95 / p99 / max, sampled (bytes)",
                  " / ".join(f"{q[k]:,}" for k in ("p50_bytes", "p95_bytes", "p99_bytes",
                                                   "max_bytes")))
    spine_tx = {p["node"]: 0 for p in summary["ports"] if p["role"] == "spine"}
    for p in summary["ports"]:
        if p["node"] in spine_tx:
            spine_tx[p["node"]] += p["tx_packets"]
    if spine_tx:
        t.add_row("packets via each spine", ", ".join(f"{k} {v:,}" for k, v in spine_tx.items()))
    return t


def render_slowdown_buckets(summary: dict) -> Table | None:
    """The FCT slowdown by flow-size bucket (``fct_slowdown.csv``), when
    there are enough flows for buckets to say more than the summary."""
    block = summary.get("fct_slowdown_buckets") or {}
    rows = block.get("buckets") or []
    if len(rows) < 2:
        return None
    t = Table(title=f"FCT slowdown by flow size: {block['flows']} completed flows in "
                    f"{block['step_percent']} % buckets (fct_slowdown.csv)")
    for col in ("flows %", "flows", "size (bytes)", "p50", "p95", "p99"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(f"{r['pct_from']}-{r['pct_to']}", str(r["flows"]),
                  f"{r['size_min_bytes']:,}..{r['size_max_bytes']:,}",
                  *(f"{r[k]:.2f}" for k in ("slowdown_p50", "slowdown_p95", "slowdown_p99")))
    return t


def member_clock_totals(run_dir: Path | RawDir) -> dict:
    """Frames the switches' virtual clocks dropped as not ours (no trailer:
    nothing should send any) and took after their arrival time (a protocol
    bug if ever > 0), over every switch process once."""
    clocks = {}
    for path in RawDir(run_dir).stats_files():
        with contextlib.suppress(OSError, ValueError):
            vt = json.loads(path.read_text()).get("virtual_time")
            if vt:
                clocks[vt["clock"]] = vt
    return {"foreign_frames": sum(c["foreign_frames"] for c in clocks.values()),
            "early_frames": sum(c["early_frames"] for c in clocks.values()),
            "switch_processes_wall": {n: {"cpu_s": c["cpu_s"], "wait_s": c["wait_wall_s"]}
                                      for n, c in clocks.items()}}
