"""The fabric pipeline of ``p4src/fabric.p4``, in Python, for the embedded target.

Each control block of the P4 program has its counterpart here, in the same
order and with the same table semantics, so that a packet test's expected
output holds on BMv2 and on this target alike:

    ingress:  packet-out | rx_port_counter, malformed IPv4 (dropped:
              pipeline_drop_counter + malformed_drop_counter), MAC control
              (PFC: pfc_rx_counter, handed to the traffic manager, consumed) |
              dscp_to_priority,
              pfc_config, my_station, ipv4_lpm (+ecmp_selector), acl,
              pipeline_drop_counter / enq_port_counter + enq_prio_counter
    egress:   ecn_config, tx_port_counter, tx_prio_counter, ecn_mark_counter:
              applied by the traffic manager (``tm.py``) at enqueue/dequeue;
              packet-in to the CPU port

Tables come from ``SwitchState``; the ingress outcome is cached per flow key
(``docs/design-notes.md``, "The embedded pipeline's flow cache").

Here: ingress itself (``FabricPipeline``: the flow cache, the fast and slow
paths, MAC control, packet-out), its outcome (``Verdict``) and the
set_nexthop rewrite, the per-packet code kept in one module so that it reads
as fabric.p4's ingress does. What it builds on has modules of its own: the
malformed-frame checks (``ipv4_checks``) and the tables compiled from the
switch state with the P4Info ids they need (``compiled_tables``).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable

from emulator.dataplane.compiled_tables import CompiledTables, PipelineIds
from emulator.dataplane.ipv4_checks import (
    IP_PROTO_UDP, IPV4_UDP_BTH_BYTES, L4, int_stack_malformed, malformed_reason,
)
from emulator.dataplane.malformed import Malformed, malformed_cell
from emulator.dataplane.pfc import OPCODE_PFC, parse_mac_control
from emulator.dataplane.state import ActionCall, SwitchState
from emulator.int_md import INT_UDP_DPORT
from emulator.p4.ecmp import ecmp_hash
from emulator.p4.p4info import P4Info
from emulator.wire import CPU_PORT, ETH_HDR_BYTES, ETH_P_IP, NUM_PRIORITIES

DROP_PORT = 511            # v1model's egress_spec after mark_to_drop()
ETHERTYPE_IPV4 = ETH_P_IP
_FLOW_CACHE_MAX = 65536
# The shortest frame the flow cache serves: Ethernet + IPv4 + UDP + BTH.
_FAST_MIN_FRAME = ETH_HDR_BYTES + IPV4_UDP_BTH_BYTES
_INT_DPORT_HI, _INT_DPORT_LO = INT_UDP_DPORT >> 8, INT_UDP_DPORT & 0xFF


@dataclass(frozen=True, slots=True)
class Verdict:
    """What ingress decided for one flow: where the packet goes, how it changes,
    and its traffic class as the traffic manager needs it."""

    egress_port: int                 # DROP_PORT, CPU_PORT or a front-panel port
    new_macs: bytes | None = None    # dst+src MAC (12 bytes) if set_nexthop ran
    decrement_ttl: bool = False
    priority: int = 0                # dscp_to_priority (0 without a hit)
    # pfc_config hit for (ingress port, priority): (xoff, xon, headroom) bytes;
    # None: the class is lossy on that ingress port.
    pfc: tuple[int, int, int] | None = None
    # ecn_config hit for (egress port, priority), IPv4 only: (kmin_bytes,
    # kmax_bytes, pmax_per_mille); None: never marked.
    ecn: tuple[int, int, int] | None = None
    in_cell: int = 0                 # ingress port * 8 + priority (buffer accounting)
    eg_cell: int = 0                 # egress port * 8 + priority (counters)


_DROP = Verdict(DROP_PORT)


# The 20-byte IPv4 base header minus its checksum field: fabric.p4's field list.
_IPV4_CSUM_WORDS = struct.Struct("!5H2x4H")


def _ipv4_header_checksum(frame) -> int:
    """FabricComputeChecksum: csum16 over the base header, recomputed from scratch.

    Not an incremental (RFC 1624) update: like update_checksum on BMv2, the
    result never is 0xFFFF. (``rewrite`` gets the same value faster.)
    """
    s = sum(_IPV4_CSUM_WORDS.unpack_from(frame, 14))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def rewrite(frame: bytes, verdict: Verdict) -> bytearray:
    """Apply set_nexthop's header changes (MACs, TTL, checksum) to a frame copy."""
    out = bytearray(frame)
    if verdict.new_macs is not None:
        out[0:12] = verdict.new_macs
    if verdict.decrement_ttl:
        out[22] -= 1
        # FabricComputeChecksum's from-scratch csum16 (_ipv4_header_checksum),
        # got from the old checksum: ingress dropped every header whose
        # checksum was wrong, so the rest of the header sums to 0xFFFF - old
        # (one's complement, in 1..0xFFFF); the TTL byte takes 0x100 off.
        csum = 0xFFFE - (0xFEFE - (out[24] << 8 | out[25])) % 0xFFFF
        out[24] = csum >> 8
        out[25] = csum & 0xFF
    return out


