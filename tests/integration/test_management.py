"""The management networks for real (``management:``; docs/management.md): the
controller programs every switch over the out-of-band network, each switch's
P4Runtime and gNMI servers listen on its management address in its management
namespace and nowhere else, a gNMI client in the management host reads a
switch directly, management traffic never reaches the compute fabric's
switches, and a virtual-time run over it is the same run as without it
(the compute fabric's results byte for byte: inband-progress)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from emulator.experiment.model import experiment_from_dict
from emulator.net.fabric import FabricNet
from emulator.net.management import GNMI_PORT, P4RUNTIME_PORT
from emulator.topo import load_fabric
from emulator.topo.addressing import MGMT_HOST, switch_mgmt_netns
from tests.conftest import REPO
from tests.reruns import without_wall

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]
TOPOLOGY = REPO / "topologies" / "clos-2x2-mgmt.yaml"

GNMI_GET = textwrap.dedent("""
    import sys, grpc
    from gnmi import gnmi_pb2 as pb, gnmi_pb2_grpc as pb_grpc
    from emulator.dataplane.gnmi_server.paths import parse_path
    with grpc.insecure_channel(sys.argv[1]) as ch:
        get = pb_grpc.gNMIStub(ch).Get(pb.GetRequest(
            path=[parse_path("/interfaces/interface/state/counters/in-pkts")], encoding=pb.PROTO),
            timeout=float(sys.argv[2]))
    print("updates", len(get.notification[0].update))
""")


def _listeners(node) -> set[str]:
    """LOCAL:PORT of every TCP listener in ``node``'s namespace (v4-mapped shown as v4)."""
    out = node.cmd("ss -ltnH")
    return {re.sub(r"^\[::ffff:(.*)\]", r"\1", line.split()[3]) for line in out.splitlines()
            if line.strip()}


def _root_listener_pids() -> set[int]:
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return {int(p) for p in re.findall(r"pid=(\d+)", out)}


def test_switches_serve_only_on_the_out_of_band_network(tmp_path):
    fabric = load_fabric(TOPOLOGY)
    plan = fabric.addresses
    with FabricNet(fabric, tmp_path, dilation=1000) as fnet:
        # programmed over it: the fabric forwards
        servers = [fnet.host(s.name) for s in fabric.servers()]
        assert fnet.net.ping(servers, timeout="2") == 0
        counters = fnet.controller.read_port_counters()
        assert counters[("leaf1", 1)]["rx_packets"] > 0
        for sw in fabric.switches():
            ip = plan.management_ip("out_of_band", sw.name)
            assert _listeners(fnet.net.get(switch_mgmt_netns(sw.name))) == \
                {f"{ip}:{P4RUNTIME_PORT}", f"{ip}:{GNMI_PORT}"}, sw.name
        for name in [s.name for s in fabric.servers()] + [MGMT_HOST]:
            assert _listeners(fnet.net.get(name)) == set(), name
        switch_pids = {fnet.switch(sw.name).proc.pid for sw in fabric.switches()}
        assert not switch_pids & _root_listener_pids()     # nothing on 127.0.0.1 or elsewhere
        # a client in the management host reaches a switch's gNMI directly
        script = tmp_path / "get.py"
        script.write_text(GNMI_GET)
        leaf2 = plan.management_ip("out_of_band", "leaf2")
        out = fnet.net.get(MGMT_HOST).cmd(f"{sys.executable} {script} {leaf2}:{GNMI_PORT} 10 2>&1")
        assert "updates 4" in out, out
        # ... and a server, whose compute fabric has no route there, does not
        out = fnet.host("h1").cmd(f"{sys.executable} {script} {leaf2}:{GNMI_PORT} 3 2>&1")
        assert "updates " not in out and "DEADLINE_EXCEEDED" in out, out


