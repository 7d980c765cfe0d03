"""An experiment's ``faults:`` against its fabric: checked, then compiled
into the faults of each sending link end (``schema.faults.EndFaults``).

``check_faults`` refuses, in one line naming ``faults[i].field``, a link
that does not exist (or is one of parallel links, which a pair of names
cannot tell apart), a link_up of a direction that is not down then, a
link_down of one already down, and degrades of one direction that
overlap. ``end_faults`` gives each direction's faults in fabric ns: the
switch port that sends on it (``PortConfig.faults``, ``net/nodes.py``) or
the NIC (``NicConfig.link_faults``, ``experiment/agents.py``) applies them.
"""
from __future__ import annotations

from pathlib import Path

from emulator.clock import NEVER_NS
from emulator.errors import ConfigError
from emulator.schema.faults import (
    BitErrors, BitErrorWindow, DownInterval, EndFaults, LinkDegrade, LinkDown,
    CpuStall, LinkFlap, LinkUp, LossWindow, PfcStorm, RandomLoss, RateChange, StallWindow,
    StormWindow, SwitchDown, SwitchUp,
)
from emulator.schema.switch import PfcWatchdogConfig
from emulator.topo import Fabric
from emulator.vtime.coordinator import lookahead_ns

FAULTS_NEED = "need the embedded target in virtual time (this slice)"
WATCHDOG_NEEDS = ("is a feature of the embedded target's traffic manager, on Ethernet "
                  "(BMv2 has no such hook; say enabled: false or target: embedded)")


# What BMv2 cannot do (net/bmv2_faults.py does the rest), and why
NOT_ON_BMV2 = {
    "random_loss": "BMv2 has no per-frame hook on a link to lose frames at random "
                   "(target: embedded judges each frame at its sending port)",
    "bit_errors": "BMv2 has no per-frame hook on a link to corrupt frames "
                  "(target: embedded judges each frame at its sending port)",
    "switch_down": "BMv2 loses its state only with its process, whose restart is not "
                   "deterministic (target: embedded models the reboot)",
    "switch_up": "BMv2 loses its state only with its process, whose restart is not "
                 "deterministic (target: embedded models the reboot)",
    "pfc_storm": "a host NIC's storm is timed in virtual time, which BMv2 cannot keep "
                 "(target: embedded)",
    "cpu_stall": "a host's stall is timed in virtual time, which BMv2 cannot keep "
                 "(target: embedded)",
}
VETH_BOTH = "a veth pair goes down and up as a whole on BMv2: direction both only"


def bmv2_fault_refusal(fault, host_names: set[str]) -> tuple[str, str] | None:
    """(field, reason) why BMv2 cannot run ``fault`` (a ``schema.faults``
    entry), None if it can."""
    if fault.kind in NOT_ON_BMV2:
        return "kind", f"{fault.kind} is not possible on target bmv2: {NOT_ON_BMV2[fault.kind]}"
    if fault.kind in ("link_down", "link_up", "link_flap") and fault.direction != "both":
        return "direction", f"{fault.kind} on target bmv2: {VETH_BOTH}"
    if fault.kind == "link_degrade":
        hosts = [s for s, _ in fault.senders() if s in host_names]
        if hosts:
            return "direction", (f"link_degrade on target bmv2: {hosts[0]}'s NIC sends on it, and "
                                 "BMv2's runtime sets only its own queues' rates: name the switch's "
                                 "direction (a_to_b or b_to_a)")
    return None


def check_bmv2_faults(exp) -> None:
    """The faults BMv2 can run (``bmv2_fault_refusal``), the first it cannot
    refused in one line naming ``faults[i].field``."""
    hosts = {h.name for h in exp.fabric.hosts()}
    for i, fault in enumerate(exp.spec.faults):
        refused = bmv2_fault_refusal(fault, hosts)
        if refused is not None:
            raise ConfigError(exp.source, f"faults[{i}].{refused[0]}", refused[1])


def _ns(us: float) -> int:
    return int(round(us * 1000))


