"""The target's side of the P4Runtime codec, inbound: entities decoded and validated.

``EntityDecoders`` is the part of ``emulator.p4.codec.Codec`` the embedded
target's P4Runtime server uses on what it receives: ``decode_*`` turn
P4Runtime messages into ``emulator.p4.entities`` values (ints, not
bytestrings), checking them as a P4Runtime server must, against the P4Info
only (P4Runtime 1.4: table entries 9.1, action profiles 9.2, counters 9.3,
PRE 9.5, packet I/O on the stream 16); what depends on a target's state (an
entry exists, a member is used, a table is full) is the target's to check.
Rejections are ``Rejected`` with the google.rpc code PI (BMv2's P4Runtime
server) uses: unknown ids and malformed entities are INVALID_ARGUMENT; a
bytestring that is empty or too wide is OUT_OF_RANGE (spec 8.4.3); an
action outside its scope is PERMISSION_DENIED; what fabric.p4's targets
lack is UNIMPLEMENTED.

A mixin: ``Codec`` builds the per-P4Info indexes these methods read
(``_fields``, ``_refs``, ``_params``, ``_profile_refs``, ``_packet_out``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Container, Iterable, Mapping, Sequence

from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as pb

from emulator.p4.entities import ActionCall, ActionProfileGroup, FieldMatch, TableEntry
from emulator.p4.names import PRIORITY_MATCH_TYPES, MatchType
from emulator.p4.rejected import Rejected, invalid
from emulator.p4.values import check_bytestring

if TYPE_CHECKING:
    from emulator.p4.p4info import P4Info

Scope = p4info_pb2.ActionRef.Scope
_KIND = {MatchType.EXACT: "exact", MatchType.LPM: "lpm", MatchType.TERNARY: "ternary",
         MatchType.RANGE: "range", MatchType.OPTIONAL: "optional"}
INSERT, MODIFY, DELETE = pb.Update.INSERT, pb.Update.MODIFY, pb.Update.DELETE

# BMv2's simple_switch accepts mirror session ids up to this (RegisterAccess).
MAX_SESSION_ID = 32767
PORT_LIMIT = 1 << 9  # v1model ports are bit<9>


def _value(data: bytes, bitwidth: int, what: str) -> int:
    try:
        return check_bytestring(data, bitwidth)
    except ValueError as e:
        raise Rejected(code_pb2.OUT_OF_RANGE, f"{what}: {e}") from None


def group_size(profile: p4info_pb2.ActionProfile, members: Iterable[tuple[int, int]]) -> int:
    """Size of a group's ``(member_id, weight)`` list as its profile counts it."""
    if profile.WhichOneof("selector_size_semantics") == "sum_of_members":
        return sum(1 for _ in members)
    return sum(w for _, w in members)


