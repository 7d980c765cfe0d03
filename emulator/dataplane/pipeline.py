"""The fabric pipeline of ``p4src/fabric.p4``, in Python, for the embedded target.

Each control block of the P4 program has its counterpart here, in the same
order and with the same table semantics, so that a packet test's expected
output holds on BMv2 and on this target alike:

    ingress:  packet-out | rx_port_counter, my_station, ipv4_lpm (+ecmp_selector),
              acl, pipeline_drop_counter / enq_port_counter
    egress:   tx_port_counter (counted by the traffic manager at dequeue),
              packet-in to the CPU port

Tables come from ``SwitchState`` (what the controller wrote over P4Runtime).
The P4 ingress is a pure function of a few header fields, so its outcome is
cached per flow key (``FlowCache``) and the cache is flushed whenever the
state's generation changes. Per packet, the hot path is then: build the key,
one dict lookup, rewrite MACs/TTL/checksum in a bytearray.
"""
from __future__ import annotations

import binascii
import struct
from dataclasses import dataclass

from emulator.dataplane.state import ActionCall, SwitchState
from emulator.p4.p4info import P4Info

CPU_PORT = 255
DROP_PORT = 511            # v1model's egress_spec after mark_to_drop()
ETHERTYPE_IPV4 = 0x0800
IP_PROTO_UDP = 17
_FLOW_CACHE_MAX = 65536


@dataclass(frozen=True)
class Verdict:
    """What ingress decided for one flow: where the packet goes, how it changes."""

    egress_port: int                 # DROP_PORT, CPU_PORT or a front-panel port
    new_macs: bytes | None = None    # dst+src MAC (12 bytes) if set_nexthop ran
    decrement_ttl: bool = False


_DROP = Verdict(DROP_PORT)


def _ipv4_checksum_after_ttl_decrement(checksum: int) -> int:
    """RFC 1624 incremental update: TTL is the high byte of its 16-bit word."""
    s = checksum + 0x0100
    return (s & 0xFFFF) + (s >> 16)


def rewrite(frame: bytes, verdict: Verdict) -> bytearray:
    """Apply set_nexthop's header changes (MACs, TTL, checksum) to a frame copy."""
    out = bytearray(frame)
    if verdict.new_macs is not None:
        out[0:12] = verdict.new_macs
    if verdict.decrement_ttl:
        out[22] -= 1
        csum = _ipv4_checksum_after_ttl_decrement((out[24] << 8) | out[25])
        out[24] = csum >> 8
        out[25] = csum & 0xFF
    return out


class CompiledTables:
    """Lookup structures compiled from one generation of ``SwitchState``."""

    def __init__(self, state: SwitchState, p4info: P4Info):
        ids = _PipelineIds(p4info)
        self.ids = ids
        with state.lock:
            self.generation = state.generation
            # No pipeline config committed yet: like BMv2 before
            # SetForwardingPipelineConfig, the switch drops everything.
            self.configured = bool(state.counters)
            station = state.tables.get(ids.my_station, {})
            self.my_station = {e.match[ids.eth_dst][1] for e in station.values()}
            self.lpm = self._compile_lpm(state, ids)
            acl = state.tables.get(ids.acl, {}).values()
            self.acl = sorted(
                ((e.priority, self._ternary_key(e, ids), e.action) for e in acl),
                key=lambda t: -t[0])

    @staticmethod
    def _ternary_key(entry, ids) -> tuple:
        key = []
        for fid in ids.acl_fields:
            m = entry.match.get(fid)
            key.append((0, 0) if m is None else (m[1] & m[2], m[2]))
        return tuple(key)

    @staticmethod
    def _compile_lpm(state: SwitchState, ids) -> dict[int, dict[int, list[ActionCall]]]:
        """prefix_len -> {masked dst -> candidate actions (one, or an ECMP group's)}."""
        profile = state.action_profiles.get(ids.ecmp_selector)
        by_len: dict[int, dict[int, list[ActionCall]]] = {}
        for entry in state.tables.get(ids.ipv4_lpm, {}).values():
            _, value, plen = entry.match.get(ids.ipv4_dst, ("lpm", 0, 0))  # /0: no match field
            if entry.action is not None:
                actions = [entry.action]
            elif entry.member_id is not None:
                actions = [profile.members[entry.member_id]]
            else:
                group = profile.groups[entry.group_id]
                actions = [profile.members[mid]
                           for mid, weight in group.members for _ in range(max(weight, 1))]
            by_len.setdefault(plen, {})[value] = actions
        return dict(sorted(by_len.items(), reverse=True))

    def lookup_lpm(self, dst: int) -> list[ActionCall] | None:
        for plen, prefixes in self.lpm.items():
            mask = (0xFFFFFFFF << (32 - plen)) & 0xFFFFFFFF if plen else 0
            actions = prefixes.get(dst & mask)
            if actions is not None:
                return actions
        return None

    def lookup_acl(self, fields: tuple) -> ActionCall | None:
        for _, key, action in self.acl:
            if all((f & mask) == value for f, (value, mask) in zip(fields, key)):
                return action
        return None