class FabricPipeline:
    """Ingress of fabric.p4: frame in, (egress port, frame out) decided.

    ``verdict`` is the last frame's ``Verdict`` (its priority, PFC and ECN
    thresholds: what the traffic manager needs to enqueue it). A received PFC
    frame is counted and handed to ``pfc_handler(ingress_port, class_enable,
    timers)``, then consumed. ``on_tables(CompiledTables)`` is called whenever
    the tables are recompiled (the traffic manager re-reads the headroom).
    """

    def __init__(self, state: SwitchState, p4info: P4Info):
        self.state = state
        self.p4info = p4info
        self.ids = PipelineIds(p4info)
        self._tables: CompiledTables | None = None
        self._cache: dict[tuple, Verdict] = {}
        self.verdict: Verdict = _DROP
        self.pfc_handler: Callable[[int, int, tuple], None] | None = None
        self.on_tables: Callable[[CompiledTables], None] | None = None

    @property
    def tables(self) -> CompiledTables:
        """The compiled tables of the state's current generation."""
        tables = self._tables
        if tables is None or tables.generation != self.state.generation:
            tables = self._tables = CompiledTables(self.state, self.p4info)
            self._cache.clear()
            if self.on_tables is not None:
                self.on_tables(tables)
        return tables

    # ------------------------------------------------------------ fast path
    def ingress(self, frame: bytes, ingress_port: int) -> tuple[int, bytes | bytearray]:
        """Run ingress on one frame. Returns (egress_port, frame to enqueue);
        the verdict (traffic class) is left in ``self.verdict``."""
        tables = self._tables
        if tables is None or tables.generation != self.state.generation:
            tables = self.tables
        if not tables.configured:
            self.verdict = _DROP
            return DROP_PORT, frame
        n = len(frame)
        if ingress_port < CPU_PORT:
            c = tables.rx
            c.packets[ingress_port] += 1
            c.bytes[ingress_port] += n
        else:
            tables.rx.count(ingress_port, n)

        # The flow cache serves only well-formed IPv4 with IHL 5 and TTL > 1,
        # long enough for UDP + BTH whatever its protocol: checked here, per
        # packet, as they are not in the key (total length, checksum), so a
        # malformed packet never gets a good one's cached verdict. Anything
        # else takes the slow path, malformed_reason() first.
        if (n >= _FAST_MIN_FRAME and frame[14] == 0x45 and frame[12] == 0x08 and frame[13] == 0x00
                and frame[22] > 1 and IPV4_UDP_BTH_BYTES <= frame[16] * 256 + frame[17] <= n - 14
                and (frame[24] != 0xFF or frame[25] != 0xFF)      # ipv4_checksum_ok, inlined
                and int.from_bytes(frame[14:34]) % 0xFFFF == 0):
            # Flow key: exactly the header bits ingress reads, except the TTL,
            # the ECN bits (byte 15 is DSCP:6 ECN:2; only the DSCP is matched)
            # and what the test above fixed (EtherType, version, IHL). A tuple
            # of slices: cheaper than joining them.
            key = ((frame[15] & 0xFC) << 7 | ingress_port, frame[0:6], frame[23], frame[26:38])
            verdict = self._cache.get(key)
            if verdict is None:
                verdict = self._decide(frame, ingress_port, True)
                if len(self._cache) >= _FLOW_CACHE_MAX:
                    self._cache.clear()
                self._cache[key] = verdict
            # The INT stack is not in the key either: checked per packet
            # (fabric.p4 checks it before any lookup).
            if (frame[36] == _INT_DPORT_HI and frame[37] == _INT_DPORT_LO and frame[23] == IP_PROTO_UDP
                    and int_stack_malformed(frame, frame[16] << 8 | frame[17])):
                self.verdict = _DROP
                tables.pipeline_drop.count(ingress_port, n)
                tables.malformed.count(malformed_cell(ingress_port, Malformed.INT_STACK), n)
                return DROP_PORT, frame
        elif n >= L4 and frame[12] == 0x88 and frame[13] == 0x08:
            return self._mac_control(frame, ingress_port)
        else:
            ipv4 = n >= ETH_HDR_BYTES and frame[12] == 0x08 and frame[13] == 0x00
            reason = malformed_reason(frame) if ipv4 else 0
            if reason:
                self.verdict = _DROP
                tables.pipeline_drop.count(ingress_port, n)
                tables.malformed.count(malformed_cell(ingress_port, reason), n)
                return DROP_PORT, frame
            verdict = self._decide(frame, ingress_port, ipv4)

        self.verdict = verdict
        port = verdict.egress_port
        if port < CPU_PORT:   # a front-panel port (counter cells are in range)
            c = tables.enq
            c.packets[port] += 1
            c.bytes[port] += n
            c = tables.enq_prio
            cell = verdict.eg_cell
            c.packets[cell] += 1
            c.bytes[cell] += n
        elif port == DROP_PORT:
            tables.pipeline_drop.count(ingress_port, n)
            return port, frame
        elif port != CPU_PORT:
            tables.enq.count(port, n)
            tables.enq_prio.count(verdict.eg_cell, n)
        if verdict.new_macs is None and not verdict.decrement_ttl:
            return port, frame
        return port, rewrite(frame, verdict)

    def packet_out(self, payload: bytes, egress_port: int) -> int:
        """A controller packet-out: no lookup, no rewrite (fabric.p4's first branch).

        Its verdict: priority 0 (standard_metadata.priority is never set),
        lossy, ECN thresholds of (egress port, 0) for an IPv4 payload.
        """
        tables = self.tables
        if not tables.configured:     # no pipeline config yet: like ingress, drop
            self.verdict = _DROP
            return DROP_PORT
        self.state.counters[self.ids.enq_port_counter].count(egress_port, len(payload))
        ipv4 = len(payload) >= L4 and payload[12] == 0x08 and payload[13] == 0x00
        self.verdict = Verdict(egress_port, ecn=tables.ecn.get((egress_port, 0)) if ipv4 else None,
                               in_cell=CPU_PORT * NUM_PRIORITIES,
                               eg_cell=egress_port * NUM_PRIORITIES)
        return egress_port

    # ------------------------------------------------------------ MAC control
    def _mac_control(self, frame, ingress_port: int) -> tuple[int, bytes]:
        """A pause frame ends here: counted, handed to the traffic manager, consumed."""
        self.verdict = _DROP
        opcode, class_enable, timers = parse_mac_control(frame)
        if opcode == OPCODE_PFC:
            counter = self.state.counters[self.ids.pfc_rx_counter]
            base = ingress_port * NUM_PRIORITIES
            for prio in range(NUM_PRIORITIES):
                if class_enable >> prio & 1:
                    counter.count(base + prio, len(frame))
            if self.pfc_handler is not None:
                self.pfc_handler(ingress_port, class_enable, timers)
        return DROP_PORT, frame   # mark_to_drop(); return: not a pipeline drop

    # ------------------------------------------------------------ slow path
    def _decide(self, frame: bytes, ingress_port: int, ipv4: bool) -> Verdict:
        tables, ids = self._tables, self.ids
        eth_type = (frame[12] << 8) | frame[13] if len(frame) >= 14 else 0
        src = dst = proto = sport = dport = 0
        verdict = _DROP
        priority = 0
        if ipv4:
            proto = frame[23]
            src, dst = struct.unpack_from("!II", frame, 26)
            priority = tables.dscp_to_priority.get(frame[15] >> 2, 0)
            # Well formed (malformed_reason): IHL 5, and UDP has its header.
            if proto == IP_PROTO_UDP:
                sport, dport = struct.unpack_from("!HH", frame, L4)
            if int.from_bytes(frame[0:6], "big") in tables.my_station and frame[22] > 1:
                actions = tables.lookup_lpm(dst)
                if actions:
                    action = actions[0] if len(actions) == 1 else \
                        actions[ecmp_hash(src, dst, proto, sport, dport) % len(actions)]
                    verdict = self._apply(action, verdict)
        acl_action = tables.lookup_acl((ingress_port, eth_type, src, dst, proto, dport))
        if acl_action is not None:
            verdict = self._apply(acl_action, verdict)
        port = verdict.egress_port
        if port == DROP_PORT:
            return _DROP
        # The traffic class: pfc_config on (ingress port, priority); ecn_config
        # on (egress port, priority), read by the TM for IPv4 packets only.
        return Verdict(port, verdict.new_macs, verdict.decrement_ttl, priority,
                       tables.pfc.get((ingress_port, priority)),
                       tables.ecn.get((port, priority)) if ipv4 and port != CPU_PORT else None,
                       ingress_port * NUM_PRIORITIES + priority,
                       port * NUM_PRIORITIES + priority)

    def _apply(self, action: ActionCall, verdict: Verdict) -> Verdict:
        ids = self.ids
        if action.action_id == ids.set_nexthop:
            port, smac, dmac = (action.param(pid) for pid in ids.set_nexthop_params)
            return Verdict(port, dmac.to_bytes(6, "big") + smac.to_bytes(6, "big"), True)
        if action.action_id == ids.drop:
            return Verdict(DROP_PORT, verdict.new_macs, verdict.decrement_ttl)
        if action.action_id == ids.punt_to_cpu:
            return Verdict(CPU_PORT, verdict.new_macs, verdict.decrement_ttl)
        return verdict  # NoAction
