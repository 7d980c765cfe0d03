"""render_fabric: a readable summary naming every node and address."""
from __future__ import annotations

from pathlib import Path

import pytest

from emulator.topo import load_fabric, render_fabric

TOPOS = Path(__file__).resolve().parents[2] / "topologies"
ALL_FILES = sorted(TOPOS.glob("*.yaml"))


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: p.name)
def test_render_names_every_node_and_address(path):
    f = load_fabric(path)
    text = render_fabric(f)
    plan = f.addresses
    assert f.name in text
    assert "\x1b[" not in text                      # plain text by default
    for n in f.nodes:
        assert n.name in text
    for h in f.hosts():
        assert plan.host_ip(h) in text and plan.host_mac(h) in text
        assert plan.host_ifname(h) in text
    for leaf in f.leaves():
        assert plan.leaf_subnet(leaf) in text and plan.leaf_gateway(leaf) in text
    for sw in f.switches():
        assert plan.router_mac(sw) in text
        for p in f.ports(sw):
            assert p.ifname in text


def test_render_clos_2x2_details():
    text = render_fabric(load_fabric(TOPOS / "clos-2x2.yaml"))
    assert "2-way x1" in text                       # leaves' ECMP
    assert "µs" in text and "Gbps" in text


def test_render_explicit_rates_and_color():
    f = load_fabric(TOPOS / "explicit-3leaf.yaml")
    lines = render_fabric(f).splitlines()
    rows = [l.split() for l in lines]
    # link row: #, a, port, ifname, b, port, ifname, Gbps, delay us
    assert ["5", "leaf1", "3", "leaf1-eth3", "spine1", "1", "spine1-eth1", "400", "1"] in rows
    assert ["10", "leaf3", "3", "leaf3-eth3", "spine1", "3", "spine1-eth3", "100", "5"] in rows
    assert all(l == l.rstrip() for l in lines)
    assert "\x1b[" in render_fabric(f, color=True)


def _rows(text):
    return [l.split() for l in text.splitlines()]


def test_render_servers_rails_and_planes():
    f = load_fabric(TOPOS / "rail-2x4-storage-separate.yaml")
    text = render_fabric(f)
    assert "2 compute servers x 4 GPUs = 8 GPUs, 1 storage server; 4 rails; storage plane separate" in text
    rows = _rows(text)
    # Servers: name, role, tenant, GPUs, NVLink Gbps, NVLink us, DPU, NIC>leaf..., storage NIC
    assert ["server1", "compute", "-", "4", "7200", "0.25", "no", "s1n0>leaf1", "s1n1>leaf2"] == rows[
        next(i for i, r in enumerate(rows) if r[:1] == ["server1"])][:9]
    assert "s1st>sleaf1" in text and "st1n0>sleaf1" in text
    # Rails: rail i, its leaf, its subnet, NIC i of every server
    assert ["0", "leaf1", "10.0.1.0/24", "s1n0", "s2n0"] in rows
    assert ["3", "leaf4", "10.0.4.0/24", "s1n3", "s2n3"] in rows
    # Planes: prefixes and switches of each
    assert ["compute", "10.0.0.0/16", "leaf1", "leaf2", "leaf3", "leaf4", "spine1", "spine2", "8"] in rows
    assert ["storage", "10.1.0.0/16", "sleaf1", "sspine1", "3"] in rows
    assert "storage prefix 10.1.0.0/16" in text
    # Nodes get a plane column when there are several planes.
    node_row = next(r for r in rows if r[:1] == ["st1n0"])
    assert node_row[-1] == "storage" and "10.1.1.3" in node_row


def test_render_tenants_dpus_and_shared_storage():
    text = render_fabric(load_fabric(TOPOS / "rail-4x2-dpu.yaml"))
    assert "tenants blue, red" in text
    rows = _rows(text)
    s1 = next(r for r in rows if r[:1] == ["server1"])
    assert s1[1:7] == ["compute", "blue", "2", "7200", "0.5", "yes"] and "s1dpu>sleaf1" in s1
    shared = render_fabric(load_fabric(TOPOS / "rail-2x4-storage-shared.yaml"))
    assert "storage plane shared" in shared and "Planes" not in shared
    assert ["storage1", "storage", "-", "0", "-", "-", "no", "st1n0>leaf1", "-"] in _rows(shared)


def test_render_plain_fabric_has_no_server_tables():
    text = render_fabric(load_fabric(TOPOS / "clos-2x2.yaml"))
    assert "Servers" not in text and "Rails" not in text and "Planes" not in text
