"""The tables of fabric.p4, compiled for lookup, and the P4Info ids they need.

``CompiledTables`` turns one generation of ``SwitchState`` (the decoded
entries P4Runtime wrote) into what the embedded target looks up: a set of
station MACs, LPM prefixes by length with their candidate actions (one, or
an ECMP group's), the ACL by priority, the lossless tables
(dscp_to_priority, pfc_config, ecn_config) and int_port as dicts of decoded
parameters, and the generation's counter arrays. ``FabricPipeline``
compiles them whenever the state's generation changes, looks them up on its
slow path (a flow's first packet) and counts into their arrays per packet;
the traffic manager takes the headroom to reserve, the egress counters and
int_port from them. ``PipelineIds`` resolves by name the P4Info ids both
need. Compiling is per write batch, not per packet: kept apart from the
per-packet code in ``emulator.dataplane.pipeline``.
"""
from __future__ import annotations

from emulator.dataplane.state import ActionCall, SwitchState
from emulator.p4.p4info import P4Info


class CompiledTables:
    """Lookup structures compiled from one generation of ``SwitchState``."""

    def __init__(self, state: SwitchState, p4info: P4Info):
        ids = PipelineIds(p4info)
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
            # INT: egress port -> (rate_mbps, ts_q16)
            self.int_port = {
                e.match[ids.int_eg_port][1]:
                    tuple(e.action.param(pid) for pid in ids.set_int_params)
                for e in state.tables.get(ids.int_port, {}).values()
                if e.action is not None and e.action.action_id == ids.set_int_port}
            # Lossless part: exact tables -> dicts of decoded action parameters.
            self.dscp_to_priority = {
                e.match[ids.dscp][1]: e.action.param(ids.set_priority_param)
                for e in state.tables.get(ids.dscp_to_priority, {}).values()
                if e.action is not None and e.action.action_id == ids.set_priority}
            self.pfc = {
                (e.match[ids.pfc_ig_port][1], e.match[ids.pfc_priority][1]):
                    tuple(e.action.param(pid) for pid in ids.set_pfc_params)
                for e in state.tables.get(ids.pfc_config, {}).values()
                if e.action is not None and e.action.action_id == ids.set_pfc_thresholds}
            self.ecn = {
                (e.match[ids.ecn_eg_port][1], e.match[ids.ecn_priority][1]):
                    tuple(e.action.param(pid) for pid in ids.set_ecn_params)
                for e in state.tables.get(ids.ecn_config, {}).values()
                if e.action is not None and e.action.action_id == ids.set_ecn_thresholds}
            # What the traffic manager keeps out of the shared pool.
            self.headroom_reserved_bytes = sum(h for _, _, h in self.pfc.values())
            # This generation's counter arrays (a new pipeline config replaces
            # them and bumps the generation), for inline counting per packet.
            counters = state.counters
            self.rx = counters.get(ids.rx_port_counter)
            self.enq = counters.get(ids.enq_port_counter)
            self.enq_prio = counters.get(ids.enq_prio_counter)
            self.pipeline_drop = counters.get(ids.pipeline_drop_counter)
            self.malformed = counters.get(ids.malformed_drop_counter)
            # Egress counters, counted by the traffic manager.
            self.tx = counters.get(ids.tx_port_counter)
            self.tx_prio = counters.get(ids.tx_prio_counter)
            self.ecn_mark = counters.get(ids.ecn_mark_counter)
            self.pfc_tx = counters.get(ids.pfc_tx_counter)

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


class PipelineIds:
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
        self.malformed_drop_counter = p4info.counter_id("malformed_drop_counter")
        self.tx_port_counter = p4info.counter_id("tx_port_counter")
        # Lossless part.
        self.dscp_to_priority = p4info.table_id("dscp_to_priority")
        self.dscp = p4info.match_field_id("dscp_to_priority", "dscp")
        self.set_priority = p4info.action_id("set_priority")
        self.set_priority_param = p4info.param_id("set_priority", "priority")
        self.pfc_config = p4info.table_id("pfc_config")
        self.pfc_ig_port = p4info.match_field_id("pfc_config", "ig_port")
        self.pfc_priority = p4info.match_field_id("pfc_config", "priority")
        self.set_pfc_thresholds = p4info.action_id("set_pfc_thresholds")
        self.set_pfc_params = tuple(p4info.param_id("set_pfc_thresholds", p)
                                    for p in ("xoff_bytes", "xon_bytes", "headroom_bytes"))
        self.ecn_config = p4info.table_id("ecn_config")
        self.ecn_eg_port = p4info.match_field_id("ecn_config", "eg_port")
        self.ecn_priority = p4info.match_field_id("ecn_config", "priority")
        self.set_ecn_thresholds = p4info.action_id("set_ecn_thresholds")
        self.set_ecn_params = tuple(p4info.param_id("set_ecn_thresholds", p)
                                    for p in ("kmin_bytes", "kmax_bytes", "pmax_per_mille"))
        self.enq_prio_counter = p4info.counter_id("enq_prio_counter")
        self.pfc_rx_counter = p4info.counter_id("pfc_rx_counter")
        self.tx_prio_counter = p4info.counter_id("tx_prio_counter")
        self.ecn_mark_counter = p4info.counter_id("ecn_mark_counter")
        self.pfc_tx_counter = p4info.counter_id("pfc_tx_counter")
        # INT.
        self.int_port = p4info.table_id("int_port")
        self.int_eg_port = p4info.match_field_id("int_port", "eg_port")
        self.set_int_port = p4info.action_id("set_int_port")
        self.set_int_params = tuple(p4info.param_id("set_int_port", p)
                                    for p in ("rate_mbps", "ts_q16"))

