"""A rail-optimized fabric for real: multi-NIC servers (one namespace each) under Mininet."""
from __future__ import annotations

import pytest

from emulator.net.fabric import FabricNet
from emulator.topo import load_fabric
from tests.conftest import REPO

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]


def _spine_rx_packets(fnet) -> int:
    counters = fnet.controller.read_port_counters()
    return sum(c.get("rx_packets", 0) for (sw, _), c in counters.items() if sw.startswith("spine"))


def test_rail_2x4_same_rail_and_cross_rail_pings(tmp_path):
    fabric = load_fabric(REPO / "topologies/rail-2x4.yaml")
    plan = fabric.addresses
    with FabricNet(fabric, tmp_path, dilation=1000, program=True) as fnet:
        server1 = fnet.node_of("s1n0")
        # One namespace per server, holding every NIC's interface with its own address.
        assert server1 is fnet.host("server1") is fnet.host("s1n3") is fnet.node_of("s1n2")
        assert fnet.host("s2n0").name == "server2"
        assert sorted(h.name for h in fnet.net.hosts) == ["server1", "server2"]
        for nic in fabric.server("server1").nics:
            intf = server1.intf(plan.host_ifname(nic))
            assert intf.IP() == plan.host_ip(nic) and intf.MAC() == plan.host_mac(nic)

        src = plan.host_ip("s1n0")
        # Same rail: NIC 0 to NIC 0 crosses rail leaf1 only (TTL 64 - 1), no spine.
        # (-i 0.2: the second echo 0.2 s after the first, not 1 s; -W as before)
        out = server1.cmd(f"ping -c2 -i 0.2 -W3 -I {src} {plan.host_ip('s2n0')}")
        assert "ttl=63" in out, out
        assert _spine_rx_packets(fnet) == 0
        # Cross rail: from NIC 0's address to NIC 3 goes leaf1 -> spine -> leaf4.
        out = server1.cmd(f"ping -c2 -i 0.2 -W3 -I {src} {plan.host_ip('s2n3')}")
        assert "ttl=61" in out, out
        assert _spine_rx_packets(fnet) >= 4          # 2 requests + 2 replies through spines
        # Without a source address the kernel picks the rail's own NIC: one hop.
        out = server1.cmd(f"ping -c1 -W3 {plan.host_ip('s2n3')}")
        assert "ttl=63" in out, out
        # NIC 0's gateway stays the namespace's default route.
        assert f"default via {plan.host_gateway('s1n0')} dev s1n0-eth0" in server1.cmd("ip route")


def test_storage_plane_is_separate_for_real(tmp_path):
    fabric = load_fabric(REPO / "topologies/rail-2x4-storage-separate.yaml")
    plan = fabric.addresses
    storage_ip = plan.host_ip("st1n0")
    with FabricNet(fabric, tmp_path, dilation=1000, program=True) as fnet:
        server1 = fnet.host("server1")
        # The storage NIC reaches storage1 through the storage leaf.
        out = server1.cmd(f"ping -c2 -i 0.2 -W3 -I {plan.host_ip('s1st')} {storage_ip}")
        assert "ttl=63" in out, out
        # A GPU NIC has no route to the storage plane: its leaf drops the packets.
        out = server1.cmd(f"ping -c2 -i 0.2 -W2 -I {plan.host_ip('s1n0')} {storage_ip}")
        assert " 0 received" in out, out
        counters = fnet.controller.read_port_counters()
        leaf1_drops = sum(c.get("pipeline_drop_packets", 0)
                          for (sw, _), c in counters.items() if sw == "leaf1")
        assert leaf1_drops >= 2
        assert fnet.host("st1n0") is fnet.host("storage1")