class _PipelineIds:
    """The P4Info ids the pipeline needs, resolved once by name."""

    def __init__(self, p4info: P4Info):
        self.my_station = p4info.table_id("my_station")
        self.eth_dst = p4info.match_field_id("my_station", "eth_dst")
        self.ipv4_lpm = p4info.table_id("ipv4_lpm")
        self.ipv4_dst = p4info.match_field_id("ipv4_lpm", "ipv4_dst")
        self.acl = p4info.table_id("acl")
        self.acl_fields = [p4info.match_field_id("acl", f) for f in
                           ("ig_port", "eth_type", "ipv4_src", "ipv4_dst", "ip_proto", "l4_dst_port")]
        self.ecmp_selector = p4info.action_profile_id("ecmp_selector")
        self.set_nexthop = p4info.action_id("set_nexthop")
        self.set_nexthop_params = tuple(p4info.param_id("set_nexthop", p)
                                        for p in ("port", "smac", "dmac"))
        self.drop = p4info.action_id("drop")
        self.punt_to_cpu = p4info.action_id("punt_to_cpu")
        self.rx_port_counter = p4info.counter_id("rx_port_counter")
        self.enq_port_counter = p4info.counter_id("enq_port_counter")
        self.pipeline_drop_counter = p4info.counter_id("pipeline_drop_counter")
        self.tx_port_counter = p4info.counter_id("tx_port_counter")


class FabricPipeline:
    """Ingress of fabric.p4: frame in, (egress port, frame out) decided."""

    def __init__(self, state: SwitchState, p4info: P4Info):
        self.state = state
        self.p4info = p4info
        self.ids = _PipelineIds(p4info)
        self._tables: CompiledTables | None = None
        self._cache: dict[tuple, Verdict] = {}

    # ------------------------------------------------------------ fast path
    def ingress(self, frame: bytes, ingress_port: int) -> tuple[int, bytes | bytearray]:
        """Run ingress on one frame. Returns (egress_port, frame to enqueue)."""
        state = self.state
        counters = state.counters
        if self._tables is None or self._tables.generation != state.generation:
            self._tables = CompiledTables(state, self.p4info)
            self._cache.clear()
        if not self._tables.configured:
            return DROP_PORT, frame
        ids = self.ids
        counters[ids.rx_port_counter].count(ingress_port, len(frame))

        # Flow key: exactly the header bits ingress reads, except the TTL.
        ipv4 = len(frame) >= 34 and frame[12] == 0x08 and frame[13] == 0x00
        if ipv4 and frame[22] > 1:
            key = (ingress_port, frame[0:6] + frame[12:15] + frame[23:24] + frame[26:38])
            verdict = self._cache.get(key)
            if verdict is None:
                verdict = self._decide(frame, ingress_port, ipv4)
                if len(self._cache) >= _FLOW_CACHE_MAX:
                    self._cache.clear()
                self._cache[key] = verdict
        else:
            verdict = self._decide(frame, ingress_port, ipv4)

        port = verdict.egress_port
        if port == DROP_PORT:
            counters[ids.pipeline_drop_counter].count(ingress_port, len(frame))
            return port, frame
        if port != CPU_PORT:
            counters[ids.enq_port_counter].count(port, len(frame))
        if verdict.new_macs is None and not verdict.decrement_ttl:
            return port, frame
        return port, rewrite(frame, verdict)

    def packet_out(self, payload: bytes, egress_port: int) -> int:
        """A controller packet-out: no lookup, no rewrite (fabric.p4's first branch)."""
        self.state.counters[self.ids.enq_port_counter].count(egress_port, len(payload))
        return egress_port

    # ------------------------------------------------------------ slow path
    def _decide(self, frame: bytes, ingress_port: int, ipv4: bool) -> Verdict:
        tables, ids = self._tables, self.ids
        eth_type = (frame[12] << 8) | frame[13] if len(frame) >= 14 else 0
        src = dst = proto = sport = dport = 0
        verdict = _DROP
        if ipv4:
            ihl = frame[14] & 0x0F
            proto = frame[23]
            src, dst = struct.unpack_from("!II", frame, 26)
            if ihl == 5 and proto == IP_PROTO_UDP and len(frame) >= 38:
                sport, dport = struct.unpack_from("!HH", frame, 34)
            if int.from_bytes(frame[0:6], "big") in tables.my_station and frame[22] > 1:
                actions = tables.lookup_lpm(dst)
                if actions:
                    action = actions[0] if len(actions) == 1 else \
                        actions[ecmp_hash(src, dst, proto, sport, dport) % len(actions)]
                    verdict = self._apply(action, verdict)
        acl_action = tables.lookup_acl((ingress_port, eth_type, src, dst, proto, dport))
        if acl_action is not None:
            verdict = self._apply(acl_action, verdict)
        return verdict

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


def ecmp_hash(src: int, dst: int, proto: int, sport: int, dport: int) -> int:
    """16-bit hash of the selector fields in the order fabric.p4 lists them."""
    data = struct.pack("!IIBHH", src, dst, proto, sport, dport)
    return binascii.crc_hqx(data, 0)
