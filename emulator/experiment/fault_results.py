"""summary.json's ``faults``: each scripted fault as set and when it took
effect, and per link end what the faults did to its frames (docs/faults.md).

A frame a fault took is a *fault loss* -- the link's, as the experiment
asked -- never one of the emulator's (``link_losses``) nor a drop of the
traffic manager: ``fault_lost_by_direction`` tells the link-loss check
which frames the fault, not the emulation, lost.
"""
from __future__ import annotations

from emulator.experiment.faults import compile_faults
from emulator.experiment.fidelity import frames_sent
from emulator.experiment.results_io import read_stats
from emulator.experiment.summary_file import FaultEnd, Faults
from emulator.schema.faults import (CpuStall, LinkDegrade, LinkDown, LinkFlap, LinkUp, PfcStorm,
                                     SwitchDown, SwitchUp)

_COUNTERS = ("dropped_down", "dropped_loss", "corrupted")


def _ns(us: float) -> int:
    return int(round(us * 1000))


def _end_stats(exp, stats: dict[str, dict], nic_stats: dict[str, dict]) -> list[dict]:
    """Each faulted sending end's counters: switch ports' from their
    stats.json, NICs' from their results."""
    out = []
    ports_of = {sw.name: {p.get("port"): p for p in stats.get(sw.name, {}).get("ports", [])
                          if isinstance(p, dict)} for sw in exp.fabric.switches()}
    for (sender, receiver) in compile_faults(exp.spec, exp.fabric, exp.source):
        if exp.fabric.node(sender).is_switch:
            port = exp.fabric.port_towards(sender, receiver).port_no
            got = ports_of.get(sender, {}).get(port, {}).get("faults") or {}
            where = {"node": sender, "port": port}
        else:
            got = (nic_stats.get(sender) or {}).get("link_faults") or {}
            where = {"node": sender, "port": None}
        entry = {"direction": f"{sender}->{receiver}", "sender": sender, "receiver": receiver,
                 **where, "reported": bool(got)}
        for k in _COUNTERS:
            per_class = {str(c): int(n) for c, n in (got.get(k) or {}).items()}
            entry[k] = per_class
            entry[f"{k}_frames"] = sum(per_class.values())
        entry["rate_changes"] = list(got.get("rate_changes") or [])
        entry["down_intervals"] = list(got.get("down_intervals") or [])
        entry["pfc_storm_frames"] = sum(int(n) for n in (got.get("pfc_storm_frames") or {}).values())
        if not exp.fabric.node(sender).is_switch and (nic_stats.get(sender) or {}).get("cpu_stall"):
            entry["cpu_stall"] = nic_stats[sender]["cpu_stall"]
        out.append(entry)
    return out


def _bmv2_counted(ends: list[dict], bmv2: dict, ports: list[dict], nic_stats: dict[str, dict]) -> None:
    """BMv2's downed directions (``net/bmv2_faults.py``): the frames a down
    interval lost are those the sender sent that its receiver's veth never
    got (the kernel's count; what the veth got and the receiver missed is
    the emulation's loss, ``fidelity.link_losses``). Per class they are not
    known: ``dropped_down`` stays empty, ``dropped_down_frames`` is the total."""
    by_end = {(p["node"], p["peer"]): p for p in ports}
    for e in ends:
        rx = bmv2.get("rx_frames", {}).get(e["direction"])
        sent = frames_sent(e["sender"], e["receiver"], by_end, nic_stats)
        if rx is None or sent is None:
            continue
        e["dropped_down_frames"] = max(0, sent - int(rx))
        e["reported"] = True


def _bmv2_applied(f, times: list[int], bmv2: dict) -> list[int]:
    """A link fault's transitions when BMv2's player ran them (fabric ns,
    from the wall clock): the later of the link's two ends' commands; a
    degrade's rate changes (``times``: none, BMv2 reports none) each
    Thrift step on the link."""
    link = sorted(f.ends)
    via = "thrift" if isinstance(f, LinkDegrade) else "ip"
    ran = {}
    for step in bmv2.get("steps", []):
        if step["via"] == via and step.get("link") == link:
            ran[step["at_ns"]] = max(ran.get(step["at_ns"], 0), int(step["applied_ns"]))
    if via == "thrift":
        return sorted(ran.values())
    return [ran.get(t, t) for t in times]


