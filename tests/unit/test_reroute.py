"""The controller's reroute (``control/reroute.py``) over real gRPC to the
embedded target's P4Runtime servers (one per switch of a clos-2x2, no
namespaces), on a manual clock: a port's report, the controller's writes
timed for report + reaction, applied by the switch at that fabric time and
not before; a link back up restores exactly what the install wrote."""
from __future__ import annotations

import contextlib

import ipaddress
import socket
import threading

import pytest
from google.rpc import code_pb2

from emulator.clock import NEVER_NS, ManualClock
from emulator.control.controller import FabricController
from emulator.control.p4rt_errors import P4RuntimeError
from emulator.dataplane import switch as switch_mod
from emulator.dataplane.p4rt_server import P4RuntimeServer
from emulator.dataplane.port_status import PortEvent, PortStatusWatch
from emulator.dataplane.state import SwitchState
from emulator.dataplane.switch import EmbeddedSwitch
from emulator.errors import ConfigError
from emulator.experiment.fault_results import reroutes_by_run_end
from emulator.experiment.faults import check_faults, compile_faults, switch_port_rx_down, switch_reboots
from emulator.schema.experiment import ExperimentSpec
from emulator.schema.faults import DownInterval
from emulator.p4.p4info import P4Info
from emulator.schema.switch import PortConfig, SwitchConfig
from emulator.topo import fabric_from_dict, load_fabric
from tests.conftest import REPO
from tests.unit.test_tm_switch import PORTS, StopAt

FABRIC = load_fabric(REPO / "topologies" / "clos-2x2.yaml")
REACTION_NS = 200_000


def port_to(node: str, peer: str) -> int:
    return next(p.port_no for p in FABRIC.ports(node) if p.peer == peer)


@contextlib.contextmanager
def rerouting_fabric():
    """Every switch's server on one manual clock, the controller installed
    and rerouting: (servers, controller, clock, its rerouter)."""
    clock = ManualClock()
    servers = {}
    for sw in FABRIC.switches():
        state = SwitchState()
        state.fabric_now_ns = clock.now_ns
        servers[sw.name] = P4RuntimeServer(state, FABRIC.device_id(sw.name), 0)
        servers[sw.name].start()
    ctl = FabricController(FABRIC, {n: (s.address, s.device_id) for n, s in servers.items()})
    try:
        ctl.connect()
        ctl.install()
        yield servers, ctl, clock, ctl.enable_reroute(REACTION_NS)
    finally:
        ctl.close()
        for s in servers.values():
            s.stop(grace=0)


@pytest.fixture
def live():
    """Every switch's server on one manual clock, the controller installed and rerouting."""
    with rerouting_fabric() as (servers, ctl, clock, _):
        yield servers, ctl, clock


def held(servers) -> dict[str, set[bytes]]:
    """Every switch's table entries, ECMP members and groups."""
    out = {}
    for name, s in servers.items():
        with s.state.lock:
            routes = {repr(e) for t in s.state.tables.values() for e in t.values()}
            prof = next(iter(s.state.action_profiles.values()))
            members = {repr((i, m)) for i, m in prof.members.items()}
            groups = {repr((i, g)) for i, g in prof.groups.items()}
        out[name] = routes | members | groups
    return out


def route_ports(server, prefix: str) -> set[int]:
    """The egress ports ipv4_lpm sends ``prefix`` to (its member, or its group's members)."""
    net = ipaddress.IPv4Network(prefix)
    want = ("lpm", int(net.network_address), net.prefixlen)
    with server.state.lock:
        tid = server.contract.table_id("ipv4_lpm")
        prof = next(iter(server.state.action_profiles.values()))
        for e in server.state.tables[tid].values():
            if want in e.match.values():
                ids = ([m for m, _ in prof.groups[e.group_id].members] if e.group_id is not None
                       else [e.member_id])
                # set_nexthop(port, smac, dmac): the port is its first parameter
                return {prof.members[i].params[0][1] for i in ids}
    return set()


def report(server, port: int, up: bool, at_ns: int) -> bool:
    """The switch's loop reporting a port: returns once the controller answered."""
    return server.state.port_status_handler(port, up, at_ns)


