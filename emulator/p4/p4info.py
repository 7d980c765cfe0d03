"""The P4Info contract: name/id lookups, P4Runtime bytestrings, entity builders.

``P4Info.load()`` reads ``p4src/fabric.p4info.txtpb`` (protobuf text format,
every id pinned in ``fabric.p4``). The controller uses the builders to make
P4Runtime messages from names and human values; the embedded target's
P4Runtime server uses the lookups and the conversions between P4Runtime
``TableEntry`` messages and the decoded form kept in
``emulator.dataplane.state``.

Values, wherever a builder takes one: an ``int``, an IPv4/IPv6 address
(``"10.0.1.0"``), a MAC address (``"02:00:00:00:00:01"``), a hex or decimal
string (``"0x800"``, ``"17"``) or a big-endian ``bytes``. Bytestrings on the
wire are canonical (P4Runtime spec "Bytestrings"): the shortest big-endian
string that holds the value, at least one byte.

Match values given to ``table_entry(match={...})``, per the field's match type:

    exact    -> value
    lpm      -> (value, prefix_len)  or "10.0.1.0/24"
    ternary  -> (value, mask)
    range    -> (low, high)
    optional -> value

"Don't care" matches (lpm prefix 0, ternary mask 0, full range, ``None``)
are omitted from the message, as P4Runtime requires.
"""
from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any, Iterable, Mapping

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from emulator.dataplane import state as st

REPO_ROOT = Path(__file__).parents[2]
DEFAULT_P4INFO = REPO_ROOT / "p4src" / "fabric.p4info.txtpb"

MatchType = p4info_pb2.MatchField.MatchType
_MATCH_KIND = {
    MatchType.EXACT: "exact",
    MatchType.LPM: "lpm",
    MatchType.TERNARY: "ternary",
    MatchType.RANGE: "range",
    MatchType.OPTIONAL: "optional",
}
# Match types for which a table needs entry priorities (P4Runtime spec 9.1).
PRIORITY_MATCH_TYPES = frozenset({MatchType.TERNARY, MatchType.RANGE, MatchType.OPTIONAL})


class P4InfoError(KeyError):
    """A name or id that the P4Info does not have."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


# ---------------------------------------------------------------- bytestrings

def encode(value: Any, bitwidth: int) -> bytes:
    """Canonical P4Runtime bytestring of an unsigned ``bit<bitwidth>`` value.

    The shortest big-endian string, at least one byte; ``ValueError`` if the
    value is negative or does not fit ``bitwidth`` bits.
    """
    v = to_int(value)
    if v < 0:
        raise ValueError(f"{value!r} is negative; bit<{bitwidth}> values are unsigned")
    if v.bit_length() > bitwidth:
        raise ValueError(f"{value!r} does not fit in {bitwidth} bits")
    return v.to_bytes(max(1, (v.bit_length() + 7) // 8), "big")


def decode(data: bytes) -> int:
    """Integer value of a (big-endian, unsigned) P4Runtime bytestring."""
    return int.from_bytes(data, "big")


def check_bytestring(data: bytes, bitwidth: int) -> int:
    """Value of a received bytestring, checked as a P4Runtime receiver must.

    Any length is accepted as long as the value fits ``bitwidth`` bits (leading
    zero bytes are allowed); an empty string or a value that is too wide raises
    ``ValueError`` (P4Runtime: ``OUT_OF_RANGE``).
    """
    if len(data) == 0:
        raise ValueError("empty bytestring")
    v = int.from_bytes(data, "big")
    if v.bit_length() > bitwidth:
        raise ValueError(f"value 0x{data.hex()} does not fit in {bitwidth} bits")
    return v


def to_int(value: Any) -> int:
    """An integer from an int, bytes, an IP or MAC address, or a hex/decimal string."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, (bytes, bytearray)):
        return int.from_bytes(value, "big")
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return int(value)
    if isinstance(value, str):
        s = value.strip()
        try:
            if ":" in s or "-" in s:
                parts = s.replace("-", ":").split(":")
                if len(parts) == 6 and all(1 <= len(p) <= 2 for p in parts):
                    return int("".join(p.zfill(2) for p in parts), 16)
                return int(ipaddress.IPv6Address(s))
            if s.count(".") == 3:
                return int(ipaddress.IPv4Address(s))
            return int(s, 0)
        except ValueError:
            pass
        raise ValueError(f"cannot read {value!r} as a number, an IP or a MAC address")
    raise TypeError(f"cannot use {type(value).__name__} {value!r} as a P4 value")


