"""Traffic classes, PFC and ECN: what the controller installs for them.

The QoS part of an experiment file (``qos:``, validated by
``emulator.schema.qos``) is turned into ``dscp_to_priority``, ``pfc_config`` and ``ecn_config``
entries of ``fabric.p4`` (see docs/lossless.md). Byte thresholds are not
dilated: a link's bandwidth-delay product in bytes is the same at rate ÷ D
and delay × D.
"""
from __future__ import annotations

from p4.v1 import p4runtime_pb2 as pb

from emulator.p4.p4info import PFC_SESSION_BASE, P4Info  # noqa: F401  (re-exported)
from emulator.schema.qos import (  # noqa: F401 (the specs it installs; frame sizes and defaults are theirs)
    DEFAULT_XOFF_BYTES, ROCE_FRAME_OVERHEAD_BYTES, EcnSpec, PfcSpec, QosSpec, mtu_frame_bytes,
)
from emulator.topo import Fabric
from emulator.wire import PFC_QUANTUM_BITS


def headroom_bytes(rate_bps: int, delay_ns: int, mtu_bytes: int, reaction_fabric_ns: int) -> int:
    """Bytes still arriving after XOFF is crossed, before the pause takes effect.

    The pause frame travels one link delay, the peer may be mid-frame and
    finishes it, what it had sent is still one link delay in flight; on top,
    both ends react after ``reaction_fabric_ns`` (the emulator's processes
    wake up late by up to a few ms of wall time, i.e. that over D of fabric
    time).
    """
    bdp = 2 * rate_bps * delay_ns // 8 // 1_000_000_000
    reaction = rate_bps * reaction_fabric_ns // 8 // 1_000_000_000
    return bdp + 3 * mtu_frame_bytes(mtu_bytes) + reaction


def pause_quanta(rate_bps: int, pause_ns: float) -> int:
    """Quanta (512 bit times at ``rate_bps``) of a pause lasting ``pause_ns``."""
    return max(1, min(0xFFFF, round(pause_ns * rate_bps / 1e9 / PFC_QUANTUM_BITS)))


def pfc_port_params(rate_bps: int, pfc: PfcSpec, dilation: float) -> dict:
    """``set_pfc_port``'s parameters for a port of fabric rate ``rate_bps``.

    BMv2 stamps packets in wall-clock microseconds, so the times are dilated:
    a quantum lasts 512 bits at rate ÷ D.
    """
    quantum_wall_us = PFC_QUANTUM_BITS / (rate_bps / dilation) * 1e6
    return {"pause_quanta": pause_quanta(rate_bps, pfc.pause_us * 1000),
            "refresh_us": max(1, round(pfc.pause_us * dilation / 2)),
            "quantum_us_q10": max(1, round(quantum_wall_us * 1024))}


def clone_sessions(fabric: Fabric, switch: str) -> list:
    """One clone session per port: where fabric.p4 sends the pauses it makes."""
    return [pb.PacketReplicationEngineEntry(clone_session_entry=pb.CloneSessionEntry(
        session_id=PFC_SESSION_BASE + p.port_no,
        replicas=[pb.Replica(egress_port=p.port_no, instance=1)]))
        for p in fabric.ports(switch)]


def qos_entities(fabric: Fabric, p4info: P4Info, switch: str, qos: QosSpec,
                 mtu_bytes: int, reaction_fabric_ns: int, dilation: float = 1.0) -> list:
    """Table entries and clone sessions of one switch for its traffic classes, PFC and ECN."""
    entries = [
        p4info.table_entry("dscp_to_priority", {"dscp": qos.roce_dscp},
                           ("set_priority", {"priority": qos.roce_priority})),
        p4info.table_entry("dscp_to_priority", {"dscp": qos.cnp_dscp},
                           ("set_priority", {"priority": qos.cnp_priority})),
    ]
    xoff, xon = qos.pfc.thresholds(mtu_bytes)
    if qos.pfc.enabled:
        entries += clone_sessions(fabric, switch)
    for port in fabric.ports(switch):
        link = fabric.links[port.link_index]
        if qos.pfc.enabled:
            entries.append(p4info.table_entry(
                "pfc_port", {"port": port.port_no},
                ("set_pfc_port", pfc_port_params(link.rate_bps, qos.pfc, dilation))))
            headroom = qos.pfc.headroom_bytes or headroom_bytes(
                link.rate_bps, link.delay_ns, mtu_bytes, reaction_fabric_ns)
            entries.append(p4info.table_entry(
                "pfc_config", {"ig_port": port.port_no, "priority": qos.roce_priority},
                ("set_pfc_thresholds", {"xoff_bytes": xoff, "xon_bytes": xon,
                                        "headroom_bytes": headroom})))
        if qos.ecn.enabled:
            entries.append(p4info.table_entry(
                "ecn_config", {"eg_port": port.port_no, "priority": qos.roce_priority},
                ("set_ecn_thresholds", {"kmin_bytes": qos.ecn.kmin_bytes,
                                        "kmax_bytes": qos.ecn.kmax_bytes,
                                        "pmax_per_mille": round(qos.ecn.pmax * 1000)})))
    return entries


def int_port_params(rate_bps: int, dilation: float) -> dict:
    """``set_int_port``'s parameters for a port of fabric rate ``rate_bps``:
    its rate in the INT records (fabric Mbit/s) and the factor that turns
    the target's egress timestamp (wall us) into fabric ns (x/65536)."""
    return {"rate_mbps": max(1, round(rate_bps / 1e6)),
            "ts_q16": max(1, round(65536 * 1000 / dilation))}


def int_port_entities(fabric: Fabric, p4info: P4Info, switch: str, dilation: float = 1.0) -> list:
    """``int_port`` entries of one switch: every port writes INT records
    into the stacks that ask for them (HPCC's QPs)."""
    return [p4info.table_entry("int_port", {"eg_port": port.port_no},
                               ("set_int_port", int_port_params(
                                   fabric.links[port.link_index].rate_bps, dilation)))
            for port in fabric.ports(switch)]