def _entry_times(f, ends: list[dict]) -> dict:
    """When a fault takes effect, fabric ns: its transitions as set; a
    degrade's rate changes as its senders applied them."""
    ns = lambda us: int(round(us * 1000))       # noqa: E731
    if isinstance(f, LinkFlap):
        down_us, up_us = f.times_us()
        return {"applied_ns": [ns(f.at_us + k * (down_us + up_us) + half)
                               for k in range(f.count) for half in (0, down_us)]}
    if isinstance(f, LinkDegrade):
        mine = {f"{s}->{r}" for s, r in f.senders()}
        starts = {ns(f.at_us)} | ({ns(f.until_us)} if f.until_us is not None else set())
        applied = sorted({c["applied_ns"] for e in ends if e["direction"] in mine
                          for c in e["rate_changes"] if c["at_ns"] in starts})
        return {"applied_ns": applied}
    if isinstance(f, CpuStall):
        return {"applied_ns": [ns(f.at_us)], "until_ns": ns(f.at_us + f.duration_us)}
    if isinstance(f, PfcStorm):
        return {"applied_ns": [ns(f.at_us)],
                "until_ns": ns(f.until_us) if f.until_us is not None else None}
    if hasattr(f, "at_us"):
        return {"applied_ns": [ns(f.at_us)]}
    until = ns(f.until_us) if f.until_us is not None else None
    return {"applied_ns": [ns(f.from_us)], "until_ns": until}


def _reroute_times(exp, f, times: list[int], ends: list[dict], rr: dict) -> dict:
    """A link or switch fault's reroutes: per transition (``at_ns``: when its
    links went down or up) when their ports reported it (``detected_ns``: a
    link delay later for a down, two for an up), when the last switch's writes took effect
    (``converged_ns``; None: nothing to rewrite -- the run ended first, or
    the link was dead already -- or the run ended before the writes took
    effect, ``due_ns``) and, for a down, the frames the down
    interval lost on its links (``lost_frames``). A switch_up also has
    ``reprogrammed_ns``: when the controller's writes to it took effect
    (its links come up then)."""
    if isinstance(f, (SwitchDown, SwitchUp)):
        links = [(f.switch, p) for p in sorted({p.peer for p in exp.fabric.ports(f.switch)})]
        if isinstance(f, SwitchUp):
            times = [t + int(rr["reaction_ns"]) for t in times]
    else:
        links = [f.ends]
    delays = {int(l.delay_ns) for l in exp.fabric.links for a, b in links if {l.a, l.b} == {a, b}}
    pairs = [{a, b} for a, b in links]
    mine = {f"{s}->{r}" for a, b in links for s, r in ((a, b), (b, a))}
    out = []
    for t in times:
        # an end loses the signal a delay after, or hears its partner's remote
        # fault two delays after (dataplane/port_status.py): a link is down at
        # its first end's report, back at its last's
        seen = {t + k * d for d in delays for k in (1, 2)}
        reports = [r for r in rr.get("reports", []) if r["detected_ns"] in seen
                   and {r["switch"], r["peer"]} in pairs]
        downs = [r["detected_ns"] for r in reports if r["oper_status"] == "DOWN"]
        ups = [r["detected_ns"] for r in reports if r["oper_status"] == "UP"]
        done = [r for r in rr.get("reroutes", []) if r["detected_ns"] in seen]
        lost = sum(d["dropped"] for e in ends if e["direction"] in mine
                   for d in e["down_intervals"] if d["from_ns"] == t)
        due = [r["due_ns"] for r in done if "due_ns" in r]
        out.append({"at_ns": t, "detected_ns": min(downs) if downs else max(ups, default=None),
                    "converged_ns": None if due else max((r["converged_ns"] for r in done), default=None),
                    **({"due_ns": max(due)} if due else {}),
                    "programmed": sorted({s for r in done for s in r["programmed"]}),
                    "lost_frames": lost})
    got = {"reroute": out}
    if isinstance(f, SwitchUp):
        back = [r["converged_ns"] for r in rr.get("reroutes", [])
                if r.get("reinstalled") == f.switch and r["detected_ns"] == _ns(f.at_us)
                and r["converged_ns"] is not None]
        got["reprogrammed_ns"] = back[0] if back else None
    return got


