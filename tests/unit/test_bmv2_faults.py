"""Link faults on the BMv2 target (``net/bmv2_faults.py``): the commands
built for them and their timing on a dilated run's wall clock -- no BMv2
needed; the run itself is tests/integration/test_bmv2_faults.py's, which
skips where BMv2 is not installed."""
from __future__ import annotations

from emulator.experiment.faults import compile_faults
from emulator.net.bmv2_faults import Bmv2FaultPlayer, Bmv2FaultStep, bmv2_fault_steps
from emulator.schema.experiment import ExperimentSpec
from emulator.topo import load_fabric
from tests.conftest import REPO

FABRIC = load_fabric(REPO / "topologies/clos-2x2.yaml")
MTU_FRAME = 1098                 # a 1024-byte MTU RoCE frame (tests/unit/test_bmv2_target.py)


def ends(*faults) -> dict:
    spec = ExperimentSpec.model_validate({
        "name": "f", "topology": str(REPO / "topologies/clos-2x2.yaml"),
        "traffic": [{"src": "h1", "dst": "h3", "size_bytes": 1000}], "faults": list(faults)})
    return compile_faults(spec, FABRIC, "f.yaml")


def ifname(node: str, peer: str) -> str:
    return next(p.ifname for p in FABRIC.ports(node) if p.peer == peer)


def test_a_link_down_then_up_sets_both_ends_of_its_veth_pair_down_then_up():
    steps = bmv2_fault_steps(FABRIC, ends({"kind": "link_down", "link": "leaf1:spine1", "at_us": 20},
                                          {"kind": "link_up", "link": "leaf1:spine1", "at_us": 50}),
                             dilation=100, mtu_frame_bytes=MTU_FRAME)
    a, b = ifname("leaf1", "spine1"), ifname("spine1", "leaf1")
    assert steps == [Bmv2FaultStep(20_000, "leaf1", "ip", (f"ip link set dev {a} down",)),
                     Bmv2FaultStep(20_000, "spine1", "ip", (f"ip link set dev {b} down",)),
                     Bmv2FaultStep(50_000, "leaf1", "ip", (f"ip link set dev {a} up",)),
                     Bmv2FaultStep(50_000, "spine1", "ip", (f"ip link set dev {b} up",))]


def test_a_flap_is_its_downs_and_ups_and_a_host_link_goes_down_in_the_hosts_namespace_too():
    steps = bmv2_fault_steps(FABRIC, ends({"kind": "link_flap", "link": "h1:leaf1", "at_us": 10,
                                           "period_us": 20, "count": 2}), 100, MTU_FRAME)
    assert [(s.at_ns, s.node, s.commands[0].split()[-1]) for s in steps] == [
        (10_000, "h1", "down"), (10_000, "leaf1", "down"), (20_000, "h1", "up"), (20_000, "leaf1", "up"),
        (30_000, "h1", "down"), (30_000, "leaf1", "down"), (40_000, "h1", "up"), (40_000, "leaf1", "up")]
    assert steps[0].commands == (f"ip link set dev {ifname('h1', 'leaf1')} down",)


def test_a_degrade_sets_the_sending_ports_queues_to_the_dilated_rate_in_mtu_frames_and_back():
    steps = bmv2_fault_steps(FABRIC, ends({"kind": "link_degrade", "link": "leaf1:spine1",
                                           "direction": "a_to_b", "at_us": 5, "rate_fraction": 0.25,
                                           "until_us": 40}), dilation=10_000, mtu_frame_bytes=MTU_FRAME)
    port = next(p.port_no for p in FABRIC.ports("leaf1") if p.peer == "spine1")
    # 100 Gb/s x 0.25 / 10000 = 2.5 Mb/s; 1098 + 24 bytes a frame on the wire: 278.5 frames/s
    assert [(s.at_ns, s.node, s.via) for s in steps] == [(5_000, "leaf1", "thrift"), (40_000, "leaf1", "thrift")]
    assert steps[0].commands == tuple(f"set_queue_rate 279 {port} {prio}" for prio in range(8))
    assert steps[1].commands == tuple(f"set_queue_rate 1114 {port} {prio}" for prio in range(8))


def test_the_player_runs_each_step_at_t0_plus_its_fabric_time_dilated():
    now = [1_000]
    ran = []
    steps = [Bmv2FaultStep(30, "b", "ip", ("y",)), Bmv2FaultStep(10, "a", "ip", ("x",))]

    def sleep(s: float) -> None:            # the wall clock moves only when slept on
        now[0] += max(1, int(s * 1e9))
    player = Bmv2FaultPlayer(steps, lambda st: ran.append((now[0], st.node)), dilation=1000,
                             clock_ns=lambda: now[0], sleep=sleep)
    player.run(t0_ns=1_000)
    assert ran == [(1_000 + 10 * 1000, "a"), (1_000 + 30 * 1000, "b")]
    assert [fabric for _, fabric in player.applied] == [10, 30]


def test_a_player_stopped_before_a_step_runs_it_not():
    ran = []
    player = Bmv2FaultPlayer([Bmv2FaultStep(10**15, "a", "ip", ("x",))], ran.append, dilation=1)
    player.start(t0_ns=0)
    player.stop()
    assert ran == [] and player.error is None
