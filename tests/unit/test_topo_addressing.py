"""The address plan: unique, deterministic, inside the configured prefix."""
from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from emulator.topo import AddressPlan, fabric_from_dict, load_fabric, mac_to_int

TOPOS = Path(__file__).resolve().parents[2] / "topologies"
ALL_FILES = sorted(TOPOS.glob("*.yaml"))
LINK = {"rate_gbps": 100, "delay_us": 1}


def snapshot(fabric):
    plan = AddressPlan(fabric)
    hosts = {h.name: (plan.host_ip(h), plan.host_mac(h), plan.host_ifname(h),
                      plan.host_gateway(h), plan.gateway_mac(h), plan.host_cidr(h))
             for h in fabric.hosts()}
    leaves = {l.name: (plan.leaf_subnet(l), plan.leaf_gateway(l)) for l in fabric.leaves()}
    rmacs = {s.name: plan.router_mac(s) for s in fabric.switches()}
    return hosts, leaves, rmacs


def test_clos_2x2_plan():
    f = load_fabric(TOPOS / "clos-2x2.yaml")
    a = f.addresses
    assert [a.host_ip(h) for h in ("h1", "h2", "h3", "h4")] == [
        "10.0.1.1", "10.0.1.2", "10.0.2.1", "10.0.2.2"]
    assert a.host_mac("h3") == "02:00:0a:00:02:01"
    assert a.host_cidr("h3") == "10.0.2.1/24"
    assert a.host_ifname("h3") == "h3-eth0"
    assert a.leaf_subnet("leaf2") == "10.0.2.0/24"
    assert a.leaf_gateway("leaf2") == "10.0.2.254"
    assert a.host_gateway("h4") == "10.0.2.254"
    assert a.router_mac("leaf1") == "02:fa:00:00:00:01"
    assert a.router_mac("spine2") == "02:fa:00:00:00:04"
    assert a.gateway_mac("h4") == a.router_mac("leaf2")
    assert a.host_by_ip("10.0.2.2") == "h4" and a.host_by_ip("10.0.2.254") is None
    assert f.addresses is a                      # cached: one plan per fabric


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: p.name)
def test_addresses_unique_and_well_formed(path):
    f = load_fabric(path)
    hosts, leaves, rmacs = snapshot(f)
    ips = [v[0] for v in hosts.values()]
    host_macs = [v[1] for v in hosts.values()]
    subnets = [v[0] for v in leaves.values()]
    assert len(set(ips)) == len(ips)
    assert len(set(host_macs)) == len(host_macs)
    assert len(set(subnets)) == len(subnets)
    assert len(set(rmacs.values())) == len(rmacs)
    assert not set(rmacs.values()) & set(host_macs)
    for mac in host_macs + list(rmacs.values()):
        first = mac_to_int(mac) >> 40
        assert first & 0x02 and not first & 0x01, mac    # locally administered unicast
    for h, (ip, mac, ifname, gw, gw_mac, cidr) in hosts.items():
        leaf = f.host_leaf(h).name
        net = ipaddress.IPv4Network(leaves[leaf][0])
        prefix = ipaddress.IPv4Network(f.plane(f.node(leaf).plane).host_prefix)  # its plane's
        assert net.prefixlen == 24 and net.subnet_of(prefix)
        assert ipaddress.IPv4Address(ip) in net
        assert ip not in (str(net.network_address), str(net.broadcast_address), gw)
        assert gw == leaves[leaf][1] == str(net.network_address + 254)
        assert gw_mac == rmacs[leaf]
        assert ifname == f"{h}-eth0" == f.ports(h)[0].ifname
        assert cidr == f"{ip}/24"
        assert mac_to_int(mac) & 0xFFFFFFFF == int(ipaddress.IPv4Address(ip))  # MAC derived from IP


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: p.name)
def test_plan_is_deterministic(path):
    assert snapshot(load_fabric(path)) == snapshot(load_fabric(path))


def test_custom_prefix_and_node_order():
    """Hosts are numbered in node order on their leaf, whatever the link order."""
    data = {
        "name": "t",
        "nodes": [{"name": n, "role": r} for n, r in [
            ("s1", "spine"), ("la", "leaf"), ("lb", "leaf"), ("x", "host"), ("y", "host"),
            ("z", "host")]],
        "links": [{"a": a, "b": b, **LINK} for a, b in [
            ("z", "la"), ("y", "lb"), ("x", "la"), ("la", "s1"), ("lb", "s1")]],
        "addressing": {"host_prefix": "172.16.0.0/12"},
    }
    f = fabric_from_dict(data)
    a = f.addresses
    assert a.leaf_subnet("la") == "172.16.1.0/24" and a.leaf_subnet("lb") == "172.16.2.0/24"
    assert a.host_ip("x") == "172.16.1.1" and a.host_ip("z") == "172.16.1.2"
    assert a.host_ip("y") == "172.16.2.1"
    assert a.host_mac("y") == "02:00:ac:10:02:01"


def test_wrong_roles_rejected():
    a = load_fabric(TOPOS / "clos-2x2.yaml").addresses
    with pytest.raises(ValueError):
        a.host_ip("leaf1")
    with pytest.raises(ValueError):
        a.leaf_subnet("spine1")
    with pytest.raises(ValueError):
        a.router_mac("h1")
    with pytest.raises(KeyError):
        a.host_ip("h99")