def reroutes_by_run_end(rr: dict, end_ns: int | None) -> dict:
    """The reroutes with a ``converged_ns`` past the run's end (fabric
    ns) as ``due_ns`` instead: the run ended before their writes took effect."""
    if not rr or end_ns is None:
        return rr
    reroutes = []
    for r in rr.get("reroutes", []):
        if r.get("converged_ns") is not None and r["converged_ns"] > end_ns:
            r = {**r, "converged_ns": None, "due_ns": r["converged_ns"]}
        reroutes.append(r)
    return {**rr, "reroutes": reroutes}


def fault_summary(exp, stats: dict[str, dict], nic_stats: dict[str, dict],
                  reroute_path=None, end_ns: int | None = None, bmv2_path=None,
                  ports: list[dict] = ()) -> Faults | None:
    """summary.json's ``faults`` block (None: the experiment has none);
    ``reroute_path``: the controller's reports and reroutes; ``end_ns``:
    when the run ended (fabric ns); ``bmv2_path``: BMv2's faults as played
    (``net/bmv2_faults.py``; absent elsewhere), read with ``ports``
    (summary.json's)."""
    if not exp.spec.faults:
        return None
    ends = _end_stats(exp, stats, nic_stats)
    bmv2 = read_stats(bmv2_path) if bmv2_path is not None and bmv2_path.exists() else {}
    if bmv2:
        _bmv2_counted(ends, bmv2, list(ports), nic_stats)
    rr = reroutes_by_run_end(read_stats(reroute_path) if reroute_path is not None else {}, end_ns)
    entries = []
    for i, f in enumerate(exp.spec.faults):
        entry = {"index": i, **f.model_dump(exclude_none=True), **_entry_times(f, ends)}
        if bmv2 and isinstance(f, (LinkDown, LinkUp, LinkFlap, LinkDegrade)):
            entry["applied_ns"] = _bmv2_applied(f, entry["applied_ns"], bmv2)
        if rr and isinstance(f, (LinkDown, LinkUp, LinkFlap, SwitchDown, SwitchUp)):
            entry.update(_reroute_times(exp, f, entry["applied_ns"], ends, rr))
        entries.append(entry)
    fcs = sum(int(p.get("rx_fcs_errors") or 0) for s in stats.values()
              for p in s.get("ports", []) if isinstance(p, dict))
    nic_fcs = sum(int(v.get("rx_fcs_errors") or 0) for v in nic_stats.values())
    icrc = sum(int(v.get("rx_icrc_errors") or 0) for v in nic_stats.values())
    return Faults(faults=entries, ends=[FaultEnd(**e) for e in ends],
                  lost_frames=sum(e["dropped_down_frames"] + e["dropped_loss_frames"] for e in ends),
                  corrupted_frames=sum(e["corrupted_frames"] for e in ends),
                  switch_fcs_errors=fcs, nic_fcs_errors=nic_fcs, nic_icrc_errors=icrc,
                  **({"reaction_ns": int(rr["reaction_ns"]), "port_reports": rr.get("reports", []),
                      "reroutes": rr.get("reroutes", [])} if rr else {}))


def fault_lost_by_direction(block: Faults | None) -> dict[tuple[str, str], int]:
    """(sender, receiver) -> frames the faults kept from the receiver's
    ingress: lost on the link, or dropped at its MAC for a bad FCS."""
    if block is None:
        return {}
    return {(e.sender, e.receiver): e.dropped_down_frames + e.dropped_loss_frames
            + e.corrupted_frames for e in block.ends}