def test_a_link_down_reroutes_at_the_report_plus_the_reaction_and_not_before(live):
    servers, ctl, clock = live
    before = held(servers)
    clock.advance(5_000)
    assert report(servers["leaf1"], port_to("leaf1", "spine1"), False, 5_000) is True
    at = 5_000 + REACTION_NS
    # every write is in (the answer came after them), none applied yet
    assert held(servers) == before
    queued = {n for n, s in servers.items() if s.state.next_write_ns < NEVER_NS}
    assert queued == {"leaf1", "leaf2", "spine1"}
    assert {s.state.next_write_ns for n, s in servers.items() if n in queued} == {at}
    for s in servers.values():
        s.port_events.apply_due(at - 1)
    assert held(servers) == before
    for s in servers.values():
        s.port_events.apply_due(at)
    after = held(servers)
    assert after["spine2"] == before["spine2"]
    assert after["leaf2"] != before["leaf2"] and after["leaf1"] != before["leaf1"]
    (rr,) = ctl.rerouter.reroutes
    assert rr["detected_ns"] == 5_000 and rr["converged_ns"] == at
    assert rr["programmed"] == ["leaf1", "leaf2", "spine1"]
    assert rr["links_down"] == [("leaf1", "spine1")]
    # the link's other end reports it too: nothing more to write
    assert report(servers["spine1"], port_to("spine1", "leaf1"), False, 5_000) is True
    assert len(ctl.rerouter.reroutes) == 1 and len(ctl.rerouter.reports) == 2
    assert all(s.state.next_write_ns == NEVER_NS for s in servers.values())


def test_the_dead_next_hop_leaves_the_ecmp_group(live):
    servers, ctl, clock = live
    subnet1 = str(FABRIC.addresses.leaf_subnet(FABRIC.node("leaf1")))
    leaf2 = servers["leaf2"]
    assert route_ports(leaf2, subnet1) == {port_to("leaf2", "spine1"), port_to("leaf2", "spine2")}
    report(servers["leaf1"], port_to("leaf1", "spine1"), False, 1_000)
    for s in servers.values():
        s.port_events.apply_due(1_000 + REACTION_NS)
    assert route_ports(leaf2, subnet1) == {port_to("leaf2", "spine2")}


def test_a_link_back_up_restores_what_the_install_wrote(live):
    servers, ctl, clock = live
    before = held(servers)
    p = port_to("leaf1", "spine1")
    report(servers["leaf1"], p, False, 1_000)
    clock.advance(2_000)
    report(servers["leaf1"], p, True, 2_000)
    for s in servers.values():
        s.port_events.apply_due(1_000 + REACTION_NS)
    assert held(servers) != before
    for s in servers.values():
        s.port_events.apply_due(2_000 + REACTION_NS)
    assert held(servers) == before
    assert [r["converged_ns"] for r in ctl.rerouter.results()["reroutes"]] == \
        [1_000 + REACTION_NS, 2_000 + REACTION_NS]


def test_a_write_timed_for_the_switchs_past_is_refused(live):
    servers, ctl, clock = live
    clock.advance(10_000)
    station = ctl.p4info.table_entry("my_station", {"eth_dst": "02:00:00:00:aa:01"}, "NoAction")
    with pytest.raises(P4RuntimeError) as e:
        ctl.conns["leaf1"].insert([station], at_ns=10_000)
    assert e.value.code == code_pb2.OUT_OF_RANGE or "OUT_OF_RANGE" in str(e.value)


def test_without_a_controller_a_report_waits_for_nobody():
    state = SwitchState()
    server = P4RuntimeServer(state, 1, 0)
    server.start()
    try:
        done = []
        t = threading.Thread(target=lambda: done.append(state.port_status_handler(1, False, 10)))
        t.start()
        t.join(5)
        assert done == [False]
    finally:
        server.stop(grace=0)


def test_a_port_sees_its_links_faults_a_link_delay_later_in_order():
    ports = [PortConfig(port_no=2, ifname="s-eth2", rate_bps=10**9, delay_ns=1_000,
                        rx_down=[DownInterval(from_ns=5_000, until_ns=9_000)]),
             PortConfig(port_no=1, ifname="s-eth1", rate_bps=10**9, delay_ns=3_000,
                        rx_down=[DownInterval(from_ns=3_000, until_ns=NEVER_NS)])]
    w = PortStatusWatch(ports)
    assert w.next_ns() == 6_000
    assert w.due(5_999) == []
    assert w.due(6_000) == [PortEvent(6_000, 1, False), PortEvent(6_000, 2, False)]
    assert w.due(NEVER_NS - 1) == [PortEvent(10_000, 2, True)]
    assert w.next_ns() == NEVER_NS