def _election(election_id: Any) -> p4runtime_pb2.Uint128:
    if isinstance(election_id, p4runtime_pb2.Uint128):
        return election_id
    if isinstance(election_id, tuple):
        high, low = election_id
    else:
        high, low = int(election_id) >> 64, int(election_id) & (2**64 - 1)
    return p4runtime_pb2.Uint128(high=high, low=low)


def uint128(election_id: Any) -> p4runtime_pb2.Uint128:
    """``Uint128`` from ``(high, low)``, an int, or a ``Uint128``."""
    return _election(election_id)


def uint128_value(msg: p4runtime_pb2.Uint128) -> int:
    return (msg.high << 64) | msg.low


# ---------------------------------------------------------------- P4Info

class _Named:
    """Index of one P4Info section by id, full name and alias."""

    def __init__(self, kind: str, items: Iterable[Any]):
        self.kind = kind
        self.by_id: dict[int, Any] = {}
        self.by_name: dict[str, Any] = {}
        for item in items:
            pre = item.preamble
            self.by_id[pre.id] = item
            self.by_name[pre.name] = item
        for item in self.by_id.values():  # aliases never shadow full names
            if item.preamble.alias:
                self.by_name.setdefault(item.preamble.alias, item)

    def get(self, key: Any) -> Any:
        if isinstance(key, int):
            found = self.by_id.get(key)
        else:
            found = self.by_name.get(key)
        if found is None:
            raise P4InfoError(f"no {self.kind} {key!r} in the P4Info")
        return found

    def find(self, key: Any) -> Any | None:
        return self.by_id.get(key) if isinstance(key, int) else self.by_name.get(key)


def _by_id_or_name(kind: str, items: Iterable[Any], key: Any, owner: str) -> Any:
    for item in items:
        if (isinstance(key, int) and item.id == key) or item.name == key:
            return item
    raise P4InfoError(f"{owner} has no {kind} {key!r}")


