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
