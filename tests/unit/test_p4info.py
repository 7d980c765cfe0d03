"""P4Info helper: lookups, canonical bytestrings, builders, state conversion, contract diff."""
import copy

import pytest
from p4.v1 import p4runtime_pb2 as pb

from emulator.dataplane import state as st
from emulator.p4.p4info import (DEFAULT_P4INFO, P4Info, P4InfoError, check_bytestring, decode, encode,
                                to_int)


@pytest.fixture(scope="module")
def p4():
    return P4Info.load()


def test_default_path_is_the_committed_contract():
    assert DEFAULT_P4INFO.is_file()
    assert DEFAULT_P4INFO.name == "fabric.p4info.txtpb"


def test_lookups_by_name_alias_and_id(p4):
    assert p4.table_id("my_station") == p4.table_id("FabricIngress.my_station") == 0x02000001
    assert p4.table("ipv4_lpm").preamble.id == 0x02000002
    assert p4.table(0x02000003).preamble.alias == "acl"
    assert p4.match_field_id("acl", "ip_proto") == 5
    mf = p4.match_field("ipv4_lpm", "ipv4_dst")
    assert (mf.bitwidth, mf.match_type) == (32, mf.LPM)
    assert p4.match_field("acl", 1).name == "ig_port"
    assert p4.action_id("set_nexthop") == p4.action_id("FabricIngress.set_nexthop") == 0x01000002
    assert p4.action_id("NoAction") == 21257015
    assert p4.param_id("set_nexthop", "dmac") == 3
    assert p4.action_param("set_nexthop", "port").bitwidth == 9
    assert p4.action_profile_id("ecmp_selector") == 0x11000001
    assert p4.counter_id("tx_port_counter") == 0x12000004
    assert p4.counter_size("rx_port_counter") == 256
    assert p4.packet_metadata_id("packet_out", "egress_port") == 1
    assert p4.packet_metadata("packet_in", "ingress_port").bitwidth == 9
    assert p4.name(0x02000002) == "FabricIngress.ipv4_lpm"
    assert p4.needs_priority("acl") and not p4.needs_priority("ipv4_lpm")


def test_unknown_names_raise(p4):
    with pytest.raises(P4InfoError, match="no table 'nope'"):
        p4.table_id("nope")
    with pytest.raises(P4InfoError, match="no match field"):
        p4.match_field_id("acl", "nope")
    with pytest.raises(P4InfoError):
        p4.param_id("set_nexthop", "nope")


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


def test_table_entry_builder_per_match_type(p4):
    te = p4.table_entry("ipv4_lpm", {"ipv4_dst": ("10.0.1.0", 24)}, member_id=3)
    assert te.table_id == 0x02000002 and te.priority == 0
    (fm,) = te.match
    assert fm.field_id == 1 and fm.lpm.value == b"\x0a\x00\x01\x00" and fm.lpm.prefix_len == 24
    assert te.action.action_profile_member_id == 3
    assert p4.table_entry("ipv4_lpm", {"ipv4_dst": "10.0.1.0/24"}, member_id=3) == te

    acl = p4.table_entry("acl", {"ip_proto": (17, 0xFF), "ipv4_src": ("0.0.0.0", 0)}, "punt_to_cpu", priority=7)
    assert [m.field_id for m in acl.match] == [5]        # zero mask = don't care = omitted
    assert acl.match[0].ternary.value == b"\x11" and acl.match[0].ternary.mask == b"\xff"
    assert acl.priority == 7 and acl.action.action.action_id == p4.action_id("punt_to_cpu")

    ms = p4.table_entry("my_station", {"eth_dst": "02:00:00:00:01:00"}, "NoAction")
    assert ms.match[0].exact.value == b"\x02\x00\x00\x00\x01\x00"

    nh = p4.table_entry("ipv4_lpm", {"ipv4_dst": ("0.0.0.0", 0)}, group_id=1)
    assert len(nh.match) == 0 and nh.action.action_profile_group_id == 1