class P4Info:
    """Lookups, conversions and builders over one ``p4.config.v1.P4Info``."""

    def __init__(self, proto: p4info_pb2.P4Info):
        self.proto = proto
        self._tables = _Named("table", proto.tables)
        self._actions = _Named("action", proto.actions)
        self._profiles = _Named("action profile", proto.action_profiles)
        self._counters = _Named("counter", proto.counters)
        self._packet_meta = _Named("controller packet metadata", proto.controller_packet_metadata)
        # Per table: field_id -> MatchField, action_id -> ActionRef.
        self._fields = {t.preamble.id: {f.id: f for f in t.match_fields} for t in proto.tables}
        self._refs = {t.preamble.id: {r.id: r for r in t.action_refs} for t in proto.tables}
        self._params = {a.preamble.id: {p.id: p for p in a.params} for a in proto.actions}

    # ------------------------------------------------------------ loading

    @classmethod
    def load(cls, path: str | Path | None = None) -> "P4Info":
        """Load a P4Info in protobuf text format (default: the committed contract)."""
        path = Path(path) if path is not None else DEFAULT_P4INFO
        proto = p4info_pb2.P4Info()
        text_format.Parse(path.read_text(), proto)
        return cls(proto)

    @classmethod
    def coerce(cls, p4info: "P4Info | p4info_pb2.P4Info | str | Path | None") -> "P4Info":
        """A ``P4Info`` from a helper, a proto, a text-format path, or None (default)."""
        if isinstance(p4info, P4Info):
            return p4info
        if isinstance(p4info, p4info_pb2.P4Info):
            return cls(p4info)
        return cls.load(p4info)

    def to_text(self) -> str:
        return text_format.MessageToString(self.proto)

    # ------------------------------------------------------------ lookups

    def table(self, table: str | int) -> p4info_pb2.Table:
        return self._tables.get(table)

    def table_id(self, table: str | int) -> int:
        return self.table(table).preamble.id

    def match_field(self, table: str | int, field: str | int) -> p4info_pb2.MatchField:
        t = self.table(table)
        return _by_id_or_name("match field", t.match_fields, field, f"table {t.preamble.name}")

    def match_field_id(self, table: str | int, field: str | int) -> int:
        return self.match_field(table, field).id

    def match_fields(self, table: str | int) -> dict[int, p4info_pb2.MatchField]:
        """field_id -> MatchField of a table."""
        return self._fields[self.table_id(table)]

    def action(self, action: str | int) -> p4info_pb2.Action:
        return self._actions.get(action)

    def action_id(self, action: str | int) -> int:
        return self.action(action).preamble.id

    def action_param(self, action: str | int, param: str | int) -> p4info_pb2.Action.Param:
        a = self.action(action)
        return _by_id_or_name("parameter", a.params, param, f"action {a.preamble.name}")

    def param_id(self, action: str | int, param: str | int) -> int:
        return self.action_param(action, param).id

    def action_params(self, action: str | int) -> dict[int, p4info_pb2.Action.Param]:
        """param_id -> Param of an action."""
        return self._params[self.action_id(action)]

    def action_refs(self, table: str | int) -> dict[int, p4info_pb2.ActionRef]:
        """action_id -> ActionRef (with its scope) of a table."""
        return self._refs[self.table_id(table)]

    def action_profile(self, profile: str | int) -> p4info_pb2.ActionProfile:
        return self._profiles.get(profile)

    def action_profile_id(self, profile: str | int) -> int:
        return self.action_profile(profile).preamble.id

    def counter(self, counter: str | int) -> p4info_pb2.Counter:
        return self._counters.get(counter)

    def counter_id(self, counter: str | int) -> int:
        return self.counter(counter).preamble.id

    def counter_size(self, counter: str | int) -> int:
        return self.counter(counter).size

    def packet_metadata(self, kind: str | int, field: str | int) -> p4info_pb2.ControllerPacketMetadata.Metadata:
        """Metadata field of ``"packet_in"`` or ``"packet_out"``."""
        cpm = self._packet_meta.get(kind)
        return _by_id_or_name("metadata field", cpm.metadata, field, cpm.preamble.name)

    def packet_metadata_id(self, kind: str | int, field: str | int) -> int:
        return self.packet_metadata(kind, field).id

    def controller_packet_metadata(self, kind: str | int) -> p4info_pb2.ControllerPacketMetadata:
        return self._packet_meta.get(kind)

    def find_table(self, table_id: int) -> p4info_pb2.Table | None:
        return self._tables.find(table_id)

    def find_action(self, action_id: int) -> p4info_pb2.Action | None:
        return self._actions.find(action_id)

    def find_action_profile(self, profile_id: int) -> p4info_pb2.ActionProfile | None:
        return self._profiles.find(profile_id)

    def find_counter(self, counter_id: int) -> p4info_pb2.Counter | None:
        return self._counters.find(counter_id)

    def name(self, p4_id: int) -> str:
        """Full name of any table/action/profile/counter/packet-metadata id."""
        for index in (self._tables, self._actions, self._profiles, self._counters, self._packet_meta):
            item = index.find(p4_id)
            if item is not None:
                return item.preamble.name
        raise P4InfoError(f"no object with id {p4_id} in the P4Info")

    @property
    def table_ids(self) -> list[int]:
        return [t.preamble.id for t in self.proto.tables]

    @property
    def action_profile_ids(self) -> list[int]:
        return [p.preamble.id for p in self.proto.action_profiles]

    @property
    def counter_sizes(self) -> dict[int, int]:
        return {c.preamble.id: c.size for c in self.proto.counters}

    def needs_priority(self, table: str | int) -> bool:
        return any(f.match_type in PRIORITY_MATCH_TYPES for f in self.table(table).match_fields)

    # ------------------------------------------------------------ builders

    def action_msg(self, action: str | int, params: Mapping[str | int, Any] | None = None) -> p4runtime_pb2.Action:
        """``p4.v1.Action`` from an action name and ``{param: value}``."""
        a = self.action(action)
        params = dict(params or {})
        msg = p4runtime_pb2.Action(action_id=a.preamble.id)
        for p in a.params:
            key = p.name if p.name in params else p.id if p.id in params else None
            if key is None:
                raise ValueError(f"action {a.preamble.name}: missing parameter {p.name!r}")
            msg.params.add(param_id=p.id, value=encode(params.pop(key), p.bitwidth))
        if params:
            raise P4InfoError(f"action {a.preamble.name} has no parameter(s) {sorted(map(str, params))}")
        return msg

    def _field_match(self, table: p4info_pb2.Table, field: str | int, value: Any) -> p4runtime_pb2.FieldMatch | None:
        mf = _by_id_or_name("match field", table.match_fields, field, f"table {table.preamble.name}")
        fm = p4runtime_pb2.FieldMatch(field_id=mf.id)
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
    ) -> p4runtime_pb2.TableEntry:
        """``p4.v1.TableEntry``; ``action`` is a name or ``(name, {param: value})``.

        For DELETE (and Read filters) the action may be left out.
        """
        t = self.table(table)
        te = p4runtime_pb2.TableEntry(table_id=t.preamble.id, priority=priority,
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
                              params: Mapping[str | int, Any] | None = None) -> p4runtime_pb2.ActionProfileMember:
        """Member bound to ``action(params)``; the action may be left out for DELETE."""
        msg = p4runtime_pb2.ActionProfileMember(
            action_profile_id=self.action_profile_id(profile), member_id=member_id)
        if action is not None:
            msg.action.CopyFrom(self.action_msg(action, params))
        return msg

    def action_profile_group(self, profile: str | int, group_id: int,
                             members: Iterable[int | tuple[int, int]] = (),
                             max_size: int | None = None) -> p4runtime_pb2.ActionProfileGroup:
        """Group of member ids (or ``(member_id, weight)``; weight defaults to 1).

        ``max_size`` defaults to the profile's ``max_group_size``.
        """
        prof = self.action_profile(profile)
        msg = p4runtime_pb2.ActionProfileGroup(
            action_profile_id=prof.preamble.id, group_id=group_id,
            max_size=prof.max_group_size if max_size is None else max_size)
        for m in members:
            mid, weight = (m, 1) if isinstance(m, int) else m
            msg.members.add(member_id=mid, weight=weight)
        return msg

    def counter_entry(self, counter: str | int, index: int | None = None,
                      data: tuple[int, int] | None = None) -> p4runtime_pb2.CounterEntry:
        """Counter cell (``index=None``: all cells); ``data=(packets, bytes)`` for MODIFY."""
        msg = p4runtime_pb2.CounterEntry(counter_id=self.counter_id(counter))
        if index is not None:
            msg.index.index = index
        if data is not None:
            msg.data.packet_count, msg.data.byte_count = data
        return msg

    def packet_out(self, payload: bytes, egress_port: int, **metadata: Any) -> p4runtime_pb2.PacketOut:
        """PacketOut with every ``packet_out`` metadata field (others default to 0)."""
        cpm = self.controller_packet_metadata("packet_out")
        values = dict(metadata, egress_port=egress_port)
        msg = p4runtime_pb2.PacketOut(payload=bytes(payload))
        for m in cpm.metadata:
            msg.metadata.add(metadata_id=m.id, value=encode(values.pop(m.name, 0), m.bitwidth))
        if values:
            raise P4InfoError(f"packet_out has no metadata field(s) {sorted(values)}")
        return msg

    def packet_in(self, payload: bytes, ingress_port: int, **metadata: Any) -> p4runtime_pb2.PacketIn:
        """PacketIn with every ``packet_in`` metadata field (others default to 0)."""
        cpm = self.controller_packet_metadata("packet_in")
        values = dict(metadata, ingress_port=ingress_port)
        msg = p4runtime_pb2.PacketIn(payload=bytes(payload))
        for m in cpm.metadata:
            msg.metadata.add(metadata_id=m.id, value=encode(values.pop(m.name, 0), m.bitwidth))
        if values:
            raise P4InfoError(f"packet_in has no metadata field(s) {sorted(values)}")
        return msg

    def packet_metadata_values(self, kind: str, metadata: Iterable[p4runtime_pb2.PacketMetadata]) -> dict[str, int]:
        """``{field name: value}`` of a PacketIn/PacketOut's metadata."""
        cpm = self.controller_packet_metadata(kind)
        names = {m.id: m.name for m in cpm.metadata}
        return {names.get(m.metadata_id, str(m.metadata_id)): decode(m.value) for m in metadata}

    # ------------------------------------------------------------ state form

    def decode_action(self, action: p4runtime_pb2.Action) -> st.ActionCall:
        """``state.ActionCall`` of a (valid) ``p4.v1.Action``."""
        return st.ActionCall(action.action_id,
                             tuple(sorted((p.param_id, decode(p.value)) for p in action.params)))

    def encode_action(self, call: st.ActionCall) -> p4runtime_pb2.Action:
        params = self._params.get(call.action_id, {})
        msg = p4runtime_pb2.Action(action_id=call.action_id)
        for pid, value in call.params:
            bw = params[pid].bitwidth if pid in params else max(1, value.bit_length())
            msg.params.add(param_id=pid, value=encode(value, bw))
        return msg

    def decode_field_match(self, table_id: int, fm: p4runtime_pb2.FieldMatch) -> st.FieldMatch:
        """``state.FieldMatch`` of a (valid) ``p4.v1.FieldMatch``; optional -> exact."""
        kind = fm.WhichOneof("field_match_type")
        if kind == "exact":
            return ("exact", decode(fm.exact.value))
        if kind == "optional":
            return ("exact", decode(fm.optional.value))
        if kind == "lpm":
            return ("lpm", decode(fm.lpm.value), fm.lpm.prefix_len)
        if kind == "ternary":
            return ("ternary", decode(fm.ternary.value), decode(fm.ternary.mask))
        if kind == "range":
            return ("range", decode(fm.range.low), decode(fm.range.high))
        raise ValueError(f"table {table_id}: field {fm.field_id} has no supported match")

    def encode_field_match(self, table_id: int, field_id: int, m: st.FieldMatch) -> p4runtime_pb2.FieldMatch:
        mf = self._fields[table_id][field_id]
        bw = mf.bitwidth
        fm = p4runtime_pb2.FieldMatch(field_id=field_id)
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

    def decode_table_entry(self, te: p4runtime_pb2.TableEntry) -> st.TableEntry:
        """``state.TableEntry`` of a ``p4.v1.TableEntry`` (assumed valid: the server validates)."""
        entry = st.TableEntry(
            table_id=te.table_id,
            match={fm.field_id: self.decode_field_match(te.table_id, fm) for fm in te.match},
            priority=te.priority,
            metadata=te.metadata,
        )
        kind = te.action.WhichOneof("type")
        if kind == "action":
            entry.action = self.decode_action(te.action.action)
        elif kind == "action_profile_member_id":
            entry.member_id = te.action.action_profile_member_id
        elif kind == "action_profile_group_id":
            entry.group_id = te.action.action_profile_group_id
        return entry

    def encode_table_entry(self, entry: st.TableEntry) -> p4runtime_pb2.TableEntry:
        """``p4.v1.TableEntry`` (canonical bytestrings) of a ``state.TableEntry``."""
        te = p4runtime_pb2.TableEntry(table_id=entry.table_id, priority=entry.priority,
                                      metadata=entry.metadata)
        for fid in sorted(entry.match):
            te.match.append(self.encode_field_match(entry.table_id, fid, entry.match[fid]))
        if entry.action is not None:
            te.action.action.CopyFrom(self.encode_action(entry.action))
        elif entry.member_id is not None:
            te.action.action_profile_member_id = entry.member_id
        elif entry.group_id is not None:
            te.action.action_profile_group_id = entry.group_id
        return te

    def describe_table_entry(self, te: p4runtime_pb2.TableEntry) -> dict:
        """Readable form: ``{"table", "match": {field: ...}, "priority", "action"|"member_id"|"group_id"}``.

        Match values are ints in the same shapes ``table_entry`` accepts.
        """
        t = self.table(te.table_id)
        out: dict[str, Any] = {"table": t.preamble.alias or t.preamble.name, "match": {}, "priority": te.priority}
        for fm in te.match:
            mf = self._fields[te.table_id].get(fm.field_id)
            m = self.decode_field_match(te.table_id, fm)
            out["match"][mf.name if mf else fm.field_id] = m[1] if m[0] == "exact" else tuple(m[1:])
        kind = te.action.WhichOneof("type")
        if kind == "action":
            a = self.action(te.action.action.action_id)
            names = {p.id: p.name for p in a.params}
            out["action"] = (a.preamble.alias or a.preamble.name,
                             {names.get(p.param_id, p.param_id): decode(p.value) for p in te.action.action.params})
        elif kind == "action_profile_member_id":
            out["member_id"] = te.action.action_profile_member_id
        elif kind == "action_profile_group_id":
            out["group_id"] = te.action.action_profile_group_id
        if te.is_default_action:
            out["is_default"] = True
        return out

    # ------------------------------------------------------------ contract check

    def differences(self, other: "P4Info | p4info_pb2.P4Info") -> list[str]:
        """What differs between this P4Info and ``other`` in what a target realizes.

        Compared: tables (name, match fields, action refs and scopes, const
        default action, implementation, size), actions (name, params),
        action profiles, counters, controller packet metadata (ids, names,
        bitwidths), and the absence of objects this P4Info does not have
        (direct counters, meters, registers, digests, value sets, externs).
        Annotations, docs and aliases are not compared. Empty list: same.
        """
        o = other.proto if isinstance(other, P4Info) else other
        mine, theirs = _realized(self.proto), _realized(o)
        diffs: list[str] = []
        for section in mine:
            a, b = mine[section], theirs[section]
            for oid in sorted(set(a) | set(b)):
                if oid not in b:
                    diffs.append(f"{section} {a[oid]['name']} (id {oid}) is missing")
                elif oid not in a:
                    diffs.append(f"unexpected {section} {b[oid]['name']} (id {oid})")
                else:
                    for key in a[oid]:
                        if a[oid][key] != b[oid][key]:
                            diffs.append(f"{section} {a[oid]['name']} (id {oid}): {key} is "
                                         f"{_show(b[oid][key])}, expected {_show(a[oid][key])}")
        return diffs


