"""Embedded target's P4Runtime server, driven over real gRPC on 127.0.0.1 by the client."""
import copy
import time

import grpc
import pytest
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2 as pb
from p4.v1 import p4runtime_pb2_grpc as pb_grpc

from emulator.control.p4rt_client import (ArbitrationError, P4RuntimeError, ReadError, SwitchConnection,
                                          WriteError)
from emulator.dataplane.p4rt_server import P4RuntimeServer
from emulator.dataplane.state import SwitchState
from emulator.p4.codec import Codec
from emulator.p4.entities import ActionCall, ActionProfileGroup, TableEntry
from emulator.p4.p4info import P4Info
from emulator.p4.values import uint128

DEV = 7
C = code_pb2
NH1 = {"port": 1, "smac": "02:00:00:00:00:01", "dmac": "02:00:00:00:01:01"}
NH2 = {"port": 2, "smac": "02:00:00:00:00:01", "dmac": "02:00:00:00:01:02"}


@pytest.fixture(scope="module")
def p4():
    return P4Info.load()


@pytest.fixture
def switch(p4):
    state = SwitchState()
    server = P4RuntimeServer(state, DEV, 0, p4)
    server.start()
    conns = []

    def connect(election_id=(0, 1), **kw):
        kw.setdefault("timeout", 3.0)
        c = SwitchConnection(server.address, DEV, election_id, **kw)
        conns.append(c)
        return c

    yield server, state, connect
    # the server first: a client closed while its server lives waits
    # ~0.2 s for its stream's reader to end
    server.stop(grace=0)
    for c in conns:
        c.close()


@pytest.fixture
def ready(switch, p4):
    """A switch with the pipeline set by a primary connection."""
    server, state, connect = switch
    conn = connect()
    conn.set_pipeline(p4)
    return server, state, conn