TOPO = {"name": "t", "clos": {"spines": 2, "leaves": 2, "hosts_per_leaf": 1,
                              "host_link": {"rate_gbps": 10, "delay_us": 1},
                              "fabric_link": {"rate_gbps": 10, "delay_us": 1}},
        "addressing": {"host_prefix": "10.0.0.0/16"}}


def _spec(**kw) -> ExperimentSpec:
    return ExperimentSpec.model_validate({
        "name": "f", "topology": TOPO, "traffic": [{"src": "h1", "dst": "h2", "size_bytes": 1000}],
        "faults": [{"kind": "link_down", "link": "leaf1:spine1", "at_us": 50, "direction": "a_to_b"}],
        **kw})





def test_a_reaction_within_the_lookahead_is_refused_in_one_line():
    fabric = fabric_from_dict(TOPO)
    check_faults(_spec(), fabric, "f.yaml")
    with pytest.raises(ConfigError) as e:
        check_faults(_spec(controller={"reaction_us": 1.0}), fabric, "f.yaml")
    assert "controller.reaction_us" in str(e.value) and "\n" not in str(e.value)


def test_only_the_receiving_port_of_a_down_direction_watches_it():
    class Exp:
        spec = _spec()
        fabric = fabric_from_dict(TOPO)
        source = "f.yaml"
    got = switch_port_rx_down(Exp)
    spine_port = next(p.port_no for p in Exp.fabric.ports("spine1") if p.peer == "leaf1")
    assert list(got) == [("spine1", spine_port)]
    assert [(d.from_ns, d.until_ns) for d in got[("spine1", spine_port)]] == [(50_000, NEVER_NS)]


@pytest.mark.parametrize("order", [("leaf1", "leaf2"), ("leaf2", "leaf1")])
def test_a_switch_down_is_routed_around_and_back_up_is_programmed_again(live, order):
    servers, ctl, clock = live
    before = held(servers)
    spine1 = servers["spine1"]
    spine1.state.wipe()                            # what its loop does as it goes down
    assert spine1.state.switch_status_handler(False, 1_000) is True
    assert held(servers)["spine1"] != before["spine1"]
    for leaf in order:                            # its neighbours see its links go dark
        report(servers[leaf], port_to(leaf, "spine1"), False, 2_000)
    assert spine1.state.next_write_ns == NEVER_NS  # nothing is written to a switch that is off
    for s in servers.values():
        s.port_events.apply_due(2_000 + REACTION_NS)
    subnet1 = str(FABRIC.addresses.leaf_subnet(FABRIC.node("leaf1")))
    assert route_ports(servers["leaf2"], subnet1) == {port_to("leaf2", "spine2")}
    clock.advance(10_000)
    back = 10_000 + REACTION_NS                   # its links come up then (experiment/faults.py)
    assert spine1.state.switch_status_handler(True, 10_000) is True
    spine1.port_events.apply_due(back)
    assert held(servers)["spine1"] == before["spine1"]      # programmed as the install did
    for leaf in order:
        report(servers[leaf], port_to(leaf, "spine1"), True, back + 1_000)
    for s in servers.values():
        s.port_events.apply_due(back + 1_000 + REACTION_NS)
    assert held(servers) == before
    rr = ctl.rerouter.results()["reroutes"]
    got = [(r["detected_ns"], r["converged_ns"], r["programmed"]) for r in rr]
    # both leaves' reports at 2 us are one reroute, whichever reached the controller first
    assert got[:2] == [(2_000, 2_000 + REACTION_NS, ["leaf1", "leaf2"]), (10_000, back, ["spine1"])]
    assert rr[0]["links_down"] == [("leaf1", "spine1"), ("leaf2", "spine1")]
    assert rr[1]["reinstalled"] == "spine1"
    assert got[2:] == [(back + 1_000, back + 1_000 + REACTION_NS, ["leaf1", "leaf2"])]