class EntityDecoders:
    """``Codec``'s lookups by id and validating decoders (target side)."""

    p4info: "P4Info"

    def table(self, table_id: int) -> p4info_pb2.Table:
        t = self.p4info.find_table(table_id)
        if t is None:
            raise invalid(f"unknown table id {table_id}")
        return t

    def profile(self, profile_id: int) -> p4info_pb2.ActionProfile:
        prof = self.p4info.find_action_profile(profile_id)
        if prof is None:
            raise invalid(f"unknown action profile id {profile_id}")
        return prof

    def counter(self, counter_id: int) -> p4info_pb2.Counter:
        c = self.p4info.find_counter(counter_id)
        if c is None:
            raise invalid(f"unknown counter id {counter_id}")
        return c

    @staticmethod
    def counter_index(c: p4info_pb2.Counter, index: int) -> int:
        if index < 0:
            raise invalid(f"counter {c.preamble.name}: negative index {index}")
        if index >= c.size:
            raise Rejected(code_pb2.OUT_OF_RANGE, f"counter {c.preamble.name}: index {index} >= size {c.size}")
        return index

    def decode_action(self, action: pb.Action, refs: Mapping[int, p4info_pb2.ActionRef] | None = None,
                      owner: str = "", *, default: bool = False) -> ActionCall:
        """``ActionCall`` of a ``p4.v1.Action``, checked against the P4Info.

        With ``refs`` (the owner's action refs) the action must be one of
        them, in scope (``default``: as a table's default action).
        """
        a = self.p4info.find_action(action.action_id)
        if a is None:
            raise invalid(f"unknown action id {action.action_id}")
        aname = a.preamble.name
        if refs is not None:
            ref = refs.get(action.action_id)
            if ref is None:
                raise invalid(f"action {aname} is not an action of {owner}")
            if ref.scope == Scope.DEFAULT_ONLY and not default:
                raise Rejected(code_pb2.PERMISSION_DENIED, f"action {aname} is @defaultonly in {owner}")
            if ref.scope == Scope.TABLE_ONLY and default:
                raise Rejected(code_pb2.PERMISSION_DENIED, f"action {aname} is @tableonly in {owner}")
        expected = self._params[action.action_id]
        values: dict[int, int] = {}
        for p in action.params:
            spec = expected.get(p.param_id)
            if spec is None:
                raise invalid(f"action {aname}: unknown parameter id {p.param_id}")
            if p.param_id in values:
                raise invalid(f"action {aname}: parameter {spec.name} given twice")
            values[p.param_id] = _value(p.value, spec.bitwidth, f"action {aname}: parameter {spec.name}")
        missing = [spec.name for pid, spec in expected.items() if pid not in values]
        if missing:
            raise invalid(f"action {aname}: missing parameter(s) {', '.join(missing)}")
        return ActionCall(action.action_id, tuple(sorted(values.items())))

    def decode_match(self, t: p4info_pb2.Table, te: pb.TableEntry, *,
                     check_priority: bool = True) -> dict[int, FieldMatch]:
        """Match key of an entry of table ``t`` (``check_priority=False``: a Read filter)."""
        tname = t.preamble.name
        fields = self._fields[t.preamble.id]
        out: dict[int, FieldMatch] = {}
        for fm in te.match:
            mf = fields.get(fm.field_id)
            if mf is None:
                raise invalid(f"table {tname}: unknown match field id {fm.field_id}")
            if fm.field_id in out:
                raise invalid(f"table {tname}: match field {mf.name} given twice")
            kind = fm.WhichOneof("field_match_type")
            expected = _KIND.get(mf.match_type)
            if kind != expected:
                raise invalid(f"table {tname}: match field {mf.name} is {expected}, got {kind or 'no match'}")
            bw, what = mf.bitwidth, f"table {tname}: match field {mf.name}"
            if kind == "exact":
                out[fm.field_id] = ("exact", _value(fm.exact.value, bw, what))
            elif kind == "optional":
                out[fm.field_id] = ("exact", _value(fm.optional.value, bw, what))
            elif kind == "lpm":
                value, plen = _value(fm.lpm.value, bw, what), fm.lpm.prefix_len
                if plen < 0 or plen > bw:
                    raise invalid(f"{what}: prefix length {plen} not in 1..{bw}")
                if plen == 0:
                    raise invalid(f"{what}: prefix length 0 is a don't-care match, omit the field")
                if value & ((1 << (bw - plen)) - 1):
                    raise invalid(f"{what}: value has bits set beyond the /{plen} prefix")
                out[fm.field_id] = ("lpm", value, plen)
            elif kind == "ternary":
                value = _value(fm.ternary.value, bw, what + " value")
                mask = _value(fm.ternary.mask, bw, what + " mask")
                if mask == 0:
                    raise invalid(f"{what}: mask 0 is a don't-care match, omit the field")
                if value & ~mask:
                    raise invalid(f"{what}: value has bits set outside the mask (value & mask != value)")
                out[fm.field_id] = ("ternary", value, mask)
            else:  # range
                low = _value(fm.range.low, bw, what + " low")
                high = _value(fm.range.high, bw, what + " high")
                if low > high:
                    raise invalid(f"{what}: low {low} > high {high}")
                if low == 0 and high == (1 << bw) - 1:
                    raise invalid(f"{what}: full range is a don't-care match, omit the field")
                out[fm.field_id] = ("range", low, high)
        for fid, mf in fields.items():
            if fid not in out and mf.match_type == MatchType.EXACT:
                raise invalid(f"table {tname}: exact match field {mf.name} is missing")
        if check_priority:
            needs = any(mf.match_type in PRIORITY_MATCH_TYPES for mf in fields.values())
            if needs and te.priority <= 0:
                raise invalid(f"table {tname} has ternary/range/optional fields: priority must be > 0")
            if not needs and te.priority != 0:
                raise invalid(f"table {tname} has no ternary/range/optional field: priority must be 0")
        return out

    def decode_table_entry(self, te: pb.TableEntry, update: int = INSERT) -> TableEntry:
        """``TableEntry`` of a table entry written with ``update`` (default: a full INSERT).

        DELETE decodes the match key only; MODIFY may leave the action out
        (nothing to change). A default entry (``is_default_action``) decodes
        to an empty match and its action, or no action: back to the program's.
        """
        t = self.table(te.table_id)
        tid, tname = t.preamble.id, t.preamble.name
        if te.is_const:
            raise invalid("is_const must be false in a write")
        if te.HasField("time_since_last_hit"):
            raise invalid("time_since_last_hit must not be set in a write")
        if te.idle_timeout_ns:
            raise invalid(f"table {tname} does not support idle timeout")
        for res in ("meter_config", "counter_data", "meter_counter_data"):
            if te.HasField(res):
                raise invalid(f"table {tname} has no direct meter or counter ({res} given)")
        if te.is_default_action:
            return TableEntry(tid, {}, action=self._default_action(t, te, update))
        entry = TableEntry(tid, self.decode_match(t, te), te.priority, metadata=te.metadata)
        if update == DELETE:
            return entry
        if not te.HasField("action"):
            if update == INSERT:
                raise invalid(f"table {tname}: INSERT needs an action")
            return entry
        self._table_action(t, te.action, entry)
        return entry

    def _table_action(self, t: p4info_pb2.Table, ta: pb.TableAction, entry: TableEntry) -> None:
        tname = t.preamble.name
        kind = ta.WhichOneof("type")
        if kind is None:
            raise invalid(f"table {tname}: the table action is empty")
        if kind == "action_profile_action_set":
            raise Rejected(code_pb2.UNIMPLEMENTED, "one-shot action selector programming is not supported")
        if t.implementation_id:
            prof = self.p4info.find_action_profile(t.implementation_id)
            if kind == "action":
                raise invalid(f"table {tname} is implemented by action profile {prof.preamble.name}: "
                              "use an action profile member or group, not a direct action")
            if kind == "action_profile_member_id":
                entry.member_id = ta.action_profile_member_id
            else:
                if not prof.with_selector:
                    raise invalid(f"{prof.preamble.name} has no selector: groups are not allowed")
                entry.group_id = ta.action_profile_group_id
        else:
            if kind != "action":
                raise invalid(f"table {tname} has no action profile: use a direct action")
            entry.action = self.decode_action(ta.action, self._refs[t.preamble.id], f"table {tname}")

    def _default_action(self, t: p4info_pb2.Table, te: pb.TableEntry, update: int) -> ActionCall | None:
        tid, tname = t.preamble.id, t.preamble.name
        if update != MODIFY:
            raise invalid(f"table {tname}: the default entry can only be modified")
        if len(te.match) or te.priority:
            raise invalid(f"table {tname}: the default entry has no match and no priority")
        if t.const_default_action_id:
            raise Rejected(code_pb2.PERMISSION_DENIED, f"table {tname} has a const default action")
        if t.implementation_id:
            raise invalid(f"table {tname}: the default action of an indirect table cannot be set")
        if not te.HasField("action"):
            return None
        if te.action.WhichOneof("type") != "action":
            raise invalid(f"table {tname}: the default entry needs a direct action")
        return self.decode_action(te.action.action, self._refs[tid], f"table {tname}", default=True)

    def decode_member(self, m: pb.ActionProfileMember, update: int = INSERT) -> ActionCall | None:
        """The action of an action profile member (DELETE: None, the key only is checked)."""
        prof = self.profile(m.action_profile_id)
        pname = prof.preamble.name
        if m.member_id == 0:
            raise invalid(f"{pname}: member id 0 is not valid")
        if update == DELETE:
            return None
        if not m.HasField("action"):
            raise invalid(f"{pname}: member {m.member_id} needs an action")
        return self.decode_action(m.action, self._profile_refs[prof.preamble.id], f"the tables of {pname}")

    def decode_group(self, g: pb.ActionProfileGroup, update: int = INSERT,
                     members: Container[int] | None = None) -> ActionProfileGroup:
        """An action profile group (DELETE: the key only is checked; no members).

        ``members``: the target's member ids; a group listing another is
        NOT_FOUND, checked in list order with the rest. Whether the group
        fits is the target's to check.
        """
        prof = self.profile(g.action_profile_id)
        pname = prof.preamble.name
        if not prof.with_selector:
            raise invalid(f"{pname} has no selector: groups are not allowed")
        if g.group_id == 0:
            raise invalid(f"{pname}: group id 0 is not valid")
        if update == DELETE:
            return ActionProfileGroup(g.group_id, [], g.max_size)
        if g.max_size < 0:
            raise invalid(f"{pname}: max_size must not be negative")
        if prof.max_group_size and g.max_size > prof.max_group_size:
            raise invalid(f"{pname}: max_size {g.max_size} exceeds max_group_size {prof.max_group_size}")
        max_weight = prof.sum_of_members.max_member_weight \
            if prof.WhichOneof("selector_size_semantics") == "sum_of_members" else 0
        listed: list[tuple[int, int]] = []
        seen: set[int] = set()
        for mem in g.members:
            if mem.WhichOneof("watch_kind") is not None:
                raise Rejected(code_pb2.UNIMPLEMENTED, f"{pname}: watch ports are not supported")
            if mem.member_id in seen:
                raise invalid(f"{pname}: member {mem.member_id} listed twice in group {g.group_id} (use weights)")
            if mem.weight <= 0:
                raise invalid(f"{pname}: member {mem.member_id} weight must be > 0")
            if max_weight and mem.weight > max_weight:
                raise invalid(f"{pname}: member {mem.member_id} weight exceeds max_member_weight")
            if members is not None and mem.member_id not in members:
                raise Rejected(code_pb2.NOT_FOUND, f"{pname}: no member {mem.member_id}")
            seen.add(mem.member_id)
            listed.append((mem.member_id, mem.weight))
        return ActionProfileGroup(g.group_id, listed, g.max_size)

    def decode_counter_entry(self, ce: pb.CounterEntry, update: int = MODIFY
                             ) -> tuple[int, Sequence[int], tuple[int, int] | None]:
        """``(counter_id, indexes, (packets, bytes) or None)`` of a counter write."""
        if update != MODIFY:
            raise invalid("counter entries can only be modified")
        c = self.counter(ce.counter_id)
        indexes = [self.counter_index(c, ce.index.index)] if ce.HasField("index") else range(c.size)
        data = (ce.data.packet_count, ce.data.byte_count) if ce.HasField("data") else None
        return c.preamble.id, indexes, data

    @staticmethod
    def clone_session_id(entry: pb.PacketReplicationEngineEntry) -> int:
        """The key of a PRE entry: a clone session id (fabric.p4 uses no multicast groups)."""
        kind = entry.WhichOneof("type")
        if kind != "clone_session_entry":
            raise Rejected(code_pb2.UNIMPLEMENTED,
                           f"{kind or 'an empty PRE entry'}: fabric.p4 uses clone sessions only")
        sid = entry.clone_session_entry.session_id
        if not 0 < sid <= MAX_SESSION_ID:
            raise invalid(f"clone session id {sid} is outside 1..{MAX_SESSION_ID}")
        return sid

    def decode_clone_session(self, entry: pb.PacketReplicationEngineEntry) -> pb.CloneSessionEntry:
        """The clone session of a PRE entry (a copy), its key and replicas checked."""
        self.clone_session_id(entry)
        cs = entry.clone_session_entry
        for r in cs.replicas:
            port = r.egress_port or int.from_bytes(r.port, "big")
            if not 0 < port < PORT_LIMIT:
                raise invalid(f"clone session {cs.session_id}: replica port {port} is not a port")
        copy = pb.CloneSessionEntry()
        copy.CopyFrom(cs)
        return copy

    def decode_packet_out(self, pkt: pb.PacketOut) -> dict[str, int]:
        """``{field name: value}`` of a packet-out; every metadata field is required."""
        spec = self._packet_out
        values: dict[str, int] = {}
        for md in pkt.metadata:
            field = spec.get(md.metadata_id)
            if field is None:
                raise invalid(f"unknown packet_out metadata id {md.metadata_id}")
            _, name, bitwidth = field
            if name in values:
                raise invalid(f"packet_out metadata {name} given twice")
            try:
                values[name] = check_bytestring(md.value, bitwidth)
            except ValueError as e:
                raise invalid(f"packet_out metadata {name}: {e}") from None
        if len(values) != len(spec):
            missing = [name for _, name, _ in spec.values() if name not in values]
            raise invalid(f"packet_out metadata missing: {', '.join(missing)}")
        return values