def _show(v: Any) -> str:
    return repr(v) if not isinstance(v, tuple) else "[" + ", ".join(map(repr, v)) + "]"


def _realized(p: p4info_pb2.P4Info) -> dict[str, dict[int, dict[str, Any]]]:
    mt = p4info_pb2.MatchField.MatchType.Name
    scope = p4info_pb2.ActionRef.Scope.Name
    out: dict[str, dict[int, dict[str, Any]]] = {
        "table": {
            t.preamble.id: {
                "name": t.preamble.name,
                "match fields": tuple((f.id, f.name, f.bitwidth, mt(f.match_type)) for f in t.match_fields),
                "actions": tuple(sorted((r.id, scope(r.scope)) for r in t.action_refs)),
                "const default action": t.const_default_action_id,
                "implementation": t.implementation_id,
                "direct resources": tuple(sorted(t.direct_resource_ids)),
                "size": t.size,
                "const table": t.is_const_table,
                "idle timeout": t.idle_timeout_behavior,
            }
            for t in p.tables
        },
        "action": {
            a.preamble.id: {
                "name": a.preamble.name,
                "params": tuple((q.id, q.name, q.bitwidth) for q in a.params),
            }
            for a in p.actions
        },
        "action profile": {
            ap.preamble.id: {
                "name": ap.preamble.name,
                "tables": tuple(sorted(ap.table_ids)),
                "with selector": ap.with_selector,
                "size": ap.size,
                "max group size": ap.max_group_size,
                "size semantics": ap.WhichOneof("selector_size_semantics") or "sum_of_weights",
            }
            for ap in p.action_profiles
        },
        "counter": {
            c.preamble.id: {"name": c.preamble.name, "unit": p4info_pb2.CounterSpec.Unit.Name(c.spec.unit),
                            "size": c.size}
            for c in p.counters
        },
        "controller packet metadata": {
            c.preamble.id: {
                "name": c.preamble.name,
                "metadata": tuple((m.id, m.name, m.bitwidth) for m in c.metadata),
            }
            for c in p.controller_packet_metadata
        },
    }
    for section, items in (("direct counter", p.direct_counters), ("meter", p.meters),
                           ("direct meter", p.direct_meters), ("value set", p.value_sets),
                           ("register", p.registers), ("digest", p.digests)):
        out[section] = {i.preamble.id: {"name": i.preamble.name} for i in items}
    out["extern"] = {}
    for ext in p.externs:
        for inst in ext.instances:
            out["extern"][inst.preamble.id] = {"name": f"{ext.extern_type_name} {inst.preamble.name}"}
    return out
