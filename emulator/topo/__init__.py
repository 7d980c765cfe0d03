"""Topology layer: topology files -> resolved Fabric, addresses, routes.

    from emulator.topo import load_fabric, compute_routes
    fabric = load_fabric("topologies/clos-2x2.yaml")
    fabric.addresses.host_ip("h1")          # "10.0.1.1"
    compute_routes(fabric)["leaf1"]         # [Route("10.0.1.1/32", ...), ...]
    fabric.servers()                        # (Server("h1", "compute", 1, ("h1",), ...), ...)

Layers, each importing only those below it::

    graph.py        Fabric, Node, Port, Link, Server, Plane, the pipeline's limits
    addressing.py   the address plan            routes.py   every switch's routes
    servers.py      the server form's expansion (draft.py: the builder's working lists)
    build.py        file -> checked Fabric (load_fabric)
    show.py         the ``topo show`` summary

The file format is ``emulator.schema.topology`` (and the server form -- multi-NIC
GPU servers, rails, storage planes -- ``emulator.topo.servers``).

The names below are loaded on first use, so that importing one module of
the package (``emulator.ib.sm`` imports ``emulator.topo.graph``) does not import
the builder above it.
"""
from __future__ import annotations

from emulator.lazy import lazy_exports

_EXPORTS = {
    "graph": ("COMPUTE_PLANE", "CPU_PORT", "DEFAULT_HOST_PREFIX", "HOST_PORT_NO",
              "MAX_ECMP_GROUP_SIZE", "MAX_HOSTS_PER_LEAF", "MAX_IPV4_ROUTES", "MAX_SWITCH_PORTS",
              "STORAGE_PLANE", "Fabric", "Link", "Node", "Plane", "Port", "Server"),
    "addressing": ("AddressPlan", "ip_to_int", "mac_str", "mac_to_int"),
    "build": ("fabric_from_dict", "load_fabric"),
    "routes": ("NextHop", "Route", "compute_routes", "ecmp_groups", "longest_prefix_match",
               "nexthop_members"),
    "show": ("render_fabric",),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, globals(), _EXPORTS)