def test_a_switch_down_and_up_compile_into_its_links_and_its_reboot():
    class Exp:
        spec = _spec(faults=[{"kind": "switch_down", "switch": "spine1", "at_us": 10},
                             {"kind": "switch_up", "switch": "spine1", "at_us": 30}],
                     controller={"reaction_us": 5})
        fabric = fabric_from_dict(TOPO)
        source = "f.yaml"
    ends = compile_faults(Exp.spec, Exp.fabric, "f.yaml")
    assert sorted(ends) == [("leaf1", "spine1"), ("leaf2", "spine1"), ("spine1", "leaf1"),
                            ("spine1", "leaf2")]
    assert {tuple((d.from_ns, d.until_ns) for d in e.down) for e in ends.values()} == {((10_000, 35_000),)}
    assert {sw: [(d.from_ns, d.until_ns) for d in v] for sw, v in switch_reboots(Exp).items()} == \
        {"spine1": [(10_000, 30_000)]}
    with pytest.raises(ConfigError, match=r"faults\[0\]\.switch: 'h1' is not a switch"):
        compile_faults(_spec(faults=[{"kind": "switch_down", "switch": "h1", "at_us": 1}]),
                       Exp.fabric, "f.yaml")
    with pytest.raises(ConfigError, match=r"faults\[0\]"):
        compile_faults(_spec(faults=[{"kind": "switch_up", "switch": "spine1", "at_us": 1}]),
                       Exp.fabric, "f.yaml")


def test_the_switchs_loop_reports_at_the_exact_fabric_times_and_a_reboot_wipes_it(tmp_path, monkeypatch):
    socks = {p["ifname"]: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for p in PORTS}
    monkeypatch.setattr(switch_mod, "open_port_socket", lambda ifname: socks[ifname][0])
    ports = [dict(p) for p in PORTS]                  # delay 1000 ns each
    ports[1]["rx_down"] = [{"from_ns": 5_000, "until_ns": 9_000}]
    cfg = SwitchConfig.model_validate({"name": "s1", "device_id": 3, "grpc_port": 1, "ports": ports,
                                       "reboots": [{"from_ns": 20_000, "until_ns": 30_000}]})
    clock = StopAt(40_000)
    sw = clock.switch = EmbeddedSwitch(cfg, P4Info.load(), clock)
    seen = []
    sw.state.port_status_handler = lambda port, up, at: seen.append((clock.now_ns(), port, up, at)) or True
    sw.state.switch_status_handler = lambda up, at: seen.append((clock.now_ns(), "switch", up, at)) or True
    sw.state.tables = {7: {"k": "entry"}}
    try:
        sw.run()
    finally:
        sw.close()
        for pair in socks.values():
            for s in pair:
                s.close()
    assert seen == [(6_000, 2, False, 6_000), (10_000, 2, True, 10_000),
                    (20_000, "switch", False, 20_000), (30_000, "switch", True, 30_000)]
    assert sw.state.tables == {7: {}}                  # the reboot took the entries
    assert [e["answered"] for e in sw.stats()["port_events"]] == [True] * 4


def test_a_timed_write_that_fails_when_applied_is_counted_not_lost(live):
    servers, ctl, clock = live
    station = ctl.p4info.table_entry("my_station", {"eth_dst": "02:00:00:00:aa:01"}, "NoAction")
    ctl.conns["leaf1"].delete([station], at_ns=5_000)      # no such entry: fails at 5 us
    server = servers["leaf1"]
    server.port_events.apply_due(4_999)
    assert server.state.failed_timed_writes == 0 and server.state.next_write_ns == 5_000
    server.port_events.apply_due(5_000)
    assert server.state.failed_timed_writes == 1 and server.state.next_write_ns == NEVER_NS


def test_a_reroute_due_after_the_runs_end_is_reported_due_not_converged():
    rr = reroutes_by_run_end({"reaction_ns": 1_000, "reports": [], "reroutes": [
        {"detected_ns": 51_000, "converged_ns": 52_000}, {"detected_ns": 90_000, "converged_ns": 91_000}]},
        end_ns=60_000)
    assert rr["reroutes"] == [{"detected_ns": 51_000, "converged_ns": 52_000},
                              {"detected_ns": 90_000, "converged_ns": None, "due_ns": 91_000}]


def test_a_reroute_the_controller_cannot_write_fails_the_reporting_switch_at_once(live):
    servers, ctl, clock = live
    servers["leaf2"].stop(grace=0)                 # its writes cannot be made
    port = port_to("leaf1", "spine1")
    with pytest.raises(RuntimeError, match=f"the controller could not handle port {port}'s status"):
        report(servers["leaf1"], port, False, 1_000)