def _check_link(fault, i: int, fabric: Fabric, path) -> None:
    if isinstance(fault, (PfcStorm, CpuStall)):
        if fault.host not in {h.name for h in fabric.hosts()}:
            raise ConfigError(path, f"faults[{i}].host",
                              f"{fault.host!r} is not a host of fabric {fabric.name!r}")
        return
    names = {n.name for n in fabric.nodes}
    a, b = fault.ends
    for end in (a, b):
        if end not in names:
            raise ConfigError(path, f"faults[{i}].link",
                              f"{end!r} is not a node of fabric {fabric.name!r}")
    joining = [l for l in fabric.links if {l.a, l.b} == {a, b}]
    if not joining:
        raise ConfigError(path, f"faults[{i}].link", f"no link joins {a} and {b} in fabric "
                          f"{fabric.name!r}")
    if len(joining) > 1:
        raise ConfigError(path, f"faults[{i}].link", f"{len(joining)} parallel links join {a} "
                          f"and {b}: a fault cannot name one of them yet")


def _down_intervals(faults, direction: tuple[str, str], path) -> list[DownInterval]:
    """The direction's down intervals from its link_down/link_up/link_flap
    events in time order (ties: in file order); an up of a direction that
    is up, or a down of one that is down, is refused."""
    events = []          # (t_ns, entry index, down?, field)
    for i, f in faults:
        if direction not in f.senders():
            continue
        if isinstance(f, (LinkDown, LinkUp)):
            events.append((_ns(f.at_us), i, isinstance(f, LinkDown), "at_us"))
        elif isinstance(f, LinkFlap):
            down_us, up_us = f.times_us()
            for k in range(f.count):
                start = f.at_us + k * (down_us + up_us)
                events.append((_ns(start), i, True, "at_us"))
                events.append((_ns(start + down_us), i, False, "at_us"))
    events.sort(key=lambda e: (e[0], e[1]))
    out: list[DownInterval] = []
    since = None           # (t_ns, entry) of the down in force
    name = "->".join(direction)
    for t, i, down, field in events:
        if down and since is not None:
            raise ConfigError(path, f"faults[{i}].{field}", f"{name} is already down at "
                              f"{t / 1000:g} us (since faults[{since[1]}], {since[0] / 1000:g} us)")
        if not down and since is None:
            raise ConfigError(path, f"faults[{i}].{field}", f"{name} is not down at {t / 1000:g} us "
                              "(a link_up needs a link_down before it)")
        if down:
            since = (t, i)
        else:
            if t > since[0]:
                out.append(DownInterval(from_ns=since[0], until_ns=t))
            since = None
    if since is not None:
        out.append(DownInterval(from_ns=since[0], until_ns=NEVER_NS))
    return out


def _rate_changes(faults, direction: tuple[str, str], path) -> list[RateChange]:
    windows = []
    for i, f in faults:
        if isinstance(f, LinkDegrade) and direction in f.senders():
            until = _ns(f.until_us) if f.until_us is not None else NEVER_NS
            windows.append((_ns(f.at_us), until, f.rate_fraction, i))
    windows.sort()
    out: list[RateChange] = []
    for k, (start, until, fraction, i) in enumerate(windows):
        if k and start < windows[k - 1][1]:
            raise ConfigError(path, f"faults[{i}].at_us", f"{'->'.join(direction)} is degraded "
                              f"then already (faults[{windows[k - 1][3]}])")
        out.append(RateChange(at_ns=start, rate_fraction=fraction))
        if until < NEVER_NS:
            out.append(RateChange(at_ns=until, rate_fraction=1.0))
    return out


def _windows(faults, direction: tuple[str, str]) -> tuple[list[LossWindow], list[BitErrorWindow]]:
    loss, ber = [], []
    for _, f in faults:
        if direction not in f.senders() or not isinstance(f, (RandomLoss, BitErrors)):
            continue
        span = {"from_ns": _ns(f.from_us),
                "until_ns": _ns(f.until_us) if f.until_us is not None else NEVER_NS}
        if isinstance(f, RandomLoss):
            loss.append(LossWindow(**span, rate=f.rate, priority=f.priority, seed=f.seed))
        else:
            ber.append(BitErrorWindow(**span, ber=f.ber, seed=f.seed))
    return loss, ber


