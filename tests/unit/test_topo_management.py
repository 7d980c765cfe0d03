"""The topology's ``management:`` section: its schema and its errors, the
address plan of the management networks, ``topo show``, and the switch
process binding its servers inside a namespace (``SwitchConfig.mgmt_netns``)."""
from __future__ import annotations

import os

import pytest
import yaml

from emulator.errors import ConfigError
from emulator.topo import fabric_from_dict, load_fabric, render_fabric
from emulator.topo.addressing import MGMT_HOST
from tests.conftest import REPO

TOPOLOGY = REPO / "topologies" / "clos-2x2-mgmt.yaml"


def base() -> dict:
    return yaml.safe_load(TOPOLOGY.read_text())


def error(data, where: str = "topo.yaml") -> ConfigError:
    with pytest.raises(ConfigError) as e:
        fabric_from_dict(data, where)
    return e.value


def test_the_shipped_file_numbers_both_networks_from_their_subnets():
    f = load_fabric(TOPOLOGY)
    plan = f.addresses
    oob = plan.management_members("out_of_band")
    assert [(m.node, m.netns, m.ifname, m.ip, m.bridge_ifname) for m in oob] == [
        ("mgmt", "mgmt", "mgmt-eth0", "192.168.0.1", "oob-eth1"),
        ("leaf1", "leaf1m", "leaf1m-eth0", "192.168.0.2", "oob-eth2"),
        ("leaf2", "leaf2m", "leaf2m-eth0", "192.168.0.3", "oob-eth3"),
        ("spine1", "spine1m", "spine1m-eth0", "192.168.0.4", "oob-eth4"),
        ("spine2", "spine2m", "spine2m-eth0", "192.168.0.5", "oob-eth5")]
    inb = plan.management_members("in_band")
    assert [(m.node, m.ifname, m.cidr) for m in inb] == [
        ("mgmt", "mgmt-eth1", "192.168.1.1/24"), ("h1", "h1-eth1", "192.168.1.2/24"),
        ("h2", "h2-eth1", "192.168.1.3/24"), ("h3", "h3-eth1", "192.168.1.4/24"),
        ("h4", "h4-eth1", "192.168.1.5/24")]
    assert oob[1].mac == "02:01:c0:a8:00:02" and inb[1].mac == "02:02:c0:a8:01:02"
    macs = [m.mac for m in oob + inb] + [plan.host_mac(h) for h in f.hosts()]
    assert len(set(macs)) == len(macs)
    assert plan.management_ip("out_of_band", "spine2") == "192.168.0.5"
    assert plan.management_ip("in_band", "leaf1") is None
    assert [m.rate_bps for m in f.management] == [1_000_000_000, 10_000_000_000]
    # every interface name fits IFNAMSIZ
    assert all(len(m.ifname) <= 15 and len(m.bridge_ifname) <= 15 for m in oob + inb)


def test_without_the_section_nothing_changes():
    data = base()
    del data["management"]
    f = fabric_from_dict(data)
    assert f.management == () and f.management_net("out_of_band") is None
    assert f.addresses.management_members("in_band") == []
    assert "Management network" not in render_fabric(f)


def test_either_network_alone():
    data = base()
    del data["management"]["in_band"]
    f = fabric_from_dict(data)
    assert [m.kind for m in f.management] == ["out_of_band"]
    assert f.addresses.management_members("in_band") == []


def test_a_server_form_fabric_gives_each_server_one_in_band_interface():
    data = yaml.safe_load((REPO / "topologies" / "rail-2x4.yaml").read_text())
    data["management"] = {"in_band": {"subnet": "172.31.0.0/24", "rate_gbps": 10}}
    f = fabric_from_dict(data)
    members = f.addresses.management_members("in_band")
    assert [m.node for m in members[1:]] == [s.name for s in f.servers()]
    for m, s in zip(members[1:], f.servers()):
        assert m.netns == s.name and m.ifname == f"{s.name}-eth{len(s.all_nics)}"


