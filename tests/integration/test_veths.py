"""The fabric's veths made in one ``ip -batch`` (``net/veths.py``) and each
server set up in one shell round trip (``RoceHost.config``): every end in
its namespace with its MAC, address, MTU and state, the routes and rules of
a multi-NIC server, and Mininet's view of them, as its own links and host
setup left them."""
from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from emulator.net.fabric import JUMBO_MTU_BYTES, FabricNet
from emulator.topo import load_fabric
from tests.conftest import REPO

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]


def _json(node, cmd: str):
    return json.loads(node.cmd(cmd))


def test_rail_servers_and_switch_ports_as_configured(tmp_path):
    fabric = load_fabric(REPO / "topologies/rail-2x4.yaml")     # 2 servers of 4 NICs
    plan = fabric.addresses
    with FabricNet(fabric, tmp_path, dilation=1000, mtu_bytes=4096, program=False) as fnet:
        for server in fabric.servers():
            host = fnet.host(server.name)
            links = {link["ifname"]: link for link in _json(host, "ip -j link show")}
            addrs = {a["ifname"]: a["addr_info"] for a in _json(host, "ip -j -4 addr show")}
            routes = host.cmd("ip route show").splitlines()
            assert "lo" in links and "UP" in links["lo"]["flags"]
            for i, nic in enumerate(server.all_nics):
                dev, cidr = plan.host_ifname(nic), ipaddress.ip_interface(plan.host_cidr(nic))
                gw = plan.host_gateway(nic)
                link = links[dev]
                assert link["address"] == plan.host_mac(nic) and link["mtu"] == JUMBO_MTU_BYTES
                assert link["operstate"] == "UP", link     # its switch end is up too
                (a,) = addrs[dev]
                assert (a["local"], a["prefixlen"]) == (str(cidr.ip), cidr.network.prefixlen)
                assert a["broadcast"] == str(cidr.network.broadcast_address)
                intf = host.intf(dev)                      # Mininet's view of it
                assert (intf.MAC(), intf.IP()) == (plan.host_mac(nic), str(cidr.ip))
                neigh = host.cmd(f"ip neigh show {gw} dev {dev}")
                assert plan.gateway_mac(nic) in neigh and "PERMANENT" in neigh, neigh
                assert not any(r.startswith(f"{cidr.network} dev {dev}") for r in routes), routes
                table = host.cmd(f"ip route show table {100 + i}")
                assert f"default via {gw} dev {dev} onlink" in table, table
                assert f"from {cidr.ip} lookup {100 + i}" in host.cmd("ip rule show")
            nic0 = server.all_nics[0]
            assert (f"default via {plan.host_gateway(nic0)} dev {plan.host_ifname(nic0)}"
                    in routes[0]), routes
            assert host.cmd("sysctl -n net.ipv6.conf.all.disable_ipv6").strip() == "1"
        for port in fnet.switch_interfaces():              # in this namespace, up, jumbo
            sysfs = Path("/sys/class/net") / port
            assert (sysfs / "operstate").read_text().strip() == "up", port
            assert int((sysfs / "mtu").read_text()) == JUMBO_MTU_BYTES
    assert not any((Path("/sys/class/net") / p).exists() for p in fnet.switch_interfaces())


def test_default_mtu_is_the_kernels(tmp_path):
    fabric = load_fabric(REPO / "topologies/clos-2x2.yaml")
    with FabricNet(fabric, tmp_path, dilation=1000, mtu_bytes=1024, program=False) as fnet:
        for port in fnet.switch_interfaces():
            assert int((Path("/sys/class/net") / port / "mtu").read_text()) == 1500
        host = fnet.host("h1")
        assert "mtu 1500" in host.cmd(f"ip link show {fabric.addresses.host_ifname('h1')}")


def test_nics_sharing_a_leaf_share_one_route_through_it(tmp_path):
    fabric = load_fabric(REPO / "topologies/clos-2x4-servers.yaml")   # a server's 4 NICs, 1 leaf
    plan = fabric.addresses
    with FabricNet(fabric, tmp_path, dilation=1000, program=False) as fnet:
        server = fabric.servers()[0]
        host = fnet.host(server.name)
        nics = server.all_nics
        network = ipaddress.ip_interface(plan.host_cidr(nics[0])).network
        assert len({ipaddress.ip_interface(plan.host_cidr(n)).network for n in nics}) == 1
        routes = [r.split() for r in host.cmd("ip route show").splitlines()
                  if r.startswith(str(network))]
        assert routes == [[str(network), "via", plan.host_gateway(nics[0]), "dev",
                           plan.host_ifname(nics[0]), "onlink"]], routes
        for i, nic in enumerate(nics):             # each NIC still answers from its own
            table = host.cmd(f"ip route show table {100 + i}")
            assert f"dev {plan.host_ifname(nic)} onlink" in table, table