def _storms(faults, host: str) -> list[StormWindow]:
    return [StormWindow(from_ns=_ns(f.at_us), priority=f.priority,
                        until_ns=_ns(f.until_us) if f.until_us is not None else NEVER_NS)
            for _, f in faults if isinstance(f, PfcStorm) and f.host == host]


def _stalls(faults, host: str) -> list[StallWindow]:
    return [StallWindow(from_ns=_ns(f.at_us), until_ns=_ns(f.at_us + f.duration_us),
                        xoff_bytes=f.xoff_bytes)
            for _, f in faults if isinstance(f, CpuStall) and f.host == host]


def _dscp_priority(spec) -> list[int]:
    """DSCP -> priority as the controller installs it (emulator/control/qos.py)."""
    table = [0] * 64
    qos = spec.qos
    if qos is not None:
        table[qos.roce_dscp] = qos.roce_priority
        table[qos.cnp_dscp] = qos.cnp_priority
    return table


def _check_switch(f, i: int, fabric: Fabric, path) -> None:
    names = {n.name for n in fabric.switches()}
    if f.switch not in names:
        raise ConfigError(path, f"faults[{i}].switch", f"{f.switch!r} is not a switch of fabric "
                          f"{fabric.name!r}")


def _as_link_faults(spec, fabric: Fabric, path) -> list[tuple[int, object]]:
    """(entry index, fault) with each switch_down/up as the link_down/up of
    every link of its switch, both directions: a switch_up's links come up
    once the controller has re-programmed it, ``controller.reaction_us``
    after it is back (docs/faults.md)."""
    out = []
    for i, f in enumerate(spec.faults or []):
        if not isinstance(f, (SwitchDown, SwitchUp)):
            _check_link(f, i, fabric, path)
            out.append((i, f))
            continue
        _check_switch(f, i, fabric, path)
        at_us = f.at_us + (spec.controller.reaction_us if isinstance(f, SwitchUp) else 0)
        for peer in sorted({p.peer for p in fabric.ports(f.switch)}):
            link = {"link": f"{f.switch}:{peer}", "at_us": at_us}
            out.append((i, LinkDown(kind="link_down", **link) if isinstance(f, SwitchDown)
                        else LinkUp(kind="link_up", **link)))
    return out


def switch_reboots(exp) -> dict[str, list[DownInterval]]:
    """switch -> when it is down (from its switch_down until its switch_up: its
    P4Runtime agent back)."""
    out: dict[str, list[DownInterval]] = {}
    since: dict[str, int] = {}
    for f in sorted((f for f in exp.spec.faults or [] if isinstance(f, (SwitchDown, SwitchUp))),
                    key=lambda f: f.at_us):
        if isinstance(f, SwitchDown):
            since[f.switch] = _ns(f.at_us)
        elif f.switch in since:
            out.setdefault(f.switch, []).append(DownInterval(from_ns=since.pop(f.switch),
                                                             until_ns=_ns(f.at_us)))
    for sw, t in since.items():
        out.setdefault(sw, []).append(DownInterval(from_ns=t, until_ns=NEVER_NS))
    return out


def compile_faults(spec, fabric: Fabric, path: str | Path) -> dict[tuple[str, str], EndFaults]:
    """Every faulted direction's ``EndFaults``, keyed (sender, receiver);
    ``ConfigError`` (one line) for a fault the fabric refuses."""
    if not spec.faults:
        return {}
    if fabric.link_layer == "infiniband":
        raise ConfigError(path, "faults", f"not on an InfiniBand fabric yet (topology "
                          f"{fabric.name} is link_layer: infiniband)")
    faults = _as_link_faults(spec, fabric, path)
    directions = {d for _, f in faults for d in f.senders()}
    # a storming NIC sends its PAUSE frames on its link: that direction's faults
    directions |= {(f.host, fabric.ports(f.host)[0].peer) for _, f in faults
                   if isinstance(f, (PfcStorm, CpuStall))}
    table = _dscp_priority(spec)
    out = {}
    for d in sorted(directions):
        loss, ber = _windows(faults, d)
        out[d] = EndFaults(sender=d[0], receiver=d[1], down=_down_intervals(faults, d, path),
                           rates=_rate_changes(faults, d, path), loss=loss, bit_errors=ber,
                           storms=_storms(faults, d[0]), stalls=_stalls(faults, d[0]),
                           dscp_priority=table)
    return out


