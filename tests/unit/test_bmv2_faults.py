"""Link faults on the BMv2 target (``net/bmv2_faults.py``): the commands
built for them and their timing on a dilated run's wall clock -- no BMv2
needed; the run itself is tests/integration/test_bmv2_faults.py's, which
skips where BMv2 is not installed."""
from __future__ import annotations

from emulator.experiment.faults import compile_faults
from emulator.net.bmv2_faults import Bmv2FaultPlayer, Bmv2FaultStep, bmv2_fault_steps, veth_rx_frames
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
    link = ("leaf1", "spine1")
    assert steps == [Bmv2FaultStep(20_000, "leaf1", "ip", (f"ip link set dev {a} down",), link),
                     Bmv2FaultStep(20_000, "spine1", "ip", (f"ip link set dev {b} down",), link),
                     Bmv2FaultStep(50_000, "leaf1", "ip", (f"ip link set dev {a} up",), link),
                     Bmv2FaultStep(50_000, "spine1", "ip", (f"ip link set dev {b} up",), link)]


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


def test_the_players_record_is_each_step_as_run_and_what_each_downed_receiver_got():
    now = [0]
    counts = iter([{"h1->leaf1": 7, "leaf1->h1": 3}, {"h1->leaf1": 107, "leaf1->h1": 53}])

    def sleep(s: float) -> None:
        now[0] += max(1, int(s * 1e9))
    step = Bmv2FaultStep(10, "h1", "ip", ("ip link set dev h1-eth0 down",), ("h1", "leaf1"))
    player = Bmv2FaultPlayer([step], lambda st: None, dilation=1000, clock_ns=lambda: now[0],
                             sleep=sleep, rx_frames=lambda: next(counts))
    player.run(t0_ns=0)
    assert player.record() == {
        "steps": [{"at_ns": 10, "node": "h1", "via": "ip", "commands": ["ip link set dev h1-eth0 down"],
                   "link": ["h1", "leaf1"], "applied_ns": 10}],
        "rx_frames": {"h1->leaf1": 100, "leaf1->h1": 50}}


def test_a_veths_received_frames_are_read_from_ip_s_j():
    import subprocess
    out = subprocess.run(["ip", "-s", "-j", "link", "show", "dev", "lo"], capture_output=True,
                         text=True, check=True).stdout
    assert veth_rx_frames(out) >= 0
    assert veth_rx_frames('[{"ifname":"x","stats64":{"rx":{"packets":42}}}]') == 42


def test_on_bmv2_a_downed_direction_lost_what_its_sender_sent_and_its_receivers_veth_never_got(tmp_path):
    """summary.json's faults on BMv2: per direction, sent (the NIC's
    tx_packets, the switch port's tx + pause) less what the receiving veth
    counted; the transitions at the times the player ran them."""
    import json
    from emulator.experiment.fault_results import fault_summary
    from emulator.experiment.model import experiment_from_dict
    exp = experiment_from_dict({
        "name": "f", "topology": str(REPO / "topologies/clos-2x2.yaml"), "target": "bmv2",
        "time": "dilated", "dilation": 1000,
        "traffic": [{"src": "h1", "dst": "h3", "size_bytes": 1000}],
        "faults": [{"kind": "link_down", "link": "h1:leaf1", "at_us": 50},
                   {"kind": "link_up", "link": "h1:leaf1", "at_us": 550}]}, REPO / "experiments" / "f.yaml")
    port = next(p.port_no for p in FABRIC.ports("leaf1") if p.peer == "h1")
    ports = [{"node": "leaf1", "peer": "h1", "port": port, "tx_packets": 60,
              "priorities": [{"priority": 3, "pause_tx": 2}]}]
    steps = [{"at_ns": t, "node": n, "via": "ip", "commands": [], "link": ["h1", "leaf1"], "applied_ns": t + d}
             for t, d in ((50_000, 900), (550_000, 1_700)) for n in ("h1", "leaf1")]
    record = tmp_path / "bmv2.faults.json"
    record.write_text(json.dumps({"steps": steps, "rx_frames": {"h1->leaf1": 90, "leaf1->h1": 51}}))
    block = fault_summary(exp, {}, {"h1": {"tx_packets": 100}}, bmv2_path=record, ports=ports)
    lost = {e.direction: (e.dropped_down_frames, e.reported) for e in block.ends}
    assert lost == {"h1->leaf1": (10, True), "leaf1->h1": (11, True)}
    assert block.lost_frames == 21
    assert [f["applied_ns"] for f in block.faults] == [[50_900], [551_700]]
