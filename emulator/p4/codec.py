"""The P4Runtime entity codec of one P4Info, shared by the controller and the target.

The controller builds messages from names and human values (``table_entry``,
``action_profile_member``, ``action_profile_group``, ``counter_entry``,
``clone_session``, ``packet_out``). The embedded target decodes what it
receives into ``emulator.p4.entities`` values, validating it as a P4Runtime
server must (``decode_*``), and encodes what it stores back for Read and
packet-in (``encode_*``, ``packet_in``). One codec on both sides, so what the
client sends and what the target accepts cannot drift apart.

    codec = P4Info.load().codec
    te = codec.table_entry("ipv4_lpm", {"ipv4_dst": "10.0.1.0/24"}, member_id=3)
    entry = codec.decode_table_entry(te)          # entities.TableEntry
    assert codec.encode_table_entry(entry) == te

Match values given to ``table_entry(match={...})``, per the field's match type
(values: see ``emulator.p4.values``): exact -> value; lpm -> (value, prefix_len)
or "10.0.1.0/24"; ternary -> (value, mask); range -> (low, high); optional -> value.
"Don't care" matches (lpm prefix 0, ternary mask 0, full range, ``None``) are
omitted from the message, as P4Runtime requires.

The codec is one class in parts, one module each: ``EntityBuilders``
(``emulator.p4.builders``: the controller's builders and readers),
``EntityDecoders`` (``emulator.p4.decoders``: the target's validating
decoders, and which ``Rejected`` codes they answer with) and
``EntityEncoders`` (``emulator.p4.encoders``: the target's encoders). Here:
``Codec``, which puts them together and builds, once per P4Info, the indexes
they read.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from p4.config.v1 import p4info_pb2

from emulator.p4.builders import EntityBuilders
from emulator.p4.decoders import EntityDecoders
from emulator.p4.encoders import EntityEncoders

if TYPE_CHECKING:  # the codec is built on a P4Info's lookups; p4info.py builds it
    from emulator.p4.p4info import P4Info


class Codec(EntityBuilders, EntityDecoders, EntityEncoders):
    """Builders, validating decoders and encoders of the entities of one ``P4Info``."""

    def __init__(self, p4info: "P4Info"):
        self.p4info = p4info
        proto = p4info.proto
        # Per table / action: the indexes every decode needs.
        self._fields = {t.preamble.id: p4info.match_fields(t.preamble.id) for t in proto.tables}
        self._refs = {t.preamble.id: p4info.action_refs(t.preamble.id) for t in proto.tables}
        self._params = {a.preamble.id: p4info.action_params(a.preamble.id) for a in proto.actions}
        self._profile_refs: dict[int, dict[int, p4info_pb2.ActionRef]] = {}
        for prof in proto.action_profiles:
            refs: dict[int, p4info_pb2.ActionRef] = {}
            for tid in prof.table_ids:
                refs.update(self._refs[tid])
            self._profile_refs[prof.preamble.id] = refs
        # Packet I/O, per packet: plain (id, name, bitwidth) tuples, not protobuf attribute reads.
        pkt = {c.preamble.name: [(m.id, m.name, m.bitwidth) for m in c.metadata]
               for c in proto.controller_packet_metadata}
        self._packet_out = {f[0]: f for f in pkt.get("packet_out", ())}
        self._packet_in = pkt.get("packet_in", [])
        self._metadata_names = {kind: {mid: name for mid, name, _ in fields} for kind, fields in pkt.items()}
