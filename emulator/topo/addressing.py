"""The fabric's address plan: the one source of truth for IPs and MACs.

Every plane has its own prefix P (``Fabric.planes()``; the compute plane's
is host_prefix, default 10.0.0.0/16; a separate storage plane's is
storage_prefix, default 10.1.0.0/16). Within a plane:

* its leaf k (1-based, file order within the plane) owns the /24 at offset k
  inside P: ``10.0.k.0/24``; offset 0 (10.0.0.0/24) is left unused;
* the j-th host of leaf k (node order) is ``10.0.k.j`` (j = 1..253), with
  the leaf's gateway ``10.0.k.254`` as default route;
* a host MAC is ``02:00`` followed by the four bytes of its IP
  (``02:00:0a:00:kk:jj``): locally administered, unicast, unique;
* a switch's router MAC is ``02:fa:00:00`` followed by its device id on two
  bytes (``02:fa:00:00:00:01``): never equal to a host MAC (second byte 0xfa);
* a host's interface is ``<host>-eth0``.

The management networks (``management:``, ``Fabric.management``) are
numbered from their own subnets S, one address per member in this order:
the management host (``S.1``, namespace ``mgmt``), then on the out-of-band
network every switch's management port in device-id order (``S.(1+id)``,
namespace ``<switch>m``), on the in-band one every server in server order
(``S.(1+i)``, in the server's own namespace). A member's MAC is ``02:01``
(out-of-band) or ``02:02`` (in-band) followed by its IP's four bytes; the
bridge of each network runs in a namespace of its own (``oob``, ``inband``),
its port k facing member k (``management_members``).

Hosts reach their gateway's MAC, which is their leaf's router MAC
(``gateway_mac``), so a leaf admits their frames in ``my_station``.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from emulator.topo.graph import HOST_PORT_NO, Fabric, NodeRef, ifname, node_name

GATEWAY_HOST_OCTET = 254
HOST_MAC_PREFIX = (0x02, 0x00)
ROUTER_MAC_PREFIX = (0x02, 0xFA, 0x00, 0x00)


MGMT_HOST = "mgmt"                       # the management host's namespace (controller, collector)
MGMT_BRIDGE = {"out_of_band": "oob", "in_band": "inband"}      # each network's bridge namespace
MGMT_MAC_PREFIX = {"out_of_band": (0x02, 0x01), "in_band": (0x02, 0x02)}


def switch_mgmt_netns(switch: str) -> str:
    """The namespace holding a switch's management port (and its servers' listeners)."""
    return f"{switch}m"


@dataclass(frozen=True)
class ManagementMember:
    """One interface on a management network."""
    node: str          # the switch or server it belongs to, or MGMT_HOST
    netns: str         # the Mininet node (namespace) holding the interface
    ifname: str
    ip: str
    cidr: str          # as the interface is configured
    mac: str
    bridge_ifname: str  # its peer, a port of the network's bridge


def mac_str(value: int) -> str:
    return ":".join(f"{(value >> (8 * i)) & 0xFF:02x}" for i in range(5, -1, -1))


def mac_to_int(mac: str) -> int:
    parts = mac.split(":")
    if len(parts) != 6:
        raise ValueError(f"not a MAC address: {mac!r}")
    return int("".join(parts), 16)


def ip_to_int(ip: str) -> int:
    return int(ipaddress.IPv4Address(ip))


class AddressPlan:
    """Every address of a fabric, computed once, deterministically."""

    def __init__(self, fabric: Fabric):
        self.fabric = fabric
        self.host_prefix = ipaddress.IPv4Network(fabric.host_prefix)   # the compute plane's
        self._subnet: dict[str, ipaddress.IPv4Network] = {}
        self._host_ip: dict[str, ipaddress.IPv4Address] = {}
        for plane in fabric.planes():
            prefix = ipaddress.IPv4Network(plane.host_prefix)
            base = int(prefix.network_address)
            for k, leaf in enumerate(fabric.plane_nodes(plane.name, "leaf"), start=1):
                net = ipaddress.IPv4Network((base + 256 * k, 24))
                if not net.subnet_of(prefix):  # the loader rejects this
                    raise ValueError(f"{leaf.name}'s subnet {net} is outside {prefix}")
                self._subnet[leaf.name] = net
                for j, host in enumerate(fabric.leaf_hosts(leaf), start=1):
                    if j >= GATEWAY_HOST_OCTET:  # the loader rejects this
                        raise ValueError(f"{leaf.name} has more than {GATEWAY_HOST_OCTET - 1} hosts")
                    self._host_ip[host.name] = net.network_address + j
        self._by_ip = {str(ip): name for name, ip in self._host_ip.items()}

    # hosts
    def host_ip(self, host: NodeRef) -> str:
        """``10.0.k.j``."""
        return str(self._host_ip[self._host(host)])

    def host_cidr(self, host: NodeRef) -> str:
        """``10.0.k.j/24``, as an interface is configured."""
        h = self._host(host)
        return f"{self._host_ip[h]}/{self._subnet[self.fabric.host_leaf(h).name].prefixlen}"

    def host_mac(self, host: NodeRef) -> str:
        """``02:00:`` + the IP's four bytes."""
        ip = int(self._host_ip[self._host(host)])
        return mac_str((HOST_MAC_PREFIX[0] << 40) | (HOST_MAC_PREFIX[1] << 32) | ip)

    def host_ifname(self, host: NodeRef) -> str:
        return ifname(self._host(host), HOST_PORT_NO)

    def host_gateway(self, host: NodeRef) -> str:
        """The host's default gateway: its leaf's ``.254``."""
        return self.leaf_gateway(self.fabric.host_leaf(self._host(host)))

    def gateway_mac(self, host: NodeRef) -> str:
        """The MAC the host's gateway answers with: its leaf's router MAC."""
        return self.router_mac(self.fabric.host_leaf(self._host(host)))

    def host_by_ip(self, ip: str) -> str | None:
        """The name of the host owning ip, or None."""
        return self._by_ip.get(str(ip))

    # leaves and switches
    def leaf_subnet(self, leaf: NodeRef) -> str:
        """``10.0.k.0/24``."""
        return str(self._subnet[self._leaf(leaf)])

    def leaf_gateway(self, leaf: NodeRef) -> str:
        """``10.0.k.254``."""
        return str(self._subnet[self._leaf(leaf)].network_address + GATEWAY_HOST_OCTET)

    def router_mac(self, switch: NodeRef) -> str:
        """``02:fa:00:00:`` + the device id on two bytes."""
        dev = self.fabric.device_id(switch)
        prefix = 0
        for byte in ROUTER_MAC_PREFIX:
            prefix = (prefix << 8) | byte
        return mac_str((prefix << 16) | (dev & 0xFFFF))

    # management networks
    def management_members(self, kind: str) -> list[ManagementMember]:
        """Every interface on the ``kind`` management network, the management host first
        ([] when the fabric has none)."""
        net = self.fabric.management_net(kind)
        if net is None:
            return []
        subnet = ipaddress.IPv4Network(net.subnet)
        if kind == "out_of_band":
            nodes = [(sw.name, switch_mgmt_netns(sw.name), 0) for sw in self.fabric.switches()]
        else:
            nodes = [(s.name, s.name, len(s.all_nics)) for s in self.fabric.servers()]
        # the management host: eth0 out-of-band, eth1 in-band
        nodes.insert(0, (MGMT_HOST, MGMT_HOST, 0 if kind == "out_of_band" else 1))
        if len(nodes) > subnet.num_addresses - 2:    # the loader rejects this
            raise ValueError(f"{subnet} holds {subnet.num_addresses - 2} addresses, not {len(nodes)}")
        bridge = MGMT_BRIDGE[kind]
        out = []
        for i, (node, netns, port_no) in enumerate(nodes):
            ip = subnet.network_address + 1 + i
            hi, lo = MGMT_MAC_PREFIX[kind]
            out.append(ManagementMember(node, netns, ifname(netns, port_no), str(ip),
                                        f"{ip}/{subnet.prefixlen}",
                                        mac_str((hi << 40) | (lo << 32) | int(ip)),
                                        ifname(bridge, i + 1)))
        return out

    def management_ip(self, kind: str, node: str) -> str | None:
        """``node``'s address on the ``kind`` management network (None: not on it)."""
        return next((m.ip for m in self.management_members(kind) if m.node == node), None)

    # internals
    def _host(self, host: NodeRef) -> str:
        name = node_name(host)
        if name not in self._host_ip:
            n = self.fabric.node(name)  # KeyError for unknown nodes
            raise ValueError(f"{n.name} is a {n.role}, not a host")
        return name

    def _leaf(self, leaf: NodeRef) -> str:
        name = node_name(leaf)
        if name not in self._subnet:
            n = self.fabric.node(name)
            raise ValueError(f"{n.name} is a {n.role}, not a leaf")
        return name


def address_plan(fabric: Fabric) -> AddressPlan:
    """The fabric's (cached) plan; same as ``fabric.addresses``."""
    return fabric.addresses


__all__ = ["AddressPlan", "address_plan", "mac_str", "mac_to_int", "ip_to_int",
           "GATEWAY_HOST_OCTET", "MGMT_BRIDGE", "MGMT_HOST", "ManagementMember", "switch_mgmt_netns"]
