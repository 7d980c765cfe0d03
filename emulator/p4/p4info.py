"""The P4Info contract: what fabric.p4 has, by name and id, and whether a P4Info matches it.

``P4Info.load()`` reads ``p4src/fabric.p4info.txtpb`` (protobuf text format,
every id pinned in ``fabric.p4``). Lookups take a name, an alias or an id;
``differences()`` says what a target could not realize of another P4Info.
Encoding and decoding P4Runtime entities against it is the codec's
(``emulator.p4.codec``, ``P4Info.codec``); the entity builders the controller
calls on a ``P4Info`` (``table_entry``, ``action_profile_member``,
``action_profile_group``) are the codec's.
"""
from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from emulator.p4.codec import Codec
from emulator.p4.names import (  # noqa: F401 (re-exported: the names users import with P4Info)
    PRIORITY_MATCH_TYPES, MatchType, P4InfoError, NamedIndex, by_id_or_name,
)

if TYPE_CHECKING:
    from p4.v1 import p4runtime_pb2 as pb

    from emulator.p4.entities import ActionCall

REPO_ROOT = Path(__file__).parents[2]
DEFAULT_P4INFO = REPO_ROOT / "p4src" / "fabric.p4info.txtpb"
IB_P4INFO = REPO_ROOT / "p4src" / "ib.p4info.txtpb"        # p4src/ib.p4's (InfiniBand)
# Clone session of port p for the pause frames fabric.p4 makes on BMv2:
# PFC_SESSION_BASE + p (p4src/fabric.p4 #defines it; p4.build checks they agree).
PFC_SESSION_BASE = 512


class P4Info:
    """Lookups, conversions and builders over one ``p4.config.v1.P4Info``."""

    def __init__(self, proto: p4info_pb2.P4Info):
        self.proto = proto
        self._tables = NamedIndex("table", proto.tables)
        self._actions = NamedIndex("action", proto.actions)
        self._profiles = NamedIndex("action profile", proto.action_profiles)
        self._counters = NamedIndex("counter", proto.counters)
        self._packet_meta = NamedIndex("controller packet metadata", proto.controller_packet_metadata)
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
        return by_id_or_name("match field", t.match_fields, field, f"table {t.preamble.name}")

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
        return by_id_or_name("parameter", a.params, param, f"action {a.preamble.name}")

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
        return by_id_or_name("metadata field", cpm.metadata, field, cpm.preamble.name)

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

    # ------------------------------------------------------------ codec

    @cached_property
    def codec(self) -> "Codec":
        """The entity codec of this P4Info (built once, on first use)."""
        return Codec(self)

    # The codec's builders the controller (controller.py, qos.py) and the
    # tests call on the P4Info they hold.
    def table_entry(self, *args: Any, **kwargs: Any) -> "pb.TableEntry":
        """``Codec.table_entry``."""
        return self.codec.table_entry(*args, **kwargs)

    def action_profile_member(self, *args: Any, **kwargs: Any) -> "pb.ActionProfileMember":
        """``Codec.action_profile_member``."""
        return self.codec.action_profile_member(*args, **kwargs)

    def action_profile_group(self, *args: Any, **kwargs: Any) -> "pb.ActionProfileGroup":
        """``Codec.action_profile_group``."""
        return self.codec.action_profile_group(*args, **kwargs)

    def decode_action(self, action: "pb.Action") -> "ActionCall":
        """``Codec.decode_action`` (no table context)."""
        return self.codec.decode_action(action)

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
