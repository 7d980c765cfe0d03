"""The resolved fabric: nodes, ports, links, servers, planes -- and the
pipeline's size limits a fabric must fit.

This is the bottom of the topology layer: it imports nothing of the package
but ``emulator.wire`` and ``emulator.schema.vocabulary``, so the file schema (``emulator.schema.topology``),
the address plan, the routes and the builder can all stand on it.

The model is immutable; every unit is in the name. Planes: every node has
one (``Node.plane``; the plain forms have only the compute plane), each
plane its own prefix (``Fabric.planes()``); device ids are unique across
planes. Links are stored in file order, oriented lower tier first: ``a`` is
the host (host links) or the leaf (fabric links). Switch ports are numbered
from 1 per switch in link order and are the P4 port numbers
(``<sw>-eth<port_no>``); a host's single port is 0 (``<host>-eth0``), as
Mininet numbers a host's first interface.

``Fabric.addresses`` is the fabric's ``AddressPlan``: the builder passes the
plan's class in (``address_plan``), so this module need not import it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Literal, Optional, Union, get_args

from emulator.schema.vocabulary import DEFAULT_HOST_PREFIX, DEFAULT_STORAGE_PREFIX, Role  # noqa: F401
from emulator.wire import CPU_PORT, MAX_SWITCH_PORTS  # noqa: F401  (re-exported limits)

ROLES: tuple[str, ...] = get_args(Role)
ServerRole = Literal["compute", "storage"]

# Planes: independently routed switch graphs with their own address prefix.
COMPUTE_PLANE = "compute"        # every fabric has it; the only plane of the plain forms
STORAGE_PLANE = "storage"        # the optional separate storage network

HOST_PORT_NO = 0                 # a host's only port: <host>-eth0
FIRST_SWITCH_PORT = 1            # switch ports: <sw>-eth1.. = P4 ports 1..
MAX_ECMP_GROUP_SIZE = 64         # p4src/fabric.p4 @max_group_size(64)
MAX_IPV4_ROUTES = 1024           # p4src/fabric.p4 ipv4_lpm size
MAX_HOSTS_PER_LEAF = 253         # .1-.253 of the leaf's /24; .254 = gateway
MAX_NODE_NAME = 8                # "<name>-eth<254>" <= 15 chars (IFNAMSIZ-1)
NODE_NAME_RE = re.compile(r"[a-z][a-z0-9]*")


@dataclass(frozen=True)
class Node:
    name: str
    role: Role
    index: int  # 1-based within its role, file order (across planes)
    plane: str = COMPUTE_PLANE

    @property
    def is_switch(self) -> bool:
        return self.role != "host"


@dataclass(frozen=True)
class Port:
    node: str
    port_no: int      # switches: P4 port 1..254; hosts: 0
    ifname: str       # "<node>-eth<port_no>"
    peer: str
    peer_port_no: int
    link_index: int   # index into Fabric.links


@dataclass(frozen=True)
class Link:
    a: str            # lower tier: the host, or the leaf of a fabric link
    a_port: int
    b: str            # the leaf of a host link, or the spine
    b_port: int
    rate_bps: int
    delay_ns: int

    @property
    def rate_gbps(self) -> float:
        return self.rate_bps / 1e9

    @property
    def delay_us(self) -> float:
        return self.delay_ns / 1e3

    def port_of(self, node: str) -> int:
        if node == self.a:
            return self.a_port
        if node == self.b:
            return self.b_port
        raise KeyError(f"{node} is not an end of link {self.a}-{self.b}")

    def peer_of(self, node: str) -> str:
        if node == self.a:
            return self.b
        if node == self.b:
            return self.a
        raise KeyError(f"{node} is not an end of link {self.a}-{self.b}")


def ifname(node: str, port_no: int) -> str:
    return f"{node}-eth{port_no}"


NodeRef = Union[str, Node]


def node_name(node: NodeRef) -> str:
    return node.name if isinstance(node, Node) else node


@dataclass(frozen=True)
class Plane:
    """An independently routed switch graph: no route leads off it."""
    name: str          # COMPUTE_PLANE or STORAGE_PLANE
    host_prefix: str   # its leaves' /24s are carved from it (see addressing.py)


@dataclass(frozen=True)
class ManagementNet:
    """A management network (``management:``; ``emulator.schema.management``):
    plain Ethernet through one bridge, apart from the planes. Its members and
    their addresses: ``addressing.AddressPlan.management_members``."""
    kind: str          # "out_of_band" (switches' management ports) or "in_band" (servers)
    subnet: str
    rate_bps: int


@dataclass(frozen=True)
class Server:
    """One machine: one Mininet host (network namespace) holding its NICs.

    ``nics`` are host nodes (NIC endpoints); a compute server's NIC i serves
    its GPU i (local rank i) and, in a rail-optimized fabric, sits on rail i.
    A storage server has no GPU; ``nics`` are its storage NICs.
    """
    name: str
    role: ServerRole
    gpus: int                         # 0 for storage servers
    nics: tuple[str, ...]
    nvlink_rate_bps: int              # NVLink/NVSwitch domain joining its GPUs; 0: none
    nvlink_delay_ns: int
    dpu: bool = False
    tenant: Optional[str] = None
    storage_nic: Optional[str] = None  # its NIC on a separate storage plane (the DPU's port if dpu)

    @property
    def all_nics(self) -> tuple[str, ...]:
        """Every NIC of the server: GPU NICs in rank order, then the storage NIC."""
        return self.nics + ((self.storage_nic,) if self.storage_nic else ())


@dataclass(frozen=True)
class Fabric:
    name: str
    source: str
    nodes: tuple[Node, ...]
    links: tuple[Link, ...]
    host_prefix: str                  # the compute plane's
    # Only the server form sets these; the defaults describe a plain fabric:
    # one compute plane (host_prefix), every host its own 1-GPU server.
    plane_table: tuple[Plane, ...] = ()
    server_table: tuple[Server, ...] = ()
    rails: tuple[str, ...] = ()       # rail-optimized: leaf of rail i (= local GPU rank i)
    link_layer: str = "roce"          # or "infiniband" (emulator/ib)
    management: tuple[ManagementNet, ...] = ()   # out-of-band, then in-band, those given
    # addressing.AddressPlan (given by the builder, which sits above addressing)
    address_plan: Optional[Callable[["Fabric"], Any]] = field(default=None, repr=False,
                                                              compare=False)
    _by_name: dict = field(init=False, repr=False, compare=False)
    _ports: dict = field(init=False, repr=False, compare=False)
    _by_role: dict = field(init=False, repr=False, compare=False)
    _planes: tuple = field(init=False, repr=False, compare=False)
    _switches: tuple = field(init=False, repr=False, compare=False)
    _device_ids: dict = field(init=False, repr=False, compare=False)
    _servers: tuple = field(init=False, repr=False, compare=False)
    _server_by_name: dict = field(init=False, repr=False, compare=False)
    _server_of: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name = {n.name: n for n in self.nodes}
        ports: dict[str, list[Port]] = {n.name: [] for n in self.nodes}
        for i, l in enumerate(self.links):
            ports[l.a].append(Port(l.a, l.a_port, ifname(l.a, l.a_port), l.b, l.b_port, i))
            ports[l.b].append(Port(l.b, l.b_port, ifname(l.b, l.b_port), l.a, l.a_port, i))
        by_role = {r: tuple(n for n in self.nodes if n.role == r) for r in ROLES}
        planes = self.plane_table or (Plane(COMPUTE_PLANE, self.host_prefix),)
        # Plane by plane, leaves, spines, then super spines: a plane or a
        # tier added to a fabric does not renumber the devices (nor router
        # MACs) before it.
        switches = tuple(n for p in planes for r in ("leaf", "spine", "superspine")
                         for n in by_role[r] if n.plane == p.name)
        servers = self.server_table or tuple(
            Server(h.name, "compute", 1, (h.name,), 0, 0) for h in by_role["host"])
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_ports", {k: tuple(sorted(v, key=lambda p: p.port_no))
                                            for k, v in ports.items()})
        object.__setattr__(self, "_by_role", by_role)
        object.__setattr__(self, "_planes", planes)
        object.__setattr__(self, "_switches", switches)
        object.__setattr__(self, "_device_ids", {n.name: i for i, n in enumerate(switches, start=1)})
        object.__setattr__(self, "_servers", servers)
        object.__setattr__(self, "_server_by_name", {s.name: s for s in servers})
        object.__setattr__(self, "_server_of", {nic: s for s in servers for nic in s.all_nics})
    # nodes
    def hosts(self) -> tuple[Node, ...]:
        return self._by_role["host"]

    def leaves(self) -> tuple[Node, ...]:
        return self._by_role["leaf"]

    def spines(self) -> tuple[Node, ...]:
        return self._by_role["spine"]

    def superspines(self) -> tuple[Node, ...]:
        """The third tier, joining pods (none in a 2-tier fabric)."""
        return self._by_role["superspine"]

    def switches(self) -> tuple[Node, ...]:
        """Plane by plane, leaves, spines, super spines; device ids follow this order."""
        return self._switches

    @cached_property
    def pods(self) -> tuple[tuple[Node, ...], ...]:
        """The pods: leaves and spines joined without a super spine (the
        connected parts of the leaf-spine graph), each as its leaves then
        its spines, in the order of their first leaf. A 2-tier fabric is one
        pod per plane."""
        tier2 = {n.name for n in self.nodes if n.role in ("leaf", "spine")}
        pod_of: dict[str, int] = {}
        pods: list[list[str]] = []
        for leaf in self.leaves():
            if leaf.name in pod_of:
                continue
            pod_of[leaf.name] = len(pods)
            members, todo = [leaf.name], [leaf.name]
            while todo:
                for p in self.ports(todo.pop()):
                    if p.peer in tier2 and p.peer not in pod_of:
                        pod_of[p.peer] = len(pods)
                        members.append(p.peer)
                        todo.append(p.peer)
            pods.append(members)
        order = {n.name: i for i, n in enumerate(self._switches)}
        return tuple(tuple(self.node(m) for m in sorted(ms, key=order.__getitem__)) for ms in pods)

    def pod_of(self, switch: NodeRef) -> int | None:
        """1-based pod of a leaf or spine; None for a super spine."""
        name = node_name(switch)
        for i, pod in enumerate(self.pods, start=1):
            if any(n.name == name for n in pod):
                return i
        return None

    def node(self, name: NodeRef) -> Node:
        try:
            return self._by_name[node_name(name)]
        except KeyError:
            raise KeyError(f"fabric {self.name} has no node {node_name(name)!r}") from None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, (str, Node)) and node_name(name) in self._by_name

    # ports and links
    def ports(self, node: NodeRef) -> tuple[Port, ...]:
        """The node's ports in port-number order."""
        return self._ports[self.node(node).name]

    def port(self, node: NodeRef, port_no: int) -> Port:
        for p in self.ports(node):
            if p.port_no == port_no:
                return p
        raise KeyError(f"{node_name(node)} has no port {port_no}")

    def ports_towards(self, a: NodeRef, b: NodeRef) -> tuple[Port, ...]:
        """a's ports whose peer is b (several if parallel links), in port order."""
        bn = node_name(b)
        return tuple(p for p in self.ports(a) if p.peer == bn)

    def port_towards(self, a: NodeRef, b: NodeRef) -> Port:
        """a's first port facing b: the one a fault of the direction a -> b names."""
        found = self.ports_towards(a, b)
        if not found:
            raise KeyError(f"{node_name(a)} has no port towards {node_name(b)}")
        return found[0]

    def links_between(self, a: NodeRef, b: NodeRef) -> tuple[Link, ...]:
        """Every link joining a and b (several if parallel), in link order."""
        return tuple(self.links[p.link_index] for p in self.ports_towards(a, b))

    def link_between(self, a: NodeRef, b: NodeRef) -> Optional[Link]:
        """The first link joining a and b, or None."""
        found = self.links_between(a, b)
        return found[0] if found else None

    def device_id(self, switch: NodeRef) -> int:
        """P4Runtime device id: 1.. in switches() order, unique across planes."""
        n = self.node(switch)
        if not n.is_switch:
            raise ValueError(f"{n.name} is a host, not a switch")
        return self._device_ids[n.name]

    def host_leaf(self, host: NodeRef) -> Node:
        n = self.node(host)
        if n.role != "host":
            raise ValueError(f"{n.name} is a {n.role}, not a host")
        return self.node(self.ports(n)[0].peer)

    def leaf_hosts(self, leaf: NodeRef) -> tuple[Node, ...]:
        """The hosts attached to a leaf, in node order."""
        ln = self.node(leaf).name
        return tuple(h for h in self.hosts() if self.ports(h)[0].peer == ln)

    # planes
    def planes(self) -> tuple[Plane, ...]:
        """The compute plane first, then the storage plane if it is separate."""
        return self._planes

    def plane(self, name: str) -> Plane:
        for p in self._planes:
            if p.name == name:
                return p
        raise KeyError(f"fabric {self.name} has no plane {name!r}")

    def plane_nodes(self, plane: str, role: Optional[str] = None) -> tuple[Node, ...]:
        """The plane's nodes (of one role), in node order."""
        return tuple(n for n in self.nodes if n.plane == plane and (role is None or n.role == role))

    # servers
    def servers(self, role: Optional[str] = None) -> tuple[Server, ...]:
        """Compute servers then storage servers, in file order (or only one role)."""
        return tuple(s for s in self._servers if role is None or s.role == role)

    def server(self, name: str) -> Server:
        try:
            return self._server_by_name[name]
        except KeyError:
            raise KeyError(f"fabric {self.name} has no server {name!r}") from None

    def server_of(self, host: NodeRef) -> Server:
        """The server holding a NIC (host node)."""
        n = self.node(host)
        if n.role != "host":
            raise ValueError(f"{n.name} is a {n.role}, not a host (NIC)")
        return self._server_of[n.name]

    def management_net(self, kind: str) -> Optional[ManagementNet]:
        """The management network of that kind (None: the file gives none)."""
        return next((m for m in self.management if m.kind == kind), None)

    def is_rail_optimized(self) -> bool:
        return bool(self.rails)

    @cached_property
    def addresses(self) -> Any:
        """The fabric's ``addressing.AddressPlan`` (IPs, MACs, subnets, router MACs)."""
        if self.address_plan is None:
            raise ValueError(f"fabric {self.name} was built without an address plan "
                             f"(build it with emulator.topo.build)")
        return self.address_plan(self)
