"""The controller's side of the P4Runtime codec: messages built from names and human values, read back.

``EntityBuilders`` is the part of ``emulator.p4.codec.Codec`` a program that
talks P4Runtime uses: ``action_msg``, ``table_entry``,
``action_profile_member``, ``action_profile_group``, ``counter_entry``,
``clone_session`` and ``packet_out`` build messages from names (or ids) and
human values (``emulator.p4.values``); ``packet_metadata`` and
``describe_table_entry`` read what comes back into names. Its caller is a
program, not a peer, so a wrong name or value raises ``ValueError`` or
``P4InfoError``, not ``Rejected``. Match values per match type: see
``emulator.p4.codec``.

A mixin: ``Codec`` builds the per-P4Info indexes these methods read
(``_packet_out``, ``_metadata_names``, ``_fields``), and
``describe_table_entry`` reads through the decoders of
``emulator.p4.decoders.EntityDecoders``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping

from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as pb

from emulator.p4.encoders import add_packet_metadata
from emulator.p4.names import MatchType, P4InfoError, by_id_or_name
from emulator.p4.values import decode, encode, to_int

if TYPE_CHECKING:
    from emulator.p4.p4info import P4Info


class EntityBuilders:
    """``Codec``'s builders (controller side) and readers of what the target sends back."""

    p4info: "P4Info"

    def action_msg(self, action: str | int, params: Mapping[str | int, Any] | None = None) -> pb.Action:
        """``p4.v1.Action`` from an action name and ``{param: value}``."""
        a = self.p4info.action(action)
        params = dict(params or {})
        msg = pb.Action(action_id=a.preamble.id)
        for p in a.params:
            key = p.name if p.name in params else p.id if p.id in params else None
            if key is None:
                raise ValueError(f"action {a.preamble.name}: missing parameter {p.name!r}")
            msg.params.add(param_id=p.id, value=encode(params.pop(key), p.bitwidth))
        if params:
            raise P4InfoError(f"action {a.preamble.name} has no parameter(s) {sorted(map(str, params))}")
        return msg

    @staticmethod
    def _field_match(table: p4info_pb2.Table, field: str | int, value: Any) -> pb.FieldMatch | None:
        mf = by_id_or_name("match field", table.match_fields, field, f"table {table.preamble.name}")
        fm = pb.FieldMatch(field_id=mf.id)
        bw = mf.bitwidth
        if value is None:
            return None
        if mf.match_type == MatchType.EXACT:
            fm.exact.value = encode(value, bw)
        elif mf.match_type == MatchType.OPTIONAL:
            fm.optional.value = encode(value, bw)
        elif mf.match_type == MatchType.LPM:
            if isinstance(value, str) and "/" in value:
                addr, plen = value.split("/", 1)
                value = (addr, int(plen))
            v, plen = value
            if plen == 0:
                return None
            fm.lpm.value = encode(v, bw)
            fm.lpm.prefix_len = int(plen)
        elif mf.match_type == MatchType.TERNARY:
            v, mask = value
            if to_int(mask) == 0:
                return None
            fm.ternary.value = encode(v, bw)
            fm.ternary.mask = encode(mask, bw)
        elif mf.match_type == MatchType.RANGE:
            low, high = value
            if to_int(low) == 0 and to_int(high) == (1 << bw) - 1:
                return None
            fm.range.low = encode(low, bw)
            fm.range.high = encode(high, bw)
        else:
            raise ValueError(f"table {table.preamble.name}: unsupported match type of {mf.name}")
        return fm

    def table_entry(
        self,
        table: str | int,
        match: Mapping[str | int, Any] | None = None,
        action: str | tuple | None = None,
        *,
        member_id: int | None = None,
        group_id: int | None = None,
        priority: int = 0,
        is_default: bool = False,
        metadata: bytes = b"",
    ) -> pb.TableEntry:
        """``p4.v1.TableEntry``; ``action`` is a name or ``(name, {param: value})``.

        For DELETE (and Read filters) the action may be left out.
        """
        t = self.p4info.table(table)
        te = pb.TableEntry(table_id=t.preamble.id, priority=priority,
                           is_default_action=is_default, metadata=metadata)
        for field, value in (match or {}).items():
            fm = self._field_match(t, field, value)
            if fm is not None:
                te.match.append(fm)
        te.match.sort(key=lambda m: m.field_id)
        chosen = [x is not None for x in (action, member_id, group_id)]
        if sum(chosen) > 1:
            raise ValueError("give one of action, member_id, group_id")
        if action is not None:
            name, params = (action, None) if isinstance(action, (str, int)) else action
            te.action.action.CopyFrom(self.action_msg(name, params))
        elif member_id is not None:
            te.action.action_profile_member_id = member_id
        elif group_id is not None:
            te.action.action_profile_group_id = group_id
        return te

    def action_profile_member(self, profile: str | int, member_id: int, action: str | int | None = None,
                              params: Mapping[str | int, Any] | None = None) -> pb.ActionProfileMember:
        """Member bound to ``action(params)``; the action may be left out for DELETE."""
        msg = pb.ActionProfileMember(action_profile_id=self.p4info.action_profile_id(profile), member_id=member_id)
        if action is not None:
            msg.action.CopyFrom(self.action_msg(action, params))
        return msg

    def action_profile_group(self, profile: str | int, group_id: int,
                             members: Iterable[int | tuple[int, int]] = (),
                             max_size: int | None = None) -> pb.ActionProfileGroup:
        """Group of member ids (or ``(member_id, weight)``; weight defaults to 1).

        ``max_size`` defaults to the profile's ``max_group_size``.
        """
        prof = self.p4info.action_profile(profile)
        msg = pb.ActionProfileGroup(action_profile_id=prof.preamble.id, group_id=group_id,
                                    max_size=prof.max_group_size if max_size is None else max_size)
        for m in members:
            mid, weight = (m, 1) if isinstance(m, int) else m
            msg.members.add(member_id=mid, weight=weight)
        return msg

    def counter_entry(self, counter: str | int, index: int | None = None,
                      data: tuple[int, int] | None = None) -> pb.CounterEntry:
        """Counter cell (``index=None``: all cells); ``data=(packets, bytes)`` for MODIFY."""
        msg = pb.CounterEntry(counter_id=self.p4info.counter_id(counter))
        if index is not None:
            msg.index.index = index
        if data is not None:
            msg.data.packet_count, msg.data.byte_count = data
        return msg

    @staticmethod
    def clone_session(session_id: int, replicas: Iterable[int | tuple[int, int]] = ()
                      ) -> pb.PacketReplicationEngineEntry:
        """Clone session to egress ports (or ``(port, instance)``; instance defaults to 1)."""
        cs = pb.CloneSessionEntry(session_id=session_id)
        for r in replicas:
            port, instance = (r, 1) if isinstance(r, int) else r
            cs.replicas.add(egress_port=port, instance=instance)
        return pb.PacketReplicationEngineEntry(clone_session_entry=cs)

    def packet_out(self, payload: bytes, egress_port: int, **metadata: Any) -> pb.PacketOut:
        """PacketOut with every ``packet_out`` metadata field (others default to 0)."""
        msg = pb.PacketOut(payload=bytes(payload))
        add_packet_metadata(msg, "packet_out", self._packet_out.values(), dict(metadata, egress_port=egress_port))
        return msg

    def packet_metadata(self, kind: str, metadata: Iterable[pb.PacketMetadata]) -> dict[str, int]:
        """``{field name: value}`` of a PacketIn/PacketOut's metadata (as sent, not checked)."""
        names = self._metadata_names.get(kind)
        if names is None:
            raise P4InfoError(f"no controller packet metadata {kind!r} in the P4Info")
        return {names.get(m.metadata_id, str(m.metadata_id)): decode(m.value) for m in metadata}

    def describe_table_entry(self, te: pb.TableEntry) -> dict:
        """Readable form: ``{"table", "match": {field: ...}, "priority", "action"|"member_id"|"group_id"}``.

        Match values are ints in the same shapes ``table_entry`` accepts.
        """
        t = self.table(te.table_id)
        fields = self._fields[te.table_id]
        out: dict[str, Any] = {"table": t.preamble.alias or t.preamble.name, "match": {}, "priority": te.priority}
        for fid, m in self.decode_match(t, te, check_priority=False).items():
            out["match"][fields[fid].name] = m[1] if m[0] == "exact" else tuple(m[1:])
        kind = te.action.WhichOneof("type")
        if kind == "action":
            a = self.p4info.action(te.action.action.action_id)
            names = {p.id: p.name for p in a.params}
            call = self.decode_action(te.action.action)
            out["action"] = (a.preamble.alias or a.preamble.name, {names[pid]: v for pid, v in call.params})
        elif kind == "action_profile_member_id":
            out["member_id"] = te.action.action_profile_member_id
        elif kind == "action_profile_group_id":
            out["group_id"] = te.action.action_profile_group_id
        if te.is_default_action:
            out["is_default"] = True
        return out