def test_action_builder_checks_params(p4):
    a = p4.action_msg("set_nexthop", {"port": 1, "smac": "02:00:00:00:00:01", "dmac": 2})
    assert [(p.param_id, p.value) for p in a.params] == [(1, b"\x01"), (2, b"\x02\x00\x00\x00\x00\x01"), (3, b"\x02")]
    with pytest.raises(ValueError, match="missing parameter"):
        p4.action_msg("set_nexthop", {"port": 1})
    with pytest.raises(P4InfoError, match="no parameter"):
        p4.action_msg("drop", {"port": 1})
    with pytest.raises(ValueError):
        p4.action_msg("set_nexthop", {"port": 512, "smac": 0, "dmac": 0})


def test_profile_counter_packet_builders(p4):
    m = p4.action_profile_member("ecmp_selector", 5, "set_nexthop", {"port": 2, "smac": 1, "dmac": 2})
    assert (m.action_profile_id, m.member_id, m.action.action_id) == (0x11000001, 5, 0x01000002)
    g = p4.action_profile_group("ecmp_selector", 9, [5, (6, 3)])
    assert g.max_size == 64 and [(x.member_id, x.weight) for x in g.members] == [(5, 1), (6, 3)]
    c = p4.counter_entry("rx_port_counter", 4)
    assert c.counter_id == 0x12000001 and c.HasField("index") and c.index.index == 4
    assert not p4.counter_entry("rx_port_counter").HasField("index")
    po = p4.packet_out(b"abc", 300)
    assert po.payload == b"abc"
    assert [(x.metadata_id, x.value) for x in po.metadata] == [(1, b"\x01\x2c"), (2, b"\x00")]
    assert p4.packet_metadata_values("packet_out", po.metadata) == {"egress_port": 300, "_pad": 0}


def test_state_round_trip(p4):
    te = p4.table_entry("acl", {"ig_port": (3, 0x1FF), "ipv4_dst": ("10.0.0.0", "255.0.0.0")},
                        "drop", priority=10, metadata=b"cookie")
    entry = p4.decode_table_entry(te)
    assert entry == st.TableEntry(table_id=0x02000003,
                                  match={1: ("ternary", 3, 0x1FF), 4: ("ternary", 0x0A000000, 0xFF000000)},
                                  priority=10, action=st.ActionCall(0x01000001, ()), metadata=b"cookie")
    assert p4.encode_table_entry(entry) == te
    lpm = p4.table_entry("ipv4_lpm", {"ipv4_dst": "10.0.1.0/24"}, group_id=4)
    assert p4.decode_table_entry(lpm).match == {1: ("lpm", 0x0A000100, 24)}
    assert p4.decode_table_entry(lpm).group_id == 4
    assert p4.encode_table_entry(p4.decode_table_entry(lpm)) == lpm
    d = p4.describe_table_entry(lpm)
    assert d == {"table": "ipv4_lpm", "match": {"ipv4_dst": (0x0A000100, 24)}, "priority": 0, "group_id": 4}


def test_differences(p4):
    assert p4.differences(p4.proto) == []
    other = copy.deepcopy(p4.proto)
    by_name = lambda items, name: next(x for x in items if x.preamble.alias == name)  # noqa: E731
    by_name(other.tables, "ipv4_lpm").match_fields[0].bitwidth = 16
    by_name(other.actions, "set_nexthop").params[0].name = "egress"
    other.counters.remove(by_name(other.counters, "rx_port_counter"))
    diffs = p4.differences(other)
    assert len(diffs) == 3
    assert any("ipv4_lpm" in d and "16" in d for d in diffs)
    assert any("set_nexthop" in d and "egress" in d for d in diffs)
    assert any("rx_port_counter" in d and "missing" in d for d in diffs)
    # Annotations and docs are not part of what the target realizes.
    cosmetic = copy.deepcopy(p4.proto)
    cosmetic.tables[0].preamble.annotations.append("@hidden")
    assert p4.differences(cosmetic) == []


def test_packet_in_builder(p4):
    pin = p4.packet_in(b"x", 7)
    assert isinstance(pin, pb.PacketIn)
    assert p4.packet_metadata_values("packet_in", pin.metadata) == {"ingress_port": 7, "_pad": 0}