@pytest.mark.parametrize("edit,field,words", [
    (lambda m: m.clear(), "management", ["give out_of_band, in_band or both"]),
    (lambda m: m["out_of_band"].update(subnet="192.168.0.1/24"), "management.out_of_band.subnet",
     ["not a valid IPv4 prefix", "host bits"]),
    (lambda m: m["out_of_band"].update(subnet="fd00::/64"), "management.out_of_band.subnet",
     ["IPv6"]),
    (lambda m: m["in_band"].update(subnet="192.168.1.0/31"), "management.in_band.subnet",
     ["too small", "/30"]),
    (lambda m: m["in_band"].update(subnet="192.168.0.128/25"), "management.in_band.subnet",
     ["overlaps out_of_band's 192.168.0.0/24"]),
    (lambda m: m["out_of_band"].update(subnet="10.0.128.0/24"), "management.out_of_band.subnet",
     ["overlaps addressing.host_prefix 10.0.0.0/16"]),
    (lambda m: m["out_of_band"].update(rate_gbps=0), "management.out_of_band.rate_gbps", ["> 0"]),
    (lambda m: m["out_of_band"].update(speed=1), "management.out_of_band.speed", ["unknown field"]),
    (lambda m: m["in_band"].pop("rate_gbps"), "management.in_band.rate_gbps", ["required"]),
    (lambda m: m.update(storage={"subnet": "192.168.9.0/24", "rate_gbps": 1}),
     "management.storage", ["unknown field"]),
    # the management host and 4 switches do not fit a /30's two addresses
    (lambda m: m["out_of_band"].update(subnet="192.168.0.0/30"), "management.out_of_band.subnet",
     ["holds 2 addresses", "5 members", "4 switches"]),
    (lambda m: m["in_band"].update(subnet="192.168.1.0/30"), "management.in_band.subnet",
     ["holds 2 addresses", "4 servers"]),
])
def test_bad_sections_are_one_error_naming_the_field(edit, field, words):
    data = base()
    edit(data["management"])
    e = error(data)
    assert e.file == "topo.yaml" and e.field == field, str(e)
    for w in words:
        assert w in e.reason, str(e)
    assert "\n" not in str(e)


def test_a_node_named_as_a_management_namespace_is_refused():
    data = {"name": "t", "nodes": [{"name": "mgmt", "role": "host"}, {"name": "h2", "role": "host"},
                                   {"name": "leaf1", "role": "leaf"}, {"name": "spine1", "role": "spine"}],
            "links": [{"a": "mgmt", "b": "leaf1", "rate_gbps": 100, "delay_us": 1},
                      {"a": "h2", "b": "leaf1", "rate_gbps": 100, "delay_us": 1},
                      {"a": "leaf1", "b": "spine1", "rate_gbps": 100, "delay_us": 1}],
            "management": {"out_of_band": {"subnet": "192.168.0.0/24", "rate_gbps": 1}}}
    e = error(data)
    assert e.field == "nodes[0]" and "'mgmt'" in e.reason and "management host" in e.reason
    data["nodes"][0]["name"] = "leaf1m"
    for link in data["links"]:
        link["a"] = "leaf1m" if link["a"] == "mgmt" else link["a"]
    e = error(data)
    assert e.field == "nodes[0]" and "leaf1's management namespace" in e.reason
    data["management"] = {"in_band": data["management"].pop("out_of_band")}
    fabric_from_dict(data)                   # no out-of-band network: leaf1m is free


def test_an_experiment_s_inline_topology_names_the_topology_field(tmp_path):
    data = base()
    data["management"]["in_band"]["subnet"] = "10.0.0.0/8"
    with pytest.raises(ConfigError) as e:
        fabric_from_dict(data, "exp.yaml", field_prefix="topology")
    assert e.value.field == "topology.management.in_band.subnet"


def test_topo_show_lists_both_networks_and_every_member():
    f = load_fabric(TOPOLOGY)
    text = render_fabric(f)
    assert "Management network out-of-band: 192.168.0.0/24, 1 Gbps" in text
    assert "Management network in-band: 192.168.1.0/24, 10 Gbps" in text
    for kind in ("out_of_band", "in_band"):
        for m in f.addresses.management_members(kind):
            assert m.cidr in text and m.mac in text and m.ifname in text and m.bridge_ifname in text
    assert MGMT_HOST in text


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a network namespace")
def test_a_switch_binds_its_servers_inside_its_management_namespace(tmp_path):
    """P4Runtime and gNMI bound by this thread inside another namespace
    listen there (and not here), the thread itself back home after."""
    import socket
    import subprocess
    from emulator.dataplane.state import SwitchState
    from emulator.dataplane.p4rt_server import P4RuntimeServer
    from emulator.netns import network_at
    name = f"fe-mgmt-test-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        home = os.stat("/proc/thread-self/ns/net").st_ino
        with network_at(f"/var/run/netns/{name}"):
            server = P4RuntimeServer(SwitchState(), 1, 0, host="127.0.0.1")
            port = server.start()
        try:
            assert os.stat("/proc/thread-self/ns/net").st_ino == home
            inside = subprocess.run(["ip", "netns", "exec", name, "ss", "-ltnH"], check=True,
                                    capture_output=True, text=True).stdout
            assert f"127.0.0.1]:{port}" in inside or f"127.0.0.1:{port}" in inside, inside
            with socket.socket() as s:                 # not in this namespace
                assert s.connect_ex(("127.0.0.1", port)) != 0
        finally:
            server.stop()
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


def test_an_experiment_on_bmv2_with_management_networks_is_refused():
    from emulator.experiment.model import experiment_from_dict
    with pytest.raises(ConfigError) as e:
        experiment_from_dict({"name": "x", "topology": str(TOPOLOGY), "target": "bmv2",
                              "traffic": [{"src": "h1", "dst": "h3", "size_bytes": 1000}]},
                             REPO / "experiments" / "x.yaml")
    assert e.value.field == "target" and "need the embedded target" in e.value.reason
