"""P4Info contract: lookups, the builders it keeps (the codec's), contract diff."""
import copy
import re

import pytest

from emulator.dataplane.malformed import MALFORMED_SLOTS, Malformed
from emulator.p4.p4info import DEFAULT_P4INFO, P4Info, P4InfoError
from emulator.wire import CPU_PORT


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


def test_malformed_reasons_are_one_fact_mirrored_in_fabric_p4(p4):
    """emulator/dataplane/malformed.py defines the reason codes; fabric.p4's
    MALFORMED_* constants must equal them, and the counter must hold them all."""
    src = (DEFAULT_P4INFO.parent / "fabric.p4").read_text()
    consts = {m[1]: int(m[2]) for m in re.finditer(r"const bit<32> MALFORMED_(\w+) = (\d+);", src)}
    assert consts == {r.name: r.value for r in Malformed}
    assert int(re.search(r"#define MALFORMED_SLOTS (\d+)", src)[1]) == MALFORMED_SLOTS > max(Malformed)
    assert p4.counter_id("malformed_drop_counter") == 0x1200000A
    assert p4.counter_size("malformed_drop_counter") == (CPU_PORT + 1) * MALFORMED_SLOTS
    cells = int(re.search(r"#define MALFORMED_CELLS (\d+)", src)[1])
    assert cells == p4.counter_size("malformed_drop_counter")
