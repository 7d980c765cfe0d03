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
    StormWindow,
)
from emulator.schema.switch import PfcWatchdogConfig
from emulator.topo import Fabric

FAULTS_NEED = "need the embedded target in virtual time (this slice)"
WATCHDOG_NEEDS = ("is a feature of the embedded target's traffic manager, on Ethernet "
                  "(BMv2 has no such hook; say enabled: false or target: embedded)")


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
    for i, f in enumerate(faults):
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
    for i, f in enumerate(faults):
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
    for f in faults:
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
            for f in faults if isinstance(f, PfcStorm) and f.host == host]


def _stalls(faults, host: str) -> list[StallWindow]:
    return [StallWindow(from_ns=_ns(f.at_us), until_ns=_ns(f.at_us + f.duration_us),
                        xoff_bytes=f.xoff_bytes)
            for f in faults if isinstance(f, CpuStall) and f.host == host]


def _dscp_priority(spec) -> list[int]:
    """DSCP -> priority as the controller installs it (emulator/control/qos.py)."""
    table = [0] * 64
    qos = spec.qos
    if qos is not None:
        table[qos.roce_dscp] = qos.roce_priority
        table[qos.cnp_dscp] = qos.cnp_priority
    return table


def compile_faults(spec, fabric: Fabric, path: str | Path) -> dict[tuple[str, str], EndFaults]:
    """Every faulted direction's ``EndFaults``, keyed (sender, receiver);
    ``ConfigError`` (one line) for a fault the fabric refuses."""
    faults = spec.faults or []
    if not faults:
        return {}
    if fabric.link_layer == "infiniband":
        raise ConfigError(path, "faults", f"not on an InfiniBand fabric yet (topology "
                          f"{fabric.name} is link_layer: infiniband)")
    for i, f in enumerate(faults):
        _check_link(f, i, fabric, path)
    directions = {d for f in faults for d in f.senders()}
    # a storming NIC sends its PAUSE frames on its link: that direction's faults
    directions |= {(f.host, fabric.ports(f.host)[0].peer) for f in faults
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
    compile_faults(spec, fabric, path)


def end_faults(exp) -> dict[tuple[str, str], EndFaults]:
    """The experiment's faults per sending end (it was checked when loaded)."""
    return compile_faults(exp.spec, exp.fabric, exp.source)


def switch_port_faults(exp) -> dict[tuple[str, int], EndFaults]:
    """(switch, port_no) -> the faults its port applies as a sender."""
    out = {}
    for (sender, receiver), ef in end_faults(exp).items():
        node = exp.fabric.node(sender)
        if node.is_switch:
            for p in exp.fabric.ports(sender):
                if p.peer == receiver:
                    out[(sender, p.port_no)] = ef
    return out


def nic_faults(exp, nic: str) -> EndFaults | None:
    """The faults NIC ``nic`` applies as the sender of its link (None: none)."""
    if not exp.spec.faults:
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
