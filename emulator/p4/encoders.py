"""The target's side of the P4Runtime codec, outbound: stored entities encoded for Read and packet-in.

``EntityEncoders`` is the part of ``emulator.p4.codec.Codec`` the embedded
target's P4Runtime server uses on what it sends: ``encode_*`` turn the
``emulator.p4.entities`` values it stores back into P4Runtime messages with
canonical bytestrings (spec 8.4), so that a Read returns what a Write
stored; ``packet_in`` builds a packet-in with its metadata.
``add_packet_metadata`` fills the controller packet metadata of a packet-in
or a packet-out (the builders' ``packet_out`` uses it too).

A mixin: ``Codec`` builds the per-P4Info indexes these methods read
(``_fields``, ``_params``, ``_packet_in``).
"""
from __future__ import annotations

from typing import Any, Iterable

from p4.v1 import p4runtime_pb2 as pb

from emulator.p4.entities import ActionCall, ActionProfileGroup, FieldMatch, TableEntry
from emulator.p4.names import MatchType, P4InfoError
from emulator.p4.values import encode


def add_packet_metadata(msg: pb.PacketIn | pb.PacketOut, kind: str, spec: Iterable[tuple[int, str, int]],
                        values: dict[str, Any]) -> None:
    """Every field of ``spec`` (``(id, name, bitwidth)``) into ``msg.metadata``, 0 unless in
    ``values``; a name in ``values`` that ``spec`` lacks is a ``P4InfoError``."""
    add = msg.metadata.add
    for mid, name, bitwidth in spec:
        add(metadata_id=mid, value=encode(values.pop(name, 0), bitwidth))
    if values:
        raise P4InfoError(f"{kind} has no metadata field(s) {sorted(values)}")


class EntityEncoders:
    """``Codec``'s encoders of stored entities (target side)."""

    def encode_action(self, call: ActionCall) -> pb.Action:
        params = self._params.get(call.action_id, {})
        msg = pb.Action(action_id=call.action_id)
        for pid, value in call.params:
            bw = params[pid].bitwidth if pid in params else max(1, value.bit_length())
            msg.params.add(param_id=pid, value=encode(value, bw))
        return msg

    def encode_field_match(self, table_id: int, field_id: int, m: FieldMatch) -> pb.FieldMatch:
        mf = self._fields[table_id][field_id]
        bw = mf.bitwidth
        fm = pb.FieldMatch(field_id=field_id)
        kind = m[0]
        if kind == "exact" and mf.match_type == MatchType.OPTIONAL:
            fm.optional.value = encode(m[1], bw)
        elif kind == "exact":
            fm.exact.value = encode(m[1], bw)
        elif kind == "lpm":
            fm.lpm.value, fm.lpm.prefix_len = encode(m[1], bw), m[2]
        elif kind == "ternary":
            fm.ternary.value, fm.ternary.mask = encode(m[1], bw), encode(m[2], bw)
        elif kind == "range":
            fm.range.low, fm.range.high = encode(m[1], bw), encode(m[2], bw)
        else:
            raise ValueError(f"unknown match kind {kind!r}")
        return fm

    def encode_table_entry(self, entry: TableEntry) -> pb.TableEntry:
        """``p4.v1.TableEntry`` (canonical bytestrings) of a ``TableEntry``."""
        te = pb.TableEntry(table_id=entry.table_id, priority=entry.priority, metadata=entry.metadata)
        for fid in sorted(entry.match):
            te.match.append(self.encode_field_match(entry.table_id, fid, entry.match[fid]))
        if entry.action is not None:
            te.action.action.CopyFrom(self.encode_action(entry.action))
        elif entry.member_id is not None:
            te.action.action_profile_member_id = entry.member_id
        elif entry.group_id is not None:
            te.action.action_profile_group_id = entry.group_id
        return te

    def encode_default_entry(self, table_id: int, call: ActionCall) -> pb.TableEntry:
        te = pb.TableEntry(table_id=table_id, is_default_action=True)
        te.action.action.CopyFrom(self.encode_action(call))
        return te

    def encode_member(self, profile_id: int, member_id: int, call: ActionCall) -> pb.ActionProfileMember:
        return pb.ActionProfileMember(action_profile_id=profile_id, member_id=member_id,
                                      action=self.encode_action(call))

    @staticmethod
    def encode_group(profile_id: int, group: ActionProfileGroup) -> pb.ActionProfileGroup:
        msg = pb.ActionProfileGroup(action_profile_id=profile_id, group_id=group.group_id, max_size=group.max_size)
        for mid, weight in group.members:
            msg.members.add(member_id=mid, weight=weight)
        return msg

    @staticmethod
    def encode_counter_entry(counter_id: int, index: int, packets: int, nbytes: int) -> pb.CounterEntry:
        ce = pb.CounterEntry(counter_id=counter_id)
        ce.index.index = index
        ce.data.packet_count, ce.data.byte_count = packets, nbytes
        return ce

    def packet_in(self, payload: bytes, ingress_port: int, **metadata: Any) -> pb.PacketIn:
        """PacketIn with every ``packet_in`` metadata field (others default to 0)."""
        msg = pb.PacketIn(payload=bytes(payload))
        add_packet_metadata(msg, "packet_in", self._packet_in, dict(metadata, ingress_port=ingress_port))
        return msg