def eventually(pred, timeout=3.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def codes_of(excinfo_value):
    return [e.code for e in excinfo_value.errors]


# ---------------------------------------------------------------- arbitration

def test_capabilities(ready):
    _, _, conn = ready
    assert conn.capabilities() == "1.4.1"


def test_primary_and_backups_and_notifications(switch, p4):
    server, state, connect = switch
    a = connect((0, 2))
    assert a.is_primary and a.arbitration_status == C.OK
    b = connect((0, 1), require_primary=False)
    assert not b.is_primary and b.arbitration_status == C.ALREADY_EXISTS
    a.set_pipeline(p4)
    # A backup may read but not write nor set the pipeline.
    assert b.read_table_entries() == []
    with pytest.raises(WriteError) as e:
        b.insert(p4.table_entry("my_station", {"eth_dst": 1}, "NoAction"))
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(P4RuntimeError) as e:
        b.set_pipeline(p4)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    # A higher election id takes over; everybody is told.
    c = connect((1, 0))
    assert c.is_primary
    assert eventually(lambda: a.arbitration_status == C.ALREADY_EXISTS)
    assert eventually(lambda: b.primary_election_id == 1 << 64)
    assert not a.is_primary and b.arbitration_status == C.ALREADY_EXISTS
    with pytest.raises(WriteError) as e:  # the old primary's election id no longer writes
        a.insert(p4.table_entry("my_station", {"eth_dst": 1}, "NoAction"))
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    c.insert(p4.table_entry("my_station", {"eth_dst": 1}, "NoAction"))


def test_failover_when_primary_closes(switch, p4):
    _, _, connect = switch
    a = connect((0, 2))
    b = connect((0, 1), require_primary=False)
    a.set_pipeline(p4)
    a.close()
    assert eventually(lambda: b.arbitration_status == C.NOT_FOUND)   # no primary now
    b.become_primary((0, 3), timeout=3.0)                           # >= highest id seen
    assert b.is_primary
    b.insert(p4.table_entry("my_station", {"eth_dst": 1}, "NoAction"))
    assert len(b.read_table_entries("my_station")) == 1


def test_lower_election_id_cannot_take_over_after_failover(switch):
    _, _, connect = switch
    a = connect((0, 5))
    b = connect((0, 1), require_primary=False)
    a.close()
    assert eventually(lambda: b.arbitration_status == C.NOT_FOUND)
    with pytest.raises(ArbitrationError, match="not primary"):
        b.become_primary((0, 4), timeout=0.5)


def test_wrong_device_id_closes_stream_with_not_found(switch):
    server, _, _ = switch
    with pytest.raises(ArbitrationError) as e:
        SwitchConnection(server.address, DEV + 1, timeout=3.0)
    assert e.value.code == grpc.StatusCode.NOT_FOUND


def test_duplicate_election_id_rejected(switch):
    server, _, connect = switch
    connect((0, 9))
    with pytest.raises(ArbitrationError) as e:
        SwitchConnection(server.address, DEV, (0, 9), timeout=3.0)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_arbitration_timeout_is_clear(switch):
    _, _, connect = switch
    connect((0, 9))
    with pytest.raises(ArbitrationError, match="not primary after.*ALREADY_EXISTS"):
        connect((0, 1), timeout=0.3)


# ---------------------------------------------------------------- pipeline config

def test_nothing_before_pipeline(switch, p4):
    _, _, connect = switch
    conn = connect(p4info=p4)
    assert conn.get_pipeline() is None
    with pytest.raises(WriteError) as e:
        conn.insert(p4.table_entry("my_station", {"eth_dst": 1}, "NoAction"))
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(P4RuntimeError) as e:
        conn.read_table_entries()
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION


def test_set_and_get_pipeline(switch, p4):
    server, state, connect = switch
    conn = connect()
    conn.set_pipeline(p4, b'{"bmv2": "json"}', cookie=42)
    assert set(state.tables) == set(p4.table_ids)
    assert set(state.action_profiles) == {p4.action_profile_id("ecmp_selector")}
    assert {cid: len(a.packets) for cid, a in state.counters.items()} == p4.counter_sizes
    R = pb.GetForwardingPipelineConfigRequest
    full = conn.get_pipeline()
    assert full.cookie.cookie == 42 and full.p4_device_config == b'{"bmv2": "json"}'
    assert P4Info(full.p4info).differences(p4) == []
    only = conn.get_pipeline(R.COOKIE_ONLY)
    assert only.cookie.cookie == 42 and not only.HasField("p4info") and not only.p4_device_config
    info = conn.get_pipeline(R.P4INFO_AND_COOKIE)
    assert info.HasField("p4info") and not info.p4_device_config
    dev = conn.get_pipeline(R.DEVICE_CONFIG_AND_COOKIE)
    assert dev.p4_device_config and not dev.HasField("p4info")
    # Committing again clears the forwarding state; VERIFY does not touch it.
    conn.insert(p4.table_entry("my_station", {"eth_dst": 1}, "NoAction"))
    conn.set_pipeline(p4, action=pb.SetForwardingPipelineConfigRequest.VERIFY)
    assert len(state.tables[p4.table_id("my_station")]) == 1
    gen = state.generation
    conn.set_pipeline(p4)
    assert state.generation > gen and len(state.tables[p4.table_id("my_station")]) == 0


def test_save_then_commit(switch, p4):
    _, state, connect = switch
    conn = connect()
    A = pb.SetForwardingPipelineConfigRequest
    with pytest.raises(P4RuntimeError) as e:
        conn.set_pipeline(p4, action=A.COMMIT)
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    conn.set_pipeline(p4, cookie=1, action=A.VERIFY_AND_SAVE)
    conn.insert(p4.table_entry("my_station", {"eth_dst": 1}, "NoAction"))
    conn.set_pipeline(p4, action=A.COMMIT)
    assert conn.get_pipeline().cookie.cookie == 1
    assert len(conn.read_table_entries()) == 1
    conn.set_pipeline(p4, cookie=2, action=A.RECONCILE_AND_COMMIT)   # same program: state kept
    assert len(conn.read_table_entries()) == 1 and conn.get_pipeline().cookie.cookie == 2


def test_mismatched_p4info_rejected(switch, p4):
    _, _, connect = switch
    conn = connect()
    bad = copy.deepcopy(p4.proto)
    by_name = lambda items, name: next(x for x in items if x.preamble.alias == name)  # noqa: E731
    by_name(bad.actions, "set_nexthop").params[0].bitwidth = 16      # set_nexthop.port
    by_name(bad.tables, "acl").match_fields.pop()                      # acl.l4_dst_port
    with pytest.raises(P4RuntimeError) as e:
        conn.set_pipeline(bad)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "set_nexthop" in e.value.message and "acl" in e.value.message
    extra = copy.deepcopy(p4.proto)
    extra.registers.add().preamble.name = "r"
    with pytest.raises(P4RuntimeError, match="unexpected register"):
        conn.set_pipeline(extra)
    assert conn.get_pipeline() is None


# ---------------------------------------------------------------- tables

def test_exact_table_crud(ready, p4):
    _, state, conn = ready
    tid = p4.table_id("my_station")
    mac = "02:00:00:00:01:00"
    gen = state.generation
    conn.insert(p4.table_entry("my_station", {"eth_dst": mac}, "NoAction", metadata=b"m1"))
    assert state.generation > gen
    (entry,) = state.tables[tid].values()
    assert entry == TableEntry(tid, {1: ("exact", 0x020000000100)}, 0,
                               action=ActionCall(p4.action_id("NoAction"), ()), metadata=b"m1")
    assert entry.key() in state.tables[tid]
    (read,) = conn.read_table_entries("my_station")
    assert read == p4.table_entry("my_station", {"eth_dst": mac}, "NoAction", metadata=b"m1")
    # Read by match key.
    got = conn.read(p4.table_entry("my_station", {"eth_dst": mac}))
    assert len(got) == 1
    assert conn.read(p4.table_entry("my_station", {"eth_dst": 5})) == []
    conn.modify(p4.table_entry("my_station", {"eth_dst": mac}, "NoAction", metadata=b"m2"))
    assert next(iter(state.tables[tid].values())).metadata == b"m2"
    conn.delete(p4.table_entry("my_station", {"eth_dst": mac}))
    assert state.tables[tid] == {} and conn.read_table_entries() == []


def test_lpm_via_members_and_groups(ready, p4):
    _, state, conn = ready
    tid, pid = p4.table_id("ipv4_lpm"), p4.action_profile_id("ecmp_selector")
    conn.insert([p4.action_profile_member("ecmp_selector", 1, "set_nexthop", NH1),
                 p4.action_profile_member("ecmp_selector", 2, "set_nexthop", NH2)])
    conn.insert(p4.action_profile_group("ecmp_selector", 100, [1, (2, 3)]))
    conn.insert([p4.table_entry("ipv4_lpm", {"ipv4_dst": "10.0.1.0/24"}, member_id=1),
                 p4.table_entry("ipv4_lpm", {"ipv4_dst": "10.0.0.0/8"}, group_id=100),
                 p4.table_entry("ipv4_lpm", {"ipv4_dst": "0.0.0.0/0"}, group_id=100)])
    aps = state.action_profiles[pid]
    assert aps.members[1] == ActionCall(p4.action_id("set_nexthop"),
                                        ((1, 1), (2, 0x020000000001), (3, 0x020000000101)))
    assert aps.groups[100] == ActionProfileGroup(100, [(1, 1), (2, 3)], 64)
    by_match = {tuple(e.match.items()): e for e in state.tables[tid].values()}
    assert by_match[((1, ("lpm", 0x0A000100, 24)),)].member_id == 1
    assert by_match[((1, ("lpm", 0x0A000000, 8)),)].group_id == 100
    assert by_match[()].group_id == 100                         # /0: field omitted = wildcard
    assert len(conn.read_table_entries("ipv4_lpm")) == 3
    members = conn.read_action_profile_members("ecmp_selector")
    assert [m.member_id for m in members] == [1, 2]
    assert members[0] == p4.action_profile_member("ecmp_selector", 1, "set_nexthop", NH1)
    (grp,) = conn.read_action_profile_groups()
    assert grp == p4.action_profile_group("ecmp_selector", 100, [1, (2, 3)])
    # Modify: member action, group membership, entry from member to group.
    conn.modify(p4.action_profile_member("ecmp_selector", 2, "drop"))
    assert aps.members[2] == ActionCall(p4.action_id("drop"), ())
    conn.modify(p4.action_profile_group("ecmp_selector", 100, [2]))
    assert aps.groups[100].members == [(2, 1)]
    conn.modify(p4.table_entry("ipv4_lpm", {"ipv4_dst": "10.0.1.0/24"}, group_id=100))
    # Member 1 is now unused and can go; group 100 is still used.
    conn.delete(p4.action_profile_member("ecmp_selector", 1, "drop"))
    with pytest.raises(WriteError) as e:
        conn.delete(p4.action_profile_group("ecmp_selector", 100))
    assert codes_of(e.value) == [C.FAILED_PRECONDITION]
    conn.delete([p4.table_entry("ipv4_lpm", {"ipv4_dst": m}) for m in ("10.0.1.0/24", "10.0.0.0/8", "0.0.0.0/0")])
    conn.delete(p4.action_profile_group("ecmp_selector", 100))
    conn.delete(p4.action_profile_member("ecmp_selector", 2, "drop"))
    assert aps.members == {} and aps.groups == {} and state.tables[tid] == {}


def test_ternary_acl_with_priority(ready, p4):
    _, state, conn = ready
    tid = p4.table_id("acl")
    rule = {"eth_type": (0x0800, 0xFFFF), "ip_proto": (17, 0xFF), "l4_dst_port": (4791, 0xFFFF)}
    conn.insert([p4.table_entry("acl", rule, "punt_to_cpu", priority=10),
                 p4.table_entry("acl", rule, "drop", priority=20),             # same match, other priority
                 p4.table_entry("acl", {"ig_port": (3, 0x1FF)}, "drop", priority=5)])
    assert len(state.tables[tid]) == 3
    e10 = state.tables[tid][TableEntry(tid, {2: ("ternary", 0x800, 0xFFFF), 5: ("ternary", 17, 0xFF),
                                             6: ("ternary", 4791, 0xFFFF)}, 10).key()]
    assert e10.action.action_id == p4.action_id("punt_to_cpu") and e10.priority == 10
    read = conn.read_table_entries("acl")
    assert sorted(te.priority for te in read) == [5, 10, 20]
    assert p4.table_entry("acl", rule, "punt_to_cpu", priority=10) in read
    assert [e.table_entry.priority for e in conn.read(p4.table_entry("acl", rule, priority=20))] == [20]
    conn.modify(p4.table_entry("acl", rule, "NoAction", priority=10))
    assert e10.key() in state.tables[tid]
    assert state.tables[tid][e10.key()].action.action_id == p4.action_id("NoAction")
    conn.delete(p4.table_entry("acl", rule, priority=10))
    assert len(state.tables[tid]) == 2
    with pytest.raises(WriteError) as e:
        conn.delete(p4.table_entry("acl", rule, priority=10))
    assert codes_of(e.value) == [C.NOT_FOUND]


def test_non_canonical_bytestrings_accepted_and_read_back_canonical(ready, p4):
    _, state, conn = ready
    te = pb.TableEntry(table_id=p4.table_id("acl"), priority=1)
    te.match.add(field_id=1).ternary.CopyFrom(pb.FieldMatch.Ternary(value=b"\x00\x00\x03", mask=b"\x01\xff"))
    te.action.action.action_id = p4.action_id("drop")
    conn.insert(te)
    (read,) = conn.read_table_entries("acl")
    assert read.match[0].ternary.value == b"\x03" and read.match[0].ternary.mask == b"\x01\xff"


def test_default_entries(ready, p4):
    _, _, conn = ready
    default = pb.TableEntry(table_id=p4.table_id("my_station"), is_default_action=True)
    (got,) = [e.table_entry for e in conn.read(default)]
    assert got.is_default_action and got.action.action.action_id == p4.action_id("NoAction")
    mod = copy.deepcopy(default)
    mod.action.action.action_id = p4.action_id("NoAction")
    conn.modify(mod)
    for table in ("acl", "ipv4_lpm"):                     # const default actions
        t = pb.TableEntry(table_id=p4.table_id(table), is_default_action=True)
        t.action.action.action_id = p4.action_id("NoAction")
        with pytest.raises(WriteError) as e:
            conn.modify(t)
        assert codes_of(e.value) == [C.PERMISSION_DENIED]
    with pytest.raises(WriteError) as e:
        conn.insert(mod)
    assert codes_of(e.value) == [C.INVALID_ARGUMENT]


# ---------------------------------------------------------------- errors

def raw_entry(p4, table, fields=(), action=None, params=(), priority=0, member=None, group=None):
    """A TableEntry built by hand, so that it can be wrong."""
    te = pb.TableEntry(table_id=table if isinstance(table, int) else p4.table_id(table), priority=priority)
    for fid, kind, *vals in fields:
        fm = te.match.add(field_id=fid)
        if kind == "exact":
            fm.exact.value = vals[0]
        elif kind == "lpm":
            fm.lpm.value, fm.lpm.prefix_len = vals
        elif kind == "ternary":
            fm.ternary.value, fm.ternary.mask = vals
    if action is not None:
        te.action.action.action_id = action if isinstance(action, int) else p4.action_id(action)
        for pid, value in params:
            te.action.action.params.add(param_id=pid, value=value)
    if member is not None:
        te.action.action_profile_member_id = member
    if group is not None:
        te.action.action_profile_group_id = group
    return te


def test_every_write_error_code(ready, p4):
    _, state, conn = ready
    conn.insert([p4.action_profile_member("ecmp_selector", 1, "set_nexthop", NH1),
                 p4.table_entry("my_station", {"eth_dst": 1}, "NoAction")])
    conn.insert(p4.action_profile_group("ecmp_selector", 10, [1]))
    ip = b"\x0a\x00\x01\x00"
    nh_params = [(1, b"\x01"), (2, b"\x02"), (3, b"\x03")]
    I, M, D = pb.Update.INSERT, pb.Update.MODIFY, pb.Update.DELETE
    cases = [
        (I, raw_entry(p4, 0x02000099, [(1, "exact", b"\x01")], "NoAction"), C.INVALID_ARGUMENT),  # table id
        (I, raw_entry(p4, "my_station", [(9, "exact", b"\x01")], "NoAction"), C.INVALID_ARGUMENT),  # field id
        (I, raw_entry(p4, "my_station", [(1, "exact", b"\x02")], 0x01000099), C.INVALID_ARGUMENT),  # action id
        (I, raw_entry(p4, "acl", [(1, "ternary", b"\x01", b"\x01")], "drop", [(7, b"\x01")], priority=1),
         C.INVALID_ARGUMENT),                                                                       # param id
        (I, raw_entry(p4, "acl", [(1, "ternary", b"\x01", b"\x01")], "set_nexthop", nh_params, priority=1),
         C.INVALID_ARGUMENT),                                                             # action not in table
        (I, raw_entry(p4, "acl", [(1, "ternary", b"\x01", b"\x01")], "drop"), C.INVALID_ARGUMENT),  # priority 0
        (I, raw_entry(p4, "my_station", [(1, "exact", b"\x03")], "NoAction", priority=3),
         C.INVALID_ARGUMENT),                                                           # priority on exact
        (I, raw_entry(p4, "my_station", [], "NoAction"), C.INVALID_ARGUMENT),             # exact field missing
        (I, raw_entry(p4, "my_station", [(1, "exact", b"\x01\x00\x00\x00\x00\x00\x00")], "NoAction"),
         C.OUT_OF_RANGE),                                                                 # 49 bits in bit<48>
        (I, raw_entry(p4, "my_station", [(1, "exact", b"")], "NoAction"), C.OUT_OF_RANGE),  # empty bytestring
        (I, raw_entry(p4, "ipv4_lpm", [(1, "lpm", ip, 33)], member=1), C.INVALID_ARGUMENT),  # prefix > width
        (I, raw_entry(p4, "ipv4_lpm", [(1, "lpm", b"\x0a\x00\x01\x05", 24)], member=1),
         C.INVALID_ARGUMENT),                                                             # host bits set
        (I, raw_entry(p4, "ipv4_lpm", [(1, "exact", ip)], member=1), C.INVALID_ARGUMENT),  # wrong match type
        (I, raw_entry(p4, "acl", [(3, "ternary", b"\x0a\x00\x01\x05", b"\xff\xff\xff\x00")], "drop", priority=1),
         C.INVALID_ARGUMENT),                                                             # value outside mask
        (I, raw_entry(p4, "ipv4_lpm", [(1, "lpm", ip, 24)], "set_nexthop", nh_params),
         C.INVALID_ARGUMENT),                                                 # direct action, indirect table
        (I, raw_entry(p4, "my_station", [(1, "exact", b"\x04")], member=1), C.INVALID_ARGUMENT),  # member, direct
        (I, raw_entry(p4, "ipv4_lpm", [(1, "lpm", ip, 24)], member=99), C.NOT_FOUND),        # no such member
        (I, raw_entry(p4, "ipv4_lpm", [(1, "lpm", ip, 24)], group=99), C.NOT_FOUND),         # no such group
        (I, raw_entry(p4, "acl", [(5, "ternary", b"\x11", b"\xff")], "set_nexthop", nh_params[:2], priority=1),
         C.INVALID_ARGUMENT),                                                             # (not in acl)
        (I, raw_entry(p4, "my_station", [(1, "exact", b"\x01")], "NoAction"), C.ALREADY_EXISTS),  # duplicate
        (M, raw_entry(p4, "my_station", [(1, "exact", b"\x05")], "NoAction"), C.NOT_FOUND),
        (D, raw_entry(p4, "my_station", [(1, "exact", b"\x05")]), C.NOT_FOUND),
        (I, raw_entry(p4, "ipv4_lpm", [(1, "lpm", ip, 24)], member=1), C.OK),                # the valid one
        (I, p4.action_profile_member("ecmp_selector", 2, "NoAction"), C.PERMISSION_DENIED),  # @defaultonly
        (I, pb.ActionProfileMember(action_profile_id=p4.action_profile_id("ecmp_selector"), member_id=3,
                                   action=pb.Action(action_id=p4.action_id("set_nexthop"),
                                                    params=[pb.Action.Param(param_id=1, value=b"\x01")])),
         C.INVALID_ARGUMENT),                                                             # missing params
        (I, p4.action_profile_member("ecmp_selector", 1, "drop"), C.ALREADY_EXISTS),
        (M, p4.action_profile_member("ecmp_selector", 42, "drop"), C.NOT_FOUND),
        (D, p4.action_profile_member("ecmp_selector", 1), C.FAILED_PRECONDITION),            # in group 10
        (I, p4.action_profile_group("ecmp_selector", 11, [1, 77]), C.NOT_FOUND),             # no member 77
        (I, p4.action_profile_group("ecmp_selector", 12, [(1, 5)], max_size=4), C.RESOURCE_EXHAUSTED),
        (I, p4.action_profile_group("ecmp_selector", 13, [1], max_size=65), C.INVALID_ARGUMENT),
        (I, p4.action_profile_group("ecmp_selector", 14, [(1, 0)]), C.INVALID_ARGUMENT),     # weight 0
        (I, p4.action_profile_group("ecmp_selector", 10, [1]), C.ALREADY_EXISTS),
        (M, p4.action_profile_group("ecmp_selector", 10, [1], max_size=8), C.INVALID_ARGUMENT),  # max_size change
        (D, p4.action_profile_group("ecmp_selector", 15), C.NOT_FOUND),
        (I, p4.codec.counter_entry("rx_port_counter", 1, (1, 1)), C.INVALID_ARGUMENT),       # counters: MODIFY only
        (M, p4.codec.counter_entry("rx_port_counter", 256, (1, 1)), C.OUT_OF_RANGE),
        (M, pb.CounterEntry(counter_id=0x12000099), C.INVALID_ARGUMENT),
        (pb.Update.UNSPECIFIED, p4.table_entry("my_station", {"eth_dst": 9}, "NoAction"), C.INVALID_ARGUMENT),
    ]
    updates = []
    for utype, entity, _ in cases:
        ent = pb.Entity()
        getattr(ent, entity.DESCRIPTOR.name[0].lower() + "".join(
            "_" + ch.lower() if ch.isupper() else ch for ch in entity.DESCRIPTOR.name[1:])).CopyFrom(entity)
        updates.append(pb.Update(type=utype, entity=ent))
    before = copy.deepcopy((state.tables, state.action_profiles))
    with pytest.raises(WriteError) as e:
        conn.write(updates)
    assert e.value.code == grpc.StatusCode.UNKNOWN
    got = {err.index: err.code for err in e.value.errors}
    expected = {i: code for i, (_, _, code) in enumerate(cases) if code != C.OK}
    mismatches = {i: (C.Code.Name(got.get(i, 0)), C.Code.Name(code)) for i, code in expected.items()
                  if got.get(i) != code}
    assert not mismatches, mismatches
    assert len(e.value.errors) == len(cases) - 1
    # Only the valid update changed the state.
    tid = p4.table_id("ipv4_lpm")
    assert len(state.tables[tid]) == 1 and len(before[0][tid]) == 0
    assert state.action_profiles == before[1]


def test_batch_details_hold_one_error_per_update(ready, p4):
    server, _, conn = ready
    channel = grpc.insecure_channel(server.address)
    stub = pb_grpc.P4RuntimeStub(channel)
    req = pb.WriteRequest(device_id=DEV, election_id=uint128((0, 1)))
    for te in (p4.table_entry("my_station", {"eth_dst": 1}, "NoAction"),
               p4.table_entry("my_station", {"eth_dst": 1}, "NoAction")):
        req.updates.add(type=pb.Update.INSERT).entity.table_entry.CopyFrom(te)
    with pytest.raises(grpc.RpcError) as e:
        stub.Write(req, timeout=3)
    assert e.value.code() == grpc.StatusCode.UNKNOWN
    (blob,) = [v for k, v in e.value.trailing_metadata() if k == "grpc-status-details-bin"]
    status = status_pb2.Status.FromString(blob)
    assert status.code == C.UNKNOWN
    errs = []
    for d in status.details:
        err = pb.Error()
        assert d.Unpack(err)
        errs.append(err.canonical_code)
    assert errs == [C.OK, C.ALREADY_EXISTS]
    # Wrong election id / device id are RPC-wide errors.
    req.election_id.CopyFrom(uint128((0, 2)))
    with pytest.raises(grpc.RpcError) as e:
        stub.Write(req, timeout=3)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    req.device_id = DEV + 1
    with pytest.raises(grpc.RpcError) as e:
        stub.Write(req, timeout=3)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    channel.close()


def test_rollback_on_error_leaves_state_unchanged(ready, p4):
    _, state, conn = ready
    tid = p4.table_id("my_station")
    with pytest.raises(WriteError) as e:
        conn.insert([p4.table_entry("my_station", {"eth_dst": 1}, "NoAction"),
                     p4.table_entry("my_station", {"eth_dst": 1}, "NoAction")],
                    atomicity=pb.WriteRequest.ROLLBACK_ON_ERROR)
    assert codes_of(e.value) == [C.ABORTED, C.ALREADY_EXISTS]
    assert state.tables[tid] == {}


def as_update(utype, msg):
    """``p4.v1.Update`` of any entity message."""
    (field,) = [f for f in pb.Entity.DESCRIPTOR.fields if f.message_type is msg.DESCRIPTOR]
    return pb.Update(type=utype, entity=pb.Entity(**{field.name: msg}))


def test_rollback_undoes_every_kind_of_update(ready, p4):
    server, state, conn = ready
    codec = p4.codec
    conn.insert([p4.action_profile_member("ecmp_selector", 1, "set_nexthop", NH1),
                 p4.table_entry("my_station", {"eth_dst": 1}, "NoAction"),
                 codec.clone_session(600, [1])])
    conn.insert([p4.action_profile_group("ecmp_selector", 10, [1]),
                 p4.table_entry("ipv4_lpm", {"ipv4_dst": "10.1.0.0/16"}, member_id=1)])
    conn.modify(codec.counter_entry("rx_port_counter", 3, (5, 500)))
    rx = state.counters[p4.counter_id("rx_port_counter")]

    def snapshot():
        return copy.deepcopy((state.tables, state.action_profiles, state.clone_sessions, rx.packets, rx.bytes,
                              server.tables._defaults, server.tables._ctrl_meta, dict(server.profiles._users)))

    before = snapshot()
    default = p4.table_entry("my_station", action="NoAction", is_default=True)
    cookie = p4.table_entry("ipv4_lpm", {"ipv4_dst": "10.2.0.0/16"}, group_id=10)
    cookie.controller_metadata = 7
    M, I, D = pb.Update.MODIFY, pb.Update.INSERT, pb.Update.DELETE
    batch = [(M, p4.action_profile_member("ecmp_selector", 1, "drop")),
             (I, p4.action_profile_member("ecmp_selector", 2, "set_nexthop", NH2)),
             (M, p4.action_profile_group("ecmp_selector", 10, [1, 2])),
             (D, p4.table_entry("ipv4_lpm", {"ipv4_dst": "10.1.0.0/16"})),
             (I, cookie),
             (M, default),
             (M, codec.counter_entry("rx_port_counter", 3, (9, 900))),
             (M, codec.counter_entry("rx_port_counter", None, (1, 1))),
             (I, codec.clone_session(601, [2])),
             (D, codec.clone_session(600)),
             (I, p4.table_entry("my_station", {"eth_dst": 1}, "NoAction"))]   # fails: exists
    updates = [as_update(t, e) for t, e in batch]
    for atomicity in (pb.WriteRequest.ROLLBACK_ON_ERROR, pb.WriteRequest.DATAPLANE_ATOMIC):
        with pytest.raises(WriteError) as e:
            conn.write(updates, atomicity=atomicity)
        assert codes_of(e.value) == [C.ABORTED] * (len(batch) - 1) + [C.ALREADY_EXISTS]
        assert snapshot() == before
    # The undone references still hold: member 1 is used, group 10 is unused.
    with pytest.raises(WriteError) as e:
        conn.delete(p4.action_profile_member("ecmp_selector", 1))
    assert codes_of(e.value) == [C.FAILED_PRECONDITION]
    conn.delete(p4.action_profile_group("ecmp_selector", 10))


def test_table_full(ready, p4):
    _, state, conn = ready
    size = p4.table("my_station").size
    with pytest.raises(WriteError) as e:
        conn.insert([p4.table_entry("my_station", {"eth_dst": i + 1}, "NoAction") for i in range(size + 1)])
    assert codes_of(e.value) == [C.RESOURCE_EXHAUSTED] and e.value.errors[0].index == size
    assert len(state.tables[p4.table_id("my_station")]) == size


def test_delete_member_used_by_entry(ready, p4):
    _, _, conn = ready
    conn.insert(p4.action_profile_member("ecmp_selector", 1, "set_nexthop", NH1))
    conn.insert(p4.table_entry("ipv4_lpm", {"ipv4_dst": "10.1.0.0/16"}, member_id=1))
    with pytest.raises(WriteError) as e:
        conn.delete(p4.action_profile_member("ecmp_selector", 1))
    assert codes_of(e.value) == [C.FAILED_PRECONDITION]


# ---------------------------------------------------------------- counters

def test_counters_read_and_write(ready, p4):
    _, state, conn = ready
    rx = state.counters[p4.counter_id("rx_port_counter")]
    rx.count(3, 100)
    rx.count(3, 50)
    state.counters[p4.counter_id("tx_port_counter")].count(255, 64)
    assert conn.read_counter("rx_port_counter", 3) == {3: (2, 150)}
    every = conn.read_counter("rx_port_counter")
    assert len(every) == 256 and every[3] == (2, 150) and every[4] == (0, 0)
    assert conn.read_counter("tx_port_counter", 255) == {255: (1, 64)}
    # counter_id 0 (every cell of every counter): the wildcard read's test
    conn.modify(p4.codec.counter_entry("rx_port_counter", 3, (7, 700)))
    assert (rx.packets[3], rx.bytes[3]) == (7, 700)
    conn.modify(p4.codec.counter_entry("rx_port_counter", None, (0, 0)))  # every index
    assert sum(rx.packets) == 0
    with pytest.raises(P4RuntimeError) as e:
        conn.read_counter("rx_port_counter", 256)
    assert e.value.code == grpc.StatusCode.UNKNOWN and codes_of(e.value) == [C.OUT_OF_RANGE]


# ---------------------------------------------------------------- packet I/O

def test_packet_out_and_in(switch, p4):
    server, state, connect = switch
    a = connect((0, 2))
    b = connect((0, 1), require_primary=False)
    a.set_pipeline(p4)
    sent = []
    state.packet_out_handler = lambda payload, port: sent.append((payload, port))
    a.packet_out(b"\x01\x02hello", 300)
    assert eventually(lambda: sent == [(b"\x01\x02hello", 300)])
    b.packet_out(b"from backup", 1)                                 # refused: backup
    assert eventually(lambda: b.stream_errors)
    assert b.stream_errors[0].canonical_code == C.PERMISSION_DENIED
    assert sent == [(b"\x01\x02hello", 300)]
    # Packet-in goes to the primary only, with its ingress_port.
    state.packet_in_handler(b"punted", 17)
    assert a.packet_in(timeout=3) == (b"punted", 17)
    assert b.packet_in(timeout=0.2) is None


def test_packet_out_with_bad_metadata_is_dropped(ready, p4):
    server, state, conn = ready
    sent = []
    state.packet_out_handler = lambda payload, port: sent.append(port)
    bad = pb.PacketOut(payload=b"x", metadata=[pb.PacketMetadata(metadata_id=1, value=b"\x02\x00")])  # 512 > 9 bits
    conn._requests.put(pb.StreamMessageRequest(packet=bad))
    assert eventually(lambda: conn.stream_errors)
    assert conn.stream_errors[0].canonical_code == C.INVALID_ARGUMENT
    assert conn.stream_errors[0].packet_out.packet_out == bad
    assert sent == []


def test_packet_in_dropped_without_primary(switch, p4):
    server, state, connect = switch
    a = connect()
    a.set_pipeline(p4)
    a.close()
    assert eventually(lambda: server.arbitration.primary is None)
    state.packet_in_handler(b"nobody", 1)
    assert server.packet_io.packet_in_drops == 1


# ------------------------------------------------- clone sessions, registers

def _clone_session(session_id, port):
    return Codec.clone_session(session_id, [port])


def test_clone_sessions_written_read_back_and_checked(ready, p4):
    """The controller's pause clone sessions (PFC_SESSION_BASE + port) behave as on BMv2."""
    from emulator.control.qos import PFC_SESSION_BASE
    _, state, conn = ready
    conn.insert([_clone_session(PFC_SESSION_BASE + 1, 1), _clone_session(PFC_SESSION_BASE + 2, 2)])
    got = conn.read(pb.PacketReplicationEngineEntry(clone_session_entry=pb.CloneSessionEntry()))
    assert [(e.packet_replication_engine_entry.clone_session_entry.session_id,
             e.packet_replication_engine_entry.clone_session_entry.replicas[0].egress_port)
            for e in got] == [(PFC_SESSION_BASE + 1, 1), (PFC_SESSION_BASE + 2, 2)]
    with pytest.raises(WriteError) as ei:
        conn.insert(_clone_session(PFC_SESSION_BASE + 1, 3))
    assert codes_of(ei.value) == [code_pb2.ALREADY_EXISTS]
    conn.modify(_clone_session(PFC_SESSION_BASE + 1, 3))
    conn.delete(_clone_session(PFC_SESSION_BASE + 2, 2))
    with pytest.raises(WriteError) as ei:
        conn.delete(_clone_session(PFC_SESSION_BASE + 2, 2))
    assert codes_of(ei.value) == [code_pb2.NOT_FOUND]
    with pytest.raises(WriteError) as ei:
        conn.insert(_clone_session(0, 1))
    assert codes_of(ei.value) == [code_pb2.INVALID_ARGUMENT]
    with pytest.raises(WriteError) as ei:
        conn.insert(pb.PacketReplicationEngineEntry(
            multicast_group_entry=pb.MulticastGroupEntry(multicast_group_id=1)))
    assert codes_of(ei.value) == [code_pb2.UNIMPLEMENTED]
    assert set(state.clone_sessions) == {PFC_SESSION_BASE + 1}
    assert state.clone_sessions[PFC_SESSION_BASE + 1].replicas[0].egress_port == 3


def _register_id(p4, name="int_tx_bytes"):
    return next(r.preamble.id for r in p4.proto.registers if r.preamble.name.endswith(name))


def test_registers_are_not_runtime_state(ready, p4):
    """fabric.p4's registers hold the data plane's PFC state; like BMv2's
    server (UNIMPLEMENTED), this one neither writes nor reads them -- per
    update / per request, in the spec's batch form: UNKNOWN overall, the
    per-request code in the details and quoted in the message's one line."""
    _, _, conn = ready
    with pytest.raises(WriteError) as ei:
        conn.insert(pb.RegisterEntry(register_id=_register_id(p4, "pfc_paused_until"), index=pb.Index(index=1)))
    assert codes_of(ei.value) == [code_pb2.UNIMPLEMENTED]
    for query in (pb.RegisterEntry(), pb.RegisterEntry(register_id=_register_id(p4)),
                  pb.RegisterEntry(register_id=_register_id(p4), index=pb.Index(index=3))):
        with pytest.raises(ReadError) as ei:
            conn.read(query)
        err = ei.value
        assert err.code == grpc.StatusCode.UNKNOWN and err.covered == 1
        assert [(x.index, x.code) for x in err.errors] == [(0, C.UNIMPLEMENTED)]
        assert err.message.startswith("Read failure: 1 of 1 requests failed: #0 UNIMPLEMENTED: register reads "
                                      "are not supported"), err.message
        assert err.entities == []


def _every_kind():
    """One wildcard request of every kind of ``Entity`` (P4Runtime 1.4.1)."""
    return [pb.Entity(**{f.name: getattr(pb, f.message_type.name)()})
            for f in pb.Entity.DESCRIPTOR.oneofs_by_name["entity"].fields]


def test_a_wildcard_read_of_every_kind_returns_what_the_target_serves(ready, p4):
    """Spec 13.3: the entities of the requests that succeeded are streamed,
    then UNKNOWN with one p4.v1.Error per request in request order -- here
    UNIMPLEMENTED for registers, INVALID_ARGUMENT for a PRE request naming
    neither clone sessions nor multicast groups (as PI), OK for the rest."""
    server, state, conn = ready
    conn.insert(p4.table_entry("my_station", {"eth_dst": 1}, "NoAction"))
    conn.insert(_clone_session(600, 1))
    kinds = _every_kind()
    names = [e.WhichOneof("entity") for e in kinds]
    assert {"register_entry", "table_entry", "counter_entry", "extern_entry", "digest_entry"} <= set(names)
    with pytest.raises(ReadError) as ei:
        conn.read(kinds)
    err = ei.value
    assert err.code == grpc.StatusCode.UNKNOWN and err.covered == len(kinds)
    assert {names[x.index]: x.code for x in err.errors} == {
        "register_entry": C.UNIMPLEMENTED, "packet_replication_engine_entry": C.INVALID_ARGUMENT}
    assert f"2 of {len(kinds)} requests failed" in err.message and "UNIMPLEMENTED: register reads" in err.message
    got = {}
    for e in err.entities:
        got[e.WhichOneof("entity")] = got.get(e.WhichOneof("entity"), 0) + 1
    assert got == {"table_entry": 1, "counter_entry": sum(c.size for c in p4.proto.counters)}
    # The same requests with the two left out: the whole Read succeeds, the same entities.
    fine = [e for e in kinds if e.WhichOneof("entity") not in ("register_entry", "packet_replication_engine_entry")]
    assert conn.read(fine) == err.entities
    # Several kinds in a Read, one failing: the others' entities, its error at its place.
    with pytest.raises(ReadError) as ei:
        conn.read([pb.Entity(table_entry=pb.TableEntry()), pb.Entity(register_entry=pb.RegisterEntry()),
                   pb.Entity(packet_replication_engine_entry=pb.PacketReplicationEngineEntry(
                       clone_session_entry=pb.CloneSessionEntry()))])
    assert [(x.index, x.code) for x in ei.value.errors] == [(1, C.UNIMPLEMENTED)] and ei.value.covered == 3
    assert [e.WhichOneof("entity") for e in ei.value.entities] == ["table_entry", "packet_replication_engine_entry"]


def test_an_empty_entity_is_no_wildcard(ready, p4):
    """Spec 13.2: an Entity with no kind set is INVALID_ARGUMENT (per request)."""
    _, _, conn = ready
    conn.insert(p4.table_entry("my_station", {"eth_dst": 1}, "NoAction"))
    with pytest.raises(ReadError) as ei:
        conn.read([pb.Entity(), pb.Entity(table_entry=pb.TableEntry())])
    assert [(x.index, x.code) for x in ei.value.errors] == [(0, C.INVALID_ARGUMENT)]
    assert "#0 INVALID_ARGUMENT: entity is not set" in ei.value.message
    assert len(ei.value.entities) == 1


def test_an_update_that_is_not_an_update_fails_alone(ready, p4):
    """A Write's updates are parsed one by one: bytes that are no p4.v1.Update
    fail that update (INVALID_ARGUMENT); the others are applied."""
    server, state, _ = ready
    good = pb.WriteRequest(device_id=DEV, election_id=uint128((0, 1)), updates=[pb.Update(
        type=pb.Update.INSERT, entity=pb.Entity(table_entry=p4.table_entry("my_station", {"eth_dst": 1}, "NoAction")))])
    bad_update = b"\x22\x02\xff\xff"     # field 4 (updates), 2 bytes: a varint that never ends
    channel = grpc.insecure_channel(server.address)
    with pytest.raises(grpc.RpcError) as e:
        channel.unary_unary("/p4.v1.P4Runtime/Write")(bad_update + good.SerializeToString(), timeout=5)
    channel.close()
    assert e.value.code() == grpc.StatusCode.UNKNOWN
    assert "1 of 2 updates failed: #0 INVALID_ARGUMENT: update is not a valid p4.v1.Update" in e.value.details()
    assert len(state.tables[p4.table_id("my_station")]) == 1


# ------------------------------------------------- large batches, bad bytes, memory

BIG_BATCH = 10_000      # the memory test's: its parsed protobufs were ~50 MB (see there)
# A failing batch whose one Error per update would make a trailer of ~42 KB,
# 2.6 x gRPC's hard 16 KiB metadata limit: without the server's bound every
# default client's call fails (RESOURCE_EXHAUSTED: "exceeds hard limit").
# 10,000 (~1.2 MB) fails the same way at 20 x the wall time.
FAILING_BATCH = 500


def trailer_size(rpc_error):
    """What gRPC counts against max_metadata_size: name + value (binary ones base64) + 32 per header."""
    import base64
    return sum(len(k) + len(base64.b64encode(v) if k.endswith("-bin") else v.encode()) + 32
               for k, v in rpc_error.trailing_metadata() or ())


def failing_batch(p4):
    """FAILING_BATCH inserts into my_station, which holds 64."""
    return [pb.Update(type=pb.Update.INSERT, entity=pb.Entity(
        table_entry=p4.table_entry("my_station", {"eth_dst": i + 1}, "NoAction")))
        for i in range(FAILING_BATCH)]


def test_big_failing_batch_fits_a_default_client(ready, p4):
    """FAILING_BATCH updates into a 64-entry table, whose per-update details
    would far exceed gRPC's hard metadata limit: the default client (gRPC's
    default 8 KiB metadata limit) gets the batch error with the first
    failures, stays primary, and -- CONTINUE_ON_ERROR, the client's default
    -- the first 64 stay."""
    from emulator.dataplane.p4rt_server.status import GRPC_DEFAULT_MAX_METADATA_BYTES
    server, state, conn = ready
    size = p4.table("my_station").size
    updates = failing_batch(p4)
    with pytest.raises(WriteError) as e:
        conn.write(updates)
    err = e.value
    assert err.code == grpc.StatusCode.UNKNOWN, err.message
    assert 0 < err.covered < FAILING_BATCH
    assert err.errors and err.errors[0].index == size and set(codes_of(err)) == {C.RESOURCE_EXHAUSTED}
    assert f"{FAILING_BATCH - size} of {FAILING_BATCH} updates failed" in err.message
    assert f"#{size} RESOURCE_EXHAUSTED" in err.message and "trailer size limit" in err.message
    assert conn.is_primary
    tid = p4.table_id("my_station")
    assert len(state.tables[tid]) == size
    # The same batch, all-or-none: nothing of it stays; the first real failure is quoted.
    conn.delete([u.entity.table_entry for u in updates[:size]])
    with pytest.raises(WriteError) as e:
        conn.write(updates, atomicity=pb.WriteRequest.ROLLBACK_ON_ERROR)
    assert set(codes_of(e.value)) == {C.ABORTED} and f"#{size} RESOURCE_EXHAUSTED" in e.value.message
    assert conn.is_primary and state.tables[tid] == {}
    # The trailer as gRPC counts it, seen by a raw stub with default options.
    channel = grpc.insecure_channel(server.address)
    req = pb.WriteRequest(device_id=DEV, election_id=uint128((0, 1)), updates=updates)
    with pytest.raises(grpc.RpcError) as e:
        pb_grpc.P4RuntimeStub(channel).Write(req, timeout=60)
    channel.close()
    assert e.value.code() == grpc.StatusCode.UNKNOWN
    assert trailer_size(e.value) <= GRPC_DEFAULT_MAX_METADATA_BYTES
    print(f"trailer of a {FAILING_BATCH}-update failing batch: {trailer_size(e.value)} bytes")


def test_small_batch_details_are_complete(ready, p4):
    """Below the budget every update gets its p4.v1.Error (OK included), as before."""
    _, _, conn = ready
    updates = [p4.table_entry("my_station", {"eth_dst": i % 40 + 1}, "NoAction") for i in range(60)]
    with pytest.raises(WriteError) as e:
        conn.insert(updates)
    assert e.value.covered == 60 and [x.index for x in e.value.errors] == list(range(40, 60))
    assert "trailer size limit" not in e.value.message


GARBAGE = b"\xff" * 11   # a varint that never ends: no protobuf parses it


@pytest.mark.parametrize("method,streaming", [("Write", False), ("Read", True),
                                              ("SetForwardingPipelineConfig", False),
                                              ("GetForwardingPipelineConfig", False), ("Capabilities", False)])
def test_garbage_request_is_invalid_argument(ready, method, streaming):
    server, _, conn = ready
    channel = grpc.insecure_channel(server.address)
    path = f"/p4.v1.P4Runtime/{method}"
    call = channel.unary_stream(path) if streaming else channel.unary_unary(path)
    with pytest.raises(grpc.RpcError) as e:
        result = call(GARBAGE, timeout=5)
        list(result) if streaming else result
    channel.close()
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert "not a valid p4.v1." in e.value.details()
    assert conn.capabilities() == "1.4.1" and conn.is_primary


def test_garbage_stream_message_is_answered_and_the_stream_lives(switch):
    import queue as queue_mod
    server, _, _ = switch
    channel = grpc.insecure_channel(server.address)
    out: queue_mod.Queue = queue_mod.Queue()

    def requests():
        while (item := out.get()) is not None:
            yield item

    stream = channel.stream_stream("/p4.v1.P4Runtime/StreamChannel",
                                   response_deserializer=pb.StreamMessageResponse.FromString)(requests())
    out.put(GARBAGE)
    first = next(stream)
    assert first.WhichOneof("update") == "error" and first.error.canonical_code == C.INVALID_ARGUMENT
    arb = pb.StreamMessageRequest(arbitration=pb.MasterArbitrationUpdate(
        device_id=DEV, election_id=uint128((0, 5))))
    out.put(arb.SerializeToString())
    second = next(stream)
    assert second.WhichOneof("update") == "arbitration" and second.arbitration.status.code == C.OK
    assert server.arbitration.primary is not None
    out.put(None)
    channel.close()


_RSS_SERVER = """
import sys
from emulator.dataplane.p4rt_server import P4RuntimeServer
from emulator.dataplane.state import SwitchState
server = P4RuntimeServer(SwitchState(), 7, 0)
print(server.start(), flush=True)
sys.stdin.read()   # until the test closes it
server.stop(grace=0)
"""


def _proc_status_bytes(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(f"{field}:"))


def test_rejected_updates_give_their_memory_back(p4):
    """10,000 rejected updates in one Write, against a server in its own
    process: its peak RSS during them (VmHWM, reset before) and its RSS after
    them stay within 10 MB of its RSS before; two more such batches do not
    ratchet it up. (Parsed whole, the batch took ~50 MB of pure-Python
    protobuf objects, and RSS stayed up to ~15 MB higher per batch.)"""
    import subprocess
    import sys
    proc = subprocess.Popen([sys.executable, "-c", _RSS_SERVER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        conn = SwitchConnection(f"127.0.0.1:{port}", DEV, timeout=10)
        conn.set_pipeline(p4)
        size = p4.table("my_station").size
        conn.insert([p4.table_entry("my_station", {"eth_dst": i + 1}, "NoAction") for i in range(size)])
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        write = channel.unary_unary("/p4.v1.P4Runtime/Write")
        # Serialized messages concatenated parse as one (repeated fields appended):
        # a batch of n inserts into the full table, without building n Updates here.
        head = pb.WriteRequest(device_id=DEV, election_id=uint128((0, 1))).SerializeToString()
        one = pb.WriteRequest(updates=[pb.Update(type=pb.Update.INSERT, entity=pb.Entity(
            table_entry=p4.table_entry("my_station", {"eth_dst": size + 1}, "NoAction")))]).SerializeToString()

        def rejected(n):
            with pytest.raises(grpc.RpcError) as e:
                write(head + one * n, timeout=60)
            assert e.value.code() == grpc.StatusCode.UNKNOWN
            assert f"{n} of {n} updates failed" in e.value.details()

        rejected(100)                                   # warm-up: the call path's first allocations
        with open(f"/proc/{proc.pid}/clear_refs", "w") as f:
            f.write("5")                                # VmHWM := VmRSS (Linux >= 4.0)
        before = _proc_status_bytes(proc.pid, "VmRSS")
        rejected(BIG_BATCH)
        peak, after = _proc_status_bytes(proc.pid, "VmHWM"), _proc_status_bytes(proc.pid, "VmRSS")
        rejected(BIG_BATCH)
        rejected(BIG_BATCH)
        after3 = _proc_status_bytes(proc.pid, "VmRSS")
        channel.close()
        conn.close()
        mib = 2 ** 20
        print(f"server RSS: {before / mib:.1f} MiB before, peak {peak / mib:.1f} and {after / mib:.1f} "
              f"after {BIG_BATCH} rejected updates, {after3 / mib:.1f} after 3 x {BIG_BATCH}")
        assert peak - before < 10 * mib and after - before < 10 * mib and after3 - before < 10 * mib
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