def check_faults(spec, fabric: Fabric, path: str | Path) -> None:
    ends = compile_faults(spec, fabric, path)
    if any(ef.down for ef in ends.values()):
        # The controller's writes must land after the window the report is
        # in: no process has passed it then (docs/virtual-time.md).
        ahead = lookahead_ns(fabric.links)
        if _ns(spec.controller.reaction_us) <= ahead:
            raise ConfigError(path, "controller.reaction_us", f"must be more than the fabric's "
                              f"lookahead, {ahead / 1000:g} us (got {spec.controller.reaction_us:g})")


def reroute_reaction_ns(exp) -> int | None:
    """The controller's reaction (fabric ns) if the experiment takes a link
    down (then the controller reroutes), else None."""
    if any(ef.down for ef in end_faults(exp).values()):
        return _ns(exp.spec.controller.reaction_us)
    return None


def end_faults(exp) -> dict[tuple[str, str], EndFaults]:
    """The experiment's faults per sending end (it was checked when loaded)."""
    return compile_faults(exp.spec, exp.fabric, exp.source)


def switch_port_faults(exp) -> dict[tuple[str, int], EndFaults]:
    """(switch, port_no) -> the faults its port applies as a sender."""
    out = {}
    for (sender, receiver), ef in end_faults(exp).items():
        node = exp.fabric.node(sender)
        if node.is_switch:
            for p in exp.fabric.ports_towards(sender, receiver):
                out[(sender, p.port_no)] = ef
    return out


def switch_port_rx_down(exp) -> dict[tuple[str, int], list[DownInterval]]:
    """(switch, port_no) -> when the direction into that port is down (its
    sender's intervals): the port reports losing and regaining the signal
    to the controller (``dataplane/port_status.py``) and its gNMI
    oper-status follows it (``dataplane/gnmi_server``)."""
    out = {}
    for (sender, receiver), ef in end_faults(exp).items():
        if ef.down and exp.fabric.node(receiver).is_switch:
            for p in exp.fabric.ports_towards(receiver, sender):
                out[(receiver, p.port_no)] = list(ef.down)
    return out


def nic_faults(exp, nic: str) -> EndFaults | None:
    """The faults NIC ``nic`` applies as the sender of its link (None: none).
    A dilated run with faults is a BMv2 run (``time_mode.resolve_time``
    refuses faults in dilated time elsewhere): there the veth pair itself
    goes down (``net/bmv2_faults.py``) and the NIC applies nothing."""
    if not exp.spec.faults or exp.spec.time == "dilated":
        return None
    peer = exp.fabric.ports(nic)[0].peer
    return end_faults(exp).get((nic, peer))


def watchdog_config(spec, dilation: float) -> PfcWatchdogConfig | None:
    """The switches' PFC watchdog in their clock's ns (None: off)."""
    if not spec.enabled:
        return None
    return PfcWatchdogConfig(detection_ns=int(round(spec.detection_time_us * 1000 * dilation)),
                             restoration_ns=int(round(spec.restoration_time_us * 1000 * dilation)),
                             action=spec.action)


def check_watchdog(exp, target: str) -> None:
    """``switch.pfc_watchdog.enabled`` only on the embedded target and Ethernet."""
    if exp.spec.switch.pfc_watchdog.enabled and (target != "embedded"
                                                  or exp.fabric.link_layer == "infiniband"):
        raise ConfigError(exp.source, "switch.pfc_watchdog.enabled", WATCHDOG_NEEDS)