def test_management_traffic_never_crosses_the_compute_fabric(tmp_path):
    fabric = load_fabric(TOPOLOGY)
    mgmt_inband = fabric.addresses.management_ip("in_band", MGMT_HOST)
    h4_inband = fabric.addresses.management_ip("in_band", "h4")
    with FabricNet(fabric, tmp_path, dilation=1000) as fnet:
        fnet.snapshot_switch_stats()                    # counters cleared
        for _ in range(5):                              # out-of-band: P4Runtime reads
            fnet.controller.read_port_counters()
        h1 = fnet.host("h1")                            # in-band: a server to the head and a peer
        assert " 0% packet loss" in h1.cmd(f"ping -c 20 -i 0.01 -W 2 {mgmt_inband}")
        assert " 0% packet loss" in h1.cmd(f"ping -c 20 -i 0.01 -W 2 {h4_inband}")
        stats = fnet.snapshot_switch_stats()
    for sw, s in stats.items():
        assert s["rx_frames"] == 0, sw
        assert all(port["tx_packets"] == 0 for port in s["ports"]), sw


def _virtual_run(out: Path) -> dict:
    from emulator.experiment.dilation import run_with_dilation
    exp = experiment_from_dict({
        "name": "mgmt-vtime", "topology": str(TOPOLOGY), "time": "virtual",
        "switch": {"buffer_bytes": 1_000_000},
        "traffic": [{"src": "h1", "dst": "h3", "size_bytes": 200_000},
                    {"src": "h2", "dst": "h3", "size_bytes": 200_000}],
        "telemetry": {"sample_us": 10},
    }, REPO / "experiments" / "inline.yaml")
    return run_with_dilation(exp, out, plots=False)


def test_a_virtual_time_run_serves_p4runtime_and_gnmi_on_the_management_network(tmp_path):
    s1 = _virtual_run(tmp_path / "a")
    assert s1["complete"] and s1["time"] == "virtual"
    for name in ("telemetry.csv", "queue_depth.csv", "flow_rate.csv"):
        assert (tmp_path / "a" / name).stat().st_size > 0, name
    cfg = json.loads((tmp_path / "a" / "run" / "leaf1.switch.json").read_text())
    assert cfg["grpc_host"] == "192.168.0.2" and cfg["gnmi_listen"] == f"192.168.0.2:{GNMI_PORT}"


def test_progress_reports_over_in_band_share_no_queue_with_the_compute_fabric(tmp_path):
    """The shipped inband-progress run: every server's reports reach the head
    over the in-band bridge, and the compute fabric's results are those of the
    same run on the same fabric without management networks, byte for byte."""
    from emulator.experiment.dilation import run_with_dilation
    from emulator.experiment.model import read_experiment_data
    path = REPO / "experiments" / "inband-progress.yaml"
    data = read_experiment_data(path)
    with_mgmt = run_with_dilation(experiment_from_dict(data, path), tmp_path / "mgmt",
                                  plots=False)
    plain = {**data, "topology": "../topologies/clos-2x2.yaml"}
    without = run_with_dilation(experiment_from_dict(plain, path), tmp_path / "plain",
                                plots=False)
    assert with_mgmt["complete"] and with_mgmt["time"] == "virtual"
    mgmt = json.loads((tmp_path / "mgmt" / "management.json").read_text())
    assert sorted(mgmt["head"]) == ["h1", "h2", "h3", "h4"]
    assert all(h["reports"] > 0 for h in mgmt["head"].values())
    assert mgmt["head"]["h1"]["last"]["h1"]["done"] is True          # h1's flow, reported done
    inband = mgmt["bridges"]["in_band"]
    assert inband["inband-eth1"]["member"] == "mgmt" and inband["inband-eth1"]["tx_packets"] > 0
    oob = mgmt["bridges"]["out_of_band"]          # the collector's and controller's gRPC
    assert all(p["rx_packets"] > 0 for p in oob.values())
    # the compute fabric: the same flows, ports, queues, telemetry, as without management
    for key in ("flows", "ports"):
        assert without_wall(with_mgmt[key]) == without_wall(without[key]), key
    for name in ("telemetry.csv", "queue_depth.csv", "pfc_events.csv", "flow_rate.csv"):
        assert (tmp_path / "mgmt" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes(), name
    assert not (tmp_path / "plain" / "management.json").exists()
