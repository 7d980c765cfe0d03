"""Entity codec: scalar values, builders, encode -> decode round trips, rejections with their codes."""
import subprocess
import sys

import pytest
from google.rpc import code_pb2 as C
from p4.v1 import p4runtime_pb2 as pb

from emulator.p4.decoders import MAX_SESSION_ID
from emulator.p4.entities import ActionCall, ActionProfileGroup, TableEntry
from emulator.p4.p4info import P4Info, P4InfoError
from emulator.p4.rejected import Rejected
from emulator.p4.values import check_bytestring, decode, encode, to_int

I, M, D = pb.Update.INSERT, pb.Update.MODIFY, pb.Update.DELETE
NH1 = {"port": 1, "smac": "02:00:00:00:00:01", "dmac": "02:00:00:00:01:01"}


@pytest.fixture(scope="module")
def p4():
    return P4Info.load()


@pytest.fixture(scope="module")
def codec(p4):
    return p4.codec


def test_p4_package_does_not_import_the_target():
    code = ("import sys, emulator.p4.codec, emulator.p4.p4info, emulator.p4.build; "
            "sys.exit(any(m.startswith('emulator.dataplane') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ---------------------------------------------------------------- values

@pytest.mark.parametrize("value,bitwidth,expected", [
    (0, 9, b"\x00"), (1, 9, b"\x01"), (255, 9, b"\xff"), (256, 9, b"\x01\x00"), (511, 9, b"\x01\xff"),
    (99, 16, b"\x63"), (0x3064, 16, b"\x30\x64"),
    ("10.0.1.0", 32, b"\x0a\x00\x01\x00"), ("02:00:00:00:00:01", 48, b"\x02\x00\x00\x00\x00\x01"),
    ("0x800", 16, b"\x08\x00"),
])
def test_encode_is_canonical(value, bitwidth, expected):
    assert encode(value, bitwidth) == expected
    assert decode(expected) == to_int(value)


def test_encode_rejects_values_that_do_not_fit():
    with pytest.raises(ValueError):
        encode(512, 9)
    with pytest.raises(ValueError):
        encode(-1, 8)
    with pytest.raises(ValueError):
        to_int("not-an-address")


def test_check_bytestring_accepts_padding_rejects_overflow():
    assert check_bytestring(b"\x00\x63", 8) == 99      # non-canonical but valid
    assert check_bytestring(b"\x00\x00\x01\xff", 9) == 511
    for bad, bw in ((b"", 8), (b"\x01\x63", 8), (b"\x02\x00", 9), (b"\x10\x63", 12)):
        with pytest.raises(ValueError):
            check_bytestring(bad, bw)


def test_to_int_forms():
    assert to_int("10.0.1.2") == 0x0A000102
    assert to_int("aa:bb:cc:dd:ee:ff") == 0xAABBCCDDEEFF
    assert to_int(b"\x01\x00") == 256
    assert to_int("17") == 17


# ---------------------------------------------------------------- builders

def test_action_builder_checks_params(codec):
    a = codec.action_msg("set_nexthop", {"port": 1, "smac": "02:00:00:00:00:01", "dmac": 2})
    assert [(p.param_id, p.value) for p in a.params] == [(1, b"\x01"), (2, b"\x02\x00\x00\x00\x00\x01"), (3, b"\x02")]
    with pytest.raises(ValueError, match="missing parameter"):
        codec.action_msg("set_nexthop", {"port": 1})
    with pytest.raises(P4InfoError, match="no parameter"):
        codec.action_msg("drop", {"port": 1})
    with pytest.raises(ValueError):
        codec.action_msg("set_nexthop", {"port": 512, "smac": 0, "dmac": 0})


def test_profile_counter_packet_builders(codec):
    m = codec.action_profile_member("ecmp_selector", 5, "set_nexthop", {"port": 2, "smac": 1, "dmac": 2})
    assert (m.action_profile_id, m.member_id, m.action.action_id) == (0x11000001, 5, 0x01000002)
    g = codec.action_profile_group("ecmp_selector", 9, [5, (6, 3)])
    assert g.max_size == 64 and [(x.member_id, x.weight) for x in g.members] == [(5, 1), (6, 3)]
    c = codec.counter_entry("rx_port_counter", 4)
    assert c.counter_id == 0x12000001 and c.HasField("index") and c.index.index == 4
    assert not codec.counter_entry("rx_port_counter").HasField("index")
    po = codec.packet_out(b"abc", 300)
    assert po.payload == b"abc"
    assert [(x.metadata_id, x.value) for x in po.metadata] == [(1, b"\x01\x2c"), (2, b"\x00")]
    assert codec.packet_metadata("packet_out", po.metadata) == {"egress_port": 300, "_pad": 0}
    with pytest.raises(P4InfoError, match="no metadata field"):
        codec.packet_out(b"abc", 1, nope=1)


def test_p4info_builders_are_the_codecs(p4, codec):
    assert p4.table_entry("my_station", {"eth_dst": 1}, "NoAction") == \
        codec.table_entry("my_station", {"eth_dst": 1}, "NoAction")
    assert p4.action_profile_member("ecmp_selector", 1, "set_nexthop", NH1) == \
        codec.action_profile_member("ecmp_selector", 1, "set_nexthop", NH1)
    assert p4.action_profile_group("ecmp_selector", 2, [1]) == codec.action_profile_group("ecmp_selector", 2, [1])
    assert p4.decode_action(codec.action_msg("set_priority", {"priority": 3})) == \
        ActionCall(p4.action_id("set_priority"), ((1, 3),))


# ---------------------------------------------------------------- round trips

@pytest.mark.parametrize("build", [
    lambda c: c.table_entry("my_station", {"eth_dst": "02:00:00:00:01:00"}, "NoAction", metadata=b"m"),   # exact
    lambda c: c.table_entry("pfc_config", {"ig_port": 3, "priority": 3},
                            ("set_pfc_thresholds", {"xoff_bytes": 1, "xon_bytes": 2, "headroom_bytes": 3})),
    lambda c: c.table_entry("ipv4_lpm", {"ipv4_dst": "10.0.1.0/24"}, member_id=4),                       # lpm
    lambda c: c.table_entry("ipv4_lpm", {"ipv4_dst": "10.0.0.0/8"}, group_id=4),
    lambda c: c.table_entry("ipv4_lpm", {}, member_id=1),                                               # /0
    lambda c: c.table_entry("acl", {"ig_port": (3, 0x1FF), "ipv4_dst": ("10.0.0.0", "255.0.0.0")},       # ternary
                            "drop", priority=10, metadata=b"cookie"),
])
def test_table_entry_round_trip(codec, build):
    te = build(codec)
    entry = codec.decode_table_entry(te)
    assert isinstance(entry, TableEntry)
    assert codec.encode_table_entry(entry) == te


def test_table_entry_decoded_form(p4, codec):
    te = codec.table_entry("acl", {"ig_port": (3, 0x1FF), "ipv4_dst": ("10.0.0.0", "255.0.0.0")},
                           "drop", priority=10, metadata=b"cookie")
    assert codec.decode_table_entry(te) == TableEntry(
        table_id=0x02000003, match={1: ("ternary", 3, 0x1FF), 4: ("ternary", 0x0A000000, 0xFF000000)},
        priority=10, action=ActionCall(0x01000001, ()), metadata=b"cookie")
    lpm = codec.table_entry("ipv4_lpm", {"ipv4_dst": "10.0.1.0/24"}, group_id=4)
    assert codec.decode_table_entry(lpm).match == {1: ("lpm", 0x0A000100, 24)}
    assert codec.decode_table_entry(lpm).group_id == 4
    assert codec.describe_table_entry(lpm) == {"table": "ipv4_lpm", "match": {"ipv4_dst": (0x0A000100, 24)},
                                               "priority": 0, "group_id": 4}
    assert codec.describe_table_entry(te)["action"] == ("drop", {})
    # Non-canonical bytestrings decode to the same value; encoding is canonical again.
    padded = pb.TableEntry()
    padded.CopyFrom(te)
    padded.match[0].ternary.value = b"\x00\x00\x03"
    assert codec.encode_table_entry(codec.decode_table_entry(padded)) == te


def test_default_entry_round_trip(p4, codec):
    te = codec.table_entry("my_station", action="NoAction", is_default=True)
    entry = codec.decode_table_entry(te, M)
    assert entry.match == {} and entry.action == ActionCall(p4.action_id("NoAction"), ())
    assert codec.encode_default_entry(entry.table_id, entry.action) == te
    reset = codec.table_entry("my_station", is_default=True)
    assert codec.decode_table_entry(reset, M).action is None      # back to the program's default


def test_member_and_group_round_trip(p4, codec):
    pid = p4.action_profile_id("ecmp_selector")
    m = codec.action_profile_member("ecmp_selector", 5, "set_nexthop", NH1)
    call = codec.decode_member(m)
    assert call == ActionCall(p4.action_id("set_nexthop"), ((1, 1), (2, 0x020000000001), (3, 0x020000000101)))
    assert codec.encode_member(pid, 5, call) == m
    assert codec.decode_member(codec.action_profile_member("ecmp_selector", 5), D) is None
    g = codec.action_profile_group("ecmp_selector", 9, [5, (6, 3)])
    group = codec.decode_group(g)
    assert group == ActionProfileGroup(9, [(5, 1), (6, 3)], 64)
    assert codec.encode_group(pid, group) == g


def test_counter_round_trip(p4, codec):
    cid = p4.counter_id("rx_port_counter")
    ce = codec.counter_entry("rx_port_counter", 3, (7, 700))
    assert codec.decode_counter_entry(ce) == (cid, [3], (7, 700))
    assert codec.encode_counter_entry(cid, 3, 7, 700) == ce
    every = codec.decode_counter_entry(codec.counter_entry("rx_port_counter", data=(0, 0)))
    assert every[1] == range(256)


def test_clone_session_round_trip(codec):
    entry = codec.clone_session(600, [1, (2, 5)])
    cs = codec.decode_clone_session(entry)
    assert [(r.egress_port, r.instance) for r in cs.replicas] == [(1, 1), (2, 5)]
    assert pb.PacketReplicationEngineEntry(clone_session_entry=cs) == entry


def test_packet_io_round_trip(codec):
    po = codec.packet_out(b"\x01\x02", 300)
    assert codec.decode_packet_out(po) == {"egress_port": 300, "_pad": 0}
    pin = codec.packet_in(b"x", 7)
    assert isinstance(pin, pb.PacketIn) and pin.payload == b"x"
    assert codec.packet_metadata("packet_in", pin.metadata) == {"ingress_port": 7, "_pad": 0}


# ---------------------------------------------------------------- rejections

def rejected(fn, *args):
    with pytest.raises(Rejected) as e:
        fn(*args)
    assert isinstance(e.value.error(), pb.Error) and e.value.error().canonical_code == e.value.code
    return e.value.code, e.value.message


def test_bad_table_entries_rejected(p4, codec):
    te = codec.table_entry("my_station", {"eth_dst": 1}, "NoAction")
    cases = {
        "unknown table": (lambda t: setattr(t, "table_id", 0x02000099), C.INVALID_ARGUMENT, "unknown table id"),
        "49 bits in bit<48>": (lambda t: setattr(t.match[0].exact, "value", b"\x01" + b"\x00" * 6),
                               C.OUT_OF_RANGE, "does not fit in 48 bits"),
        "empty bytestring": (lambda t: setattr(t.match[0].exact, "value", b""), C.OUT_OF_RANGE, "empty"),
        "unknown field": (lambda t: setattr(t.match[0], "field_id", 9), C.INVALID_ARGUMENT, "unknown match field"),
        "priority on exact": (lambda t: setattr(t, "priority", 3), C.INVALID_ARGUMENT, "priority must be 0"),
        "unknown action": (lambda t: setattr(t.action.action, "action_id", 0x01000099), C.INVALID_ARGUMENT,
                           "unknown action id"),
        "action not in table": (lambda t: setattr(t.action.action, "action_id", p4.action_id("drop")),
                                C.INVALID_ARGUMENT, "not an action of table"),
        "member on a direct table": (lambda t: setattr(t.action, "action_profile_member_id", 1),
                                     C.INVALID_ARGUMENT, "use a direct action"),
        "is_const": (lambda t: setattr(t, "is_const", True), C.INVALID_ARGUMENT, "is_const"),
    }
    for name, (mutate, code, text) in cases.items():
        bad = pb.TableEntry()
        bad.CopyFrom(te)
        mutate(bad)
        got_code, message = rejected(codec.decode_table_entry, bad)
        assert (got_code, text in message) == (code, True), (name, message)
    assert rejected(codec.decode_table_entry, codec.table_entry("my_station", {"eth_dst": 1}))[0] == C.INVALID_ARGUMENT
    codec.decode_table_entry(codec.table_entry("my_station", {"eth_dst": 1}), M)   # MODIFY: no action is fine
    codec.decode_table_entry(codec.table_entry("my_station", {"eth_dst": 1}), D)
    lpm = codec.table_entry("ipv4_lpm", {"ipv4_dst": "10.0.1.0/24"}, member_id=1)
    lpm.match[0].lpm.value = b"\x0a\x00\x01\x05"
    assert rejected(codec.decode_table_entry, lpm) == (C.INVALID_ARGUMENT, "table FabricIngress.ipv4_lpm: "
                                                       "match field ipv4_dst: value has bits set beyond the /24 prefix")
    acl = codec.table_entry("acl", {"ip_proto": (17, 0xFF)}, "drop", priority=1)
    acl.priority = 0
    assert rejected(codec.decode_table_entry, acl)[0] == C.INVALID_ARGUMENT
    const_default = codec.table_entry("acl", action="NoAction", is_default=True)
    assert rejected(codec.decode_table_entry, const_default, M)[0] == C.PERMISSION_DENIED
    assert rejected(codec.decode_table_entry, codec.table_entry("my_station", is_default=True), I)[0] == \
        C.INVALID_ARGUMENT


def test_bad_members_groups_counters_sessions_packets_rejected(p4, codec):
    assert rejected(codec.decode_member, codec.action_profile_member("ecmp_selector", 2, "NoAction")) == \
        (C.PERMISSION_DENIED, "action NoAction is @defaultonly in the tables of FabricIngress.ecmp_selector")
    assert rejected(codec.decode_member, codec.action_profile_member("ecmp_selector", 0, "drop"))[0] == \
        C.INVALID_ARGUMENT
    assert rejected(codec.decode_member, codec.action_profile_member("ecmp_selector", 3))[0] == C.INVALID_ARGUMENT
    assert rejected(codec.decode_group, codec.action_profile_group("ecmp_selector", 1, [(1, 0)]))[0] == \
        C.INVALID_ARGUMENT
    assert rejected(codec.decode_group, codec.action_profile_group("ecmp_selector", 1, [1], max_size=65))[0] == \
        C.INVALID_ARGUMENT
    assert rejected(codec.decode_group, codec.action_profile_group("ecmp_selector", 1, [1, 1]))[0] == \
        C.INVALID_ARGUMENT
    # Given the target's members, an unknown one is NOT_FOUND, in list order with the other checks.
    assert rejected(codec.decode_group, codec.action_profile_group("ecmp_selector", 1, [7, (1, 0)]), I, {1}) == \
        (C.NOT_FOUND, "FabricIngress.ecmp_selector: no member 7")
    assert rejected(codec.decode_counter_entry, codec.counter_entry("rx_port_counter", 1, (1, 1)), I)[0] == \
        C.INVALID_ARGUMENT
    assert rejected(codec.decode_counter_entry, codec.counter_entry("rx_port_counter", 256, (1, 1)))[0] == \
        C.OUT_OF_RANGE
    assert rejected(codec.decode_clone_session, codec.clone_session(0, [1]))[0] == C.INVALID_ARGUMENT
    assert rejected(codec.decode_clone_session, codec.clone_session(MAX_SESSION_ID + 1, [1]))[0] == \
        C.INVALID_ARGUMENT
    assert rejected(codec.decode_clone_session, codec.clone_session(5, [512]))[0] == C.INVALID_ARGUMENT
    assert codec.clone_session_id(codec.clone_session(5, [512])) == 5              # the key only
    assert rejected(codec.decode_clone_session, pb.PacketReplicationEngineEntry(
        multicast_group_entry=pb.MulticastGroupEntry(multicast_group_id=1)))[0] == C.UNIMPLEMENTED
    too_wide = pb.PacketOut(payload=b"x", metadata=[pb.PacketMetadata(metadata_id=1, value=b"\x02\x00"),
                                                     pb.PacketMetadata(metadata_id=2, value=b"\x00")])
    assert rejected(codec.decode_packet_out, too_wide)[0] == C.INVALID_ARGUMENT
    missing = pb.PacketOut(payload=b"x", metadata=[pb.PacketMetadata(metadata_id=1, value=b"\x01")])
    assert rejected(codec.decode_packet_out, missing) == (C.INVALID_ARGUMENT, "packet_out metadata missing: _pad")
