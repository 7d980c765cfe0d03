"""Topology layer: topology files -> resolved Fabric, addresses, routes.

    from emulator.topo import load_fabric, compute_routes
    fabric = load_fabric("topologies/clos-2x2.yaml")
    fabric.addresses.host_ip("h1")          # "10.0.1.1"
    compute_routes(fabric)["leaf1"]         # [Route("10.0.1.1/32", ...), ...]
    fabric.servers()                        # (Server("h1", "compute", 1, ("h1",), ...), ...)

The file format is documented in ``emulator.topo.model`` (and the server
form -- multi-NIC GPU servers, rails, storage planes -- in
``emulator.topo.servers``).
"""
from emulator.topo.addressing import AddressPlan, ip_to_int, mac_str, mac_to_int
from emulator.topo.model import (
    COMPUTE_PLANE,
    CPU_PORT,
    DEFAULT_HOST_PREFIX,
    HOST_PORT_NO,
    MAX_ECMP_GROUP_SIZE,
    MAX_HOSTS_PER_LEAF,
    MAX_IPV4_ROUTES,
    MAX_SWITCH_PORTS,
    STORAGE_PLANE,
    Fabric,
    Link,
    Node,
    Plane,
    Port,
    Server,
    fabric_from_dict,
    load_fabric,
)
from emulator.topo.routes import (
    NextHop,
    Route,
    compute_routes,
    ecmp_groups,
    longest_prefix_match,
    nexthop_members,
)
from emulator.topo.show import render_fabric

__all__ = [
    "AddressPlan", "COMPUTE_PLANE", "CPU_PORT", "DEFAULT_HOST_PREFIX", "Fabric", "HOST_PORT_NO",
    "Link", "MAX_ECMP_GROUP_SIZE", "MAX_HOSTS_PER_LEAF", "MAX_IPV4_ROUTES", "MAX_SWITCH_PORTS",
    "NextHop", "Node", "Plane", "Port", "Route", "STORAGE_PLANE", "Server", "compute_routes", "ecmp_groups", "fabric_from_dict",
    "ip_to_int", "load_fabric", "longest_prefix_match", "mac_str", "mac_to_int",
    "nexthop_members", "render_fabric",
]
