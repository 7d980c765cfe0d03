"""Topology files and the resolved fabric model.

A topology file describes one 2-tier leaf/spine (CLOS) fabric of P4 switches
with hosts on the leaves. It is YAML, in one of two forms -- or, for GPU
servers with several NICs, rail-optimized fabrics and a separate storage
plane, in the server form documented in ``emulator/topo/servers.py``.

A *host* node is one NIC endpoint: one port to its leaf, its own IP, MAC and
gateway. A *server* groups NIC endpoints (GPU i <-> NIC i) in one network
namespace; in the two forms below every host is its own 1-GPU server of the
same name (``Fabric.servers()``).

Parametric form::

    # A comment header saying what the fabric is for.
    name: clos-2x2                     # required; [a-z0-9][a-z0-9-]*, <= 63 chars
    clos:
      spines: 2                        # >= 1 (<= 64: the P4 ECMP group size)
      leaves: 2                        # >= 1 (<= 254: a spine's ports)
      hosts_per_leaf: 2                # >= 1 (<= 253: a leaf's /24)
      host_link:   {rate_gbps: 100, delay_us: 1}
      fabric_link: {rate_gbps: 100, delay_us: 1}
    addressing:                        # optional, this is the default
      host_prefix: 10.0.0.0/16

  It expands to spines ``spine1..``, leaves ``leaf1..`` and hosts ``h1..``
  numbered leaf by leaf (leaf1 gets h1..hK, leaf2 hK+1..h2K, ...). Links are
  listed host links first (leaf by leaf, host by host), then fabric links
  (leaf by leaf, spine by spine): so on every leaf, ports 1..K face its hosts
  and ports K+1..K+S face spine1..spineS; on every spine, port k faces leafk.

Explicit form (exactly one of ``clos`` / ``nodes`` + ``links``)::

    name: explicit-3leaf
    nodes:                             # file order sets each role's index
      - {name: spine1, role: spine}    # role: spine | leaf | host
      - {name: leaf1, role: leaf}
      - {name: h1, role: host}
    links:                             # file order sets port numbers
      - {a: h1, b: leaf1, rate_gbps: 100, delay_us: 1}
      - {a: leaf1, b: spine1, rate_gbps: 100, delay_us: 1}
    addressing:
      host_prefix: 10.0.0.0/16

Field rules: unknown fields are errors; counts are integers (not booleans,
not strings); ``rate_gbps`` is a number > 0, ``delay_us`` a number >= 0
(both may be fractional; they are kept as integer bit/s and ns). Node names
are ``[a-z][a-z0-9]*`` of at most 8 characters, so that every interface name
``<node>-eth<N>`` fits Linux's 15 characters.

A fabric is rejected (``ConfigError``: ``FILE: FIELD: REASON``, FIELD a dotted
path such as ``clos.spines`` or ``links[3].b``) when: a node name is invalid
or repeated; a role is unknown; a link names an unknown node, joins a node to
itself, or joins two nodes that a 2-tier CLOS never joins (host-host,
host-spine, leaf-leaf, spine-spine); a host does not have exactly one link,
to a leaf; two links join the same pair of nodes other than a leaf and a
spine (parallel leaf-spine links are allowed and used for ECMP); there is no
spine, no leaf or no host; a leaf has no spine uplink or a spine no link; a
host cannot reach another host of its plane; a switch-switch link joins two
planes; a leaf has more than 253 hosts; a plane has more leaves than /24
subnets in its prefix; a switch needs more than 254
ports (port 255 is the CPU port), an ECMP group more than 64 next hops, or
more than 1024 IPv4 routes (the sizes ``p4src/fabric.p4`` declares).

Addressing: leaf k (1-based, in file order) owns the /24 at offset k inside
``host_prefix`` -- with the default 10.0.0.0/16, leaf k's subnet is
10.0.k.0/24 and the 0th /24 (10.0.0.0/24) is left unused -- so a prefix of
length P holds 2**(24-P) - 1 leaves. The j-th host of leaf k (in node order)
is ``.j``; ``.254`` is the leaf's gateway address. See ``addressing.py``.

The resolved model (``Fabric``, ``Node``, ``Port``, ``Link``, ``Server``,
``Plane``) is what the rest of the emulator uses. It is immutable; every
unit is in the name. Planes: every node has one (``Node.plane``; the plain
forms have only the compute plane), each plane its own prefix
(``Fabric.planes()``); device ids are unique across planes.
Links are stored in file order, oriented lower tier first: ``a`` is the host
(host links) or the leaf (fabric links). Switch ports are numbered from 1 per
switch in link order and are the P4 port numbers (``<sw>-eth<port_no>``); a
host's single port is 0 (``<host>-eth0``), as Mininet numbers a host's first
interface.
"""
from __future__ import annotations

import ipaddress
import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from emulator.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from emulator.topo.addressing import AddressPlan

Role = Literal["spine", "leaf", "host"]
ROLES: tuple[str, ...] = ("spine", "leaf", "host")
ServerRole = Literal["compute", "storage"]

# Planes: independently routed switch graphs with their own address prefix.
COMPUTE_PLANE = "compute"        # every fabric has it; the only plane of the plain forms
STORAGE_PLANE = "storage"        # the optional separate storage network
DEFAULT_STORAGE_PREFIX = "10.1.0.0/16"

DEFAULT_HOST_PREFIX = "10.0.0.0/16"
HOST_PORT_NO = 0                 # a host's only port: <host>-eth0
FIRST_SWITCH_PORT = 1            # switch ports: <sw>-eth1.. = P4 ports 1..
CPU_PORT = 255                   # p4src/fabric.p4 CPU_PORT
MAX_SWITCH_PORTS = CPU_PORT - 1  # data ports 1..254
MAX_ECMP_GROUP_SIZE = 64         # p4src/fabric.p4 @max_group_size(64)
MAX_IPV4_ROUTES = 1024           # p4src/fabric.p4 ipv4_lpm size
MAX_HOSTS_PER_LEAF = 253         # .1-.253 of the leaf's /24; .254 = gateway
MAX_NODE_NAME = 8                # "<name>-eth<254>" <= 15 chars (IFNAMSIZ-1)
MAX_FABRIC_NAME = 63

NODE_NAME_RE = re.compile(r"[a-z][a-z0-9]*")
FABRIC_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]*")


# --------------------------------------------------------------- file schema

class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class LinkParams(_Spec):
    rate_gbps: float = Field(gt=0, allow_inf_nan=False)
    delay_us: float = Field(ge=0, allow_inf_nan=False)


class ClosSpec(_Spec):
    spines: int = Field(ge=1)
    leaves: int = Field(ge=1)
    # hosts_per_leaf and host_link are required without servers, refused with
    # them (a server's NICs link at servers.nic_link); see _check_form.
    hosts_per_leaf: Optional[int] = Field(default=None, ge=1)
    host_link: Optional[LinkParams] = None
    servers_per_leaf: Optional[int] = Field(default=None, ge=1)   # only with servers
    fabric_link: LinkParams


class TenantSpec(_Spec):
    name: str
    count: int = Field(ge=1)             # servers, consecutive in server order
    dpu: Optional[bool] = None           # default: servers.dpu


class ServersSpec(_Spec):
    count: int = Field(ge=1)
    gpus_per_server: int = Field(ge=1)
    nvlink: Optional[LinkParams] = None  # required with more than one GPU
    nic_link: LinkParams
    dpu: bool = False
    tenants: Optional[list[TenantSpec]] = None


class RailOptimizedSpec(_Spec):
    spines: int = Field(ge=1)
    fabric_link: LinkParams


class StorageServersSpec(_Spec):
    count: int = Field(ge=1)
    nics_per_server: int = Field(default=1, ge=1)
    nic_link: LinkParams
    dpu: bool = False


class StoragePlaneSpec(_Spec):
    leaves: int = Field(ge=1)
    spines: int = Field(ge=1)
    access_link: LinkParams              # a compute server's storage NIC to its storage leaf
    fabric_link: LinkParams


class NodeSpec(_Spec):
    name: str
    role: Role


class LinkSpec(_Spec):
    a: str
    b: str
    rate_gbps: float = Field(gt=0, allow_inf_nan=False)
    delay_us: float = Field(ge=0, allow_inf_nan=False)


class AddressingSpec(_Spec):
    host_prefix: str = DEFAULT_HOST_PREFIX          # the compute plane's
    storage_prefix: Optional[str] = None            # only with storage_plane


class FabricSpec(_Spec):
    name: str
    clos: Optional[ClosSpec] = None
    nodes: Optional[list[NodeSpec]] = None
    links: Optional[list[LinkSpec]] = None
    servers: Optional[ServersSpec] = None
    rail_optimized: Optional[RailOptimizedSpec] = None
    storage_servers: Optional[StorageServersSpec] = None
    storage_plane: Optional[StoragePlaneSpec] = None
    addressing: Optional[AddressingSpec] = None


# ------------------------------------------------------------ resolved model

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


def _name(node: NodeRef) -> str:
    return node.name if isinstance(node, Node) else node


@dataclass(frozen=True)
class Plane:
    """An independently routed switch graph: no route leads off it."""
    name: str          # COMPUTE_PLANE or STORAGE_PLANE
    host_prefix: str   # its leaves' /24s are carved from it (see addressing.py)


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
    host_prefix: str = DEFAULT_HOST_PREFIX        # the compute plane's
    # Only the server form sets these; the defaults describe a plain fabric:
    # one compute plane (host_prefix), every host its own 1-GPU server.
    plane_table: tuple[Plane, ...] = ()
    server_table: tuple[Server, ...] = ()
    rails: tuple[str, ...] = ()       # rail-optimized: leaf of rail i (= local GPU rank i)
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
        # Plane by plane, leaves then spines: a plane added to a fabric does
        # not renumber the devices (nor router MACs) of the planes before it.
        switches = tuple(n for p in planes for r in ("leaf", "spine")
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

    def switches(self) -> tuple[Node, ...]:
        """Plane by plane, leaves then spines; device ids follow this order."""
        return self._switches

    def node(self, name: NodeRef) -> Node:
        try:
            return self._by_name[_name(name)]
        except KeyError:
            raise KeyError(f"fabric {self.name} has no node {_name(name)!r}") from None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, (str, Node)) and _name(name) in self._by_name

    # ports and links
    def ports(self, node: NodeRef) -> tuple[Port, ...]:
        """The node's ports in port-number order."""
        return self._ports[self.node(node).name]

    def port(self, node: NodeRef, port_no: int) -> Port:
        for p in self.ports(node):
            if p.port_no == port_no:
                return p
        raise KeyError(f"{_name(node)} has no port {port_no}")

    def links_between(self, a: NodeRef, b: NodeRef) -> tuple[Link, ...]:
        """Every link joining a and b (several if parallel), in link order."""
        an, bn = _name(a), _name(b)
        return tuple(self.links[p.link_index] for p in self.ports(an) if p.peer == bn)

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

    def is_rail_optimized(self) -> bool:
        return bool(self.rails)

    @cached_property
    def addresses(self) -> "AddressPlan":
        """The fabric's AddressPlan (IPs, MACs, subnets, router MACs)."""
        from emulator.topo.addressing import AddressPlan
        return AddressPlan(self)


# ------------------------------------------------------------------- loading

def load_fabric(path: str | Path, *, field_prefix: str = "") -> Fabric:
    """Read and validate a topology file; raise ConfigError on any problem."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ConfigError(source, "", f"cannot read topology file: {reason}") from None
    data = parse_yaml(text, source)
    return fabric_from_dict(data, source, field_prefix=field_prefix)


def fabric_from_dict(data: Any, source: str = "<inline>", *, field_prefix: str = "") -> Fabric:
    """Validate an already-parsed topology (e.g. embedded in an experiment).

    ``field_prefix`` (e.g. ``"topology"``) is prepended to field paths in
    errors, so they point into the enclosing file.
    """
    ctx = _Ctx(str(source), field_prefix)
    if data is None:
        raise ctx.err("", "topology is empty")
    if not isinstance(data, Mapping):
        raise ctx.err("", f"a topology must be a mapping, got {_show(data)}")
    try:
        spec = FabricSpec.model_validate(dict(data))
    except ValidationError as e:
        raise _from_pydantic(ctx, e) from None
    return _resolve(spec, ctx)


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects repeated mapping keys instead of keeping the last."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False):
    loader.flatten_mapping(node)
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, Hashable):
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, source: str) -> Any:
    """YAML text -> Python data; syntax errors become ConfigError("line N")."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (safe loader subclass)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = e.problem or e.context or "invalid YAML"
        if mark is not None:
            raise ConfigError(source, f"line {mark.line + 1}",
                              f"YAML syntax error: {problem} (column {mark.column + 1})") from None
        raise ConfigError(source, "", f"YAML syntax error: {problem}") from None
    except yaml.YAMLError as e:
        raise ConfigError(source, "", f"YAML syntax error: {e}") from None


# ------------------------------------------------------------ error helpers

@dataclass(frozen=True)
class _Ctx:
    source: str
    prefix: str

    def path(self, fld: str) -> str:
        if not self.prefix:
            return fld
        if not fld:
            return self.prefix
        return self.prefix + fld if fld.startswith("[") else f"{self.prefix}.{fld}"

    def err(self, fld: str, reason: str) -> ConfigError:
        return ConfigError(self.source, self.path(fld), reason)


def _show(value: Any) -> str:
    """A value as the user wrote it in YAML, shortened."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _loc_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _model_at(loc: tuple) -> Optional[type[BaseModel]]:
    """The schema model that the location loc (of a field's parent) refers to."""
    model: Any = FabricSpec
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        f = model.model_fields.get(part)
        if f is None:
            return None
        model = _unwrap(f.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    while True:
        origin = get_origin(tp)
        if origin is None:
            return tp
        args = [a for a in get_args(tp) if a is not type(None)]
        if not args:
            return tp
        tp = args[0]


_TYPE_NAMES = {
    "int_type": "an integer", "float_type": "a number", "string_type": "a string",
    "list_type": "a list", "model_type": "a mapping", "dict_type": "a mapping",
    "model_attributes_type": "a mapping", "bool_type": "true or false",
}


def _from_pydantic(ctx: _Ctx, exc: ValidationError) -> ConfigError:
    errors = exc.errors(include_url=False)
    e = errors[0]
    loc = tuple(e["loc"])
    kind, value, ectx = e["type"], e.get("input"), e.get("ctx") or {}
    if kind == "missing":
        reason = "required"
    elif kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        allowed = ", ".join(model.model_fields) if model else ""
        reason = f"unknown field{f' (expected one of: {allowed})' if allowed else ''}"
    elif kind == "literal_error":
        expected = str(ectx.get("expected", "")).replace("'", "")
        reason = f"must be one of {expected} (got {_show(value)})"
    elif kind in _TYPE_NAMES:
        reason = f"must be {_TYPE_NAMES[kind]} (got {_show(value)})"
    elif kind == "greater_than":
        reason = f"must be > {ectx.get('gt')} (got {_show(value)})"
    elif kind == "greater_than_equal":
        reason = f"must be >= {ectx.get('ge')} (got {_show(value)})"
    elif kind == "finite_number":
        reason = f"must be a finite number (got {_show(value)})"
    else:
        msg = str(e.get("msg", "invalid"))
        msg = msg.removeprefix("Value error, ")
        reason = f"{msg[:1].lower()}{msg[1:]} (got {_show(value)})"
    if len(errors) > 1:
        more = len(errors) - 1
        reason += f" [+{more} more error{'s' if more > 1 else ''}]"
    return ctx.err(_loc_path(loc), reason)


# ---------------------------------------------------------------- resolving

@dataclass
class _DNode:
    name: str
    role: str
    where: str        # field path of the node (errors)
    plane: str = COMPUTE_PLANE   # hosts: set from their leaf when building


@dataclass
class _DLink:
    a: str
    b: str
    rate_bps: int
    delay_ns: int
    where: str        # field path of the link (errors)


_TIER = {"host": 0, "leaf": 1, "spine": 2}


def _rate_bps(gbps: float) -> int:
    return max(1, round(gbps * 1e9))


def _delay_ns(us: float) -> int:
    return round(us * 1e3)


def _check_fabric_name(ctx: _Ctx, name: str) -> None:
    if not FABRIC_NAME_RE.fullmatch(name):
        raise ctx.err("name", f"{name!r} is not a valid fabric name: use [a-z0-9][a-z0-9-]*")
    if len(name) > MAX_FABRIC_NAME:
        raise ctx.err("name", f"longer than {MAX_FABRIC_NAME} characters")


def _parse_prefix(ctx: _Ctx, spec: FabricSpec, key: str = "host_prefix") -> ipaddress.IPv4Network:
    default = DEFAULT_HOST_PREFIX if key == "host_prefix" else DEFAULT_STORAGE_PREFIX
    text = (getattr(spec.addressing, key) if spec.addressing else None) or default
    fld = f"addressing.{key}"
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError as e:
        raise ctx.err(fld, f"not a valid IPv4 prefix: {e}") from None
    if not isinstance(net, ipaddress.IPv4Network):
        raise ctx.err(fld, f"{text} is IPv6; {key} must be IPv4")
    if net.prefixlen > 23:
        raise ctx.err(fld, f"{text} is too small: leaf k gets the /24 at offset k inside it, "
                           f"so it must be /23 or shorter")
    return net


def _plane_prefixes(ctx: _Ctx, spec: FabricSpec) -> dict[str, ipaddress.IPv4Network]:
    """plane -> its host prefix, compute plane first."""
    compute = _parse_prefix(ctx, spec)
    if spec.storage_plane is None:
        if spec.addressing and spec.addressing.storage_prefix is not None:
            raise ctx.err("addressing.storage_prefix",
                          "only with storage_plane (the prefix of a separate storage network)")
        return {COMPUTE_PLANE: compute}
    storage = _parse_prefix(ctx, spec, "storage_prefix")
    if storage.overlaps(compute):
        raise ctx.err("addressing.storage_prefix",
                      f"{storage} overlaps host_prefix {compute}: each plane needs its own prefix")
    return {COMPUTE_PLANE: compute, STORAGE_PLANE: storage}


def leaf_capacity(prefix: ipaddress.IPv4Network) -> int:
    """How many leaf /24s fit in a host prefix (offset 0 is left unused)."""
    return 2 ** (24 - prefix.prefixlen) - 1


def _check_form(spec: FabricSpec, ctx: _Ctx) -> None:
    """Exactly one fabric form: clos | nodes + links | servers + (rail_optimized | clos)."""
    explicit = spec.nodes is not None or spec.links is not None
    if spec.clos is not None and explicit:
        raise ctx.err("clos", "give either clos or nodes + links, not both")
    if spec.rail_optimized is not None:
        if spec.servers is None:
            raise ctx.err("rail_optimized", "requires servers (rail i joins NIC i of every server)")
        if spec.clos is not None:
            raise ctx.err("rail_optimized", "give either rail_optimized or clos, not both")
    if spec.servers is not None:
        if explicit:
            raise ctx.err("servers", "servers need rail_optimized or clos, not nodes + links")
        if spec.clos is None and spec.rail_optimized is None:
            raise ctx.err("servers", "requires rail_optimized or clos (the fabric their NICs attach to)")
    elif spec.storage_servers is not None:
        raise ctx.err("storage_servers", "requires servers (the compute servers)")
    if spec.storage_plane is not None and spec.storage_servers is None:
        raise ctx.err("storage_plane", "requires storage_servers (the servers on the storage plane)")
    if spec.clos is None and not explicit and spec.servers is None:
        raise ctx.err("", "missing fabric: give either clos or nodes + links "
                          "(or servers with rail_optimized or clos)")
    if explicit and spec.nodes is None:
        raise ctx.err("nodes", "required with links")
    if explicit and spec.links is None:
        raise ctx.err("links", "required with nodes")
    c = spec.clos
    if c is not None and spec.servers is None:
        for key in ("hosts_per_leaf", "host_link"):
            if getattr(c, key) is None:
                raise ctx.err(f"clos.{key}", "required")
        if c.servers_per_leaf is not None:
            raise ctx.err("clos.servers_per_leaf", "only with servers (use hosts_per_leaf)")
    elif c is not None:
        if c.hosts_per_leaf is not None:
            raise ctx.err("clos.hosts_per_leaf", "not with servers: use servers_per_leaf "
                                                 "(a server's NICs share its leaf)")
        if c.host_link is not None:
            raise ctx.err("clos.host_link", "not with servers: NIC links are servers.nic_link")


def _resolve(spec: FabricSpec, ctx: _Ctx) -> Fabric:
    _check_fabric_name(ctx, spec.name)
    _check_form(spec, ctx)
    prefixes = _plane_prefixes(ctx, spec)
    prefix = prefixes[COMPUTE_PLANE]
    servers: tuple[Server, ...] = ()
    rails: tuple[str, ...] = ()
    if spec.servers is not None:
        from emulator.topo.servers import expand_servers
        nodes, links, servers, rails = expand_servers(spec, ctx)
    elif spec.clos is not None:
        nodes, links = _expand_clos(spec.clos, prefix, ctx)
    else:
        nodes = [_DNode(n.name, n.role, f"nodes[{i}]") for i, n in enumerate(spec.nodes or [])]
        links = [_DLink(l.a, l.b, _rate_bps(l.rate_gbps), _delay_ns(l.delay_us), f"links[{i}]")
                 for i, l in enumerate(spec.links or [])]
    fabric = _validate_and_build(spec.name, ctx, nodes, links, prefixes, servers, rails)
    _check_pipeline_limits(fabric, ctx, {n.name: n.where for n in nodes})
    return fabric


def _expand_clos(c: ClosSpec, prefix: ipaddress.IPv4Network, ctx: _Ctx):
    # Limits first, so errors name the clos field rather than a generated node.
    if c.hosts_per_leaf > MAX_HOSTS_PER_LEAF:
        raise ctx.err("clos.hosts_per_leaf",
                      f"{c.hosts_per_leaf} hosts do not fit a leaf's /24 "
                      f"(at most {MAX_HOSTS_PER_LEAF}: .1-.253, .254 is the gateway)")
    if c.spines > MAX_ECMP_GROUP_SIZE:
        raise ctx.err("clos.spines",
                      f"{c.spines} spines need {c.spines}-way ECMP; the P4 pipeline's "
                      f"max_group_size is {MAX_ECMP_GROUP_SIZE}")
    if c.hosts_per_leaf + c.spines > MAX_SWITCH_PORTS:
        raise ctx.err("clos.hosts_per_leaf",
                      f"a leaf would need {c.hosts_per_leaf} host + {c.spines} spine ports = "
                      f"{c.hosts_per_leaf + c.spines}; a switch has at most {MAX_SWITCH_PORTS} "
                      f"(port {CPU_PORT} is the CPU port)")
    if c.leaves > MAX_SWITCH_PORTS:
        raise ctx.err("clos.leaves",
                      f"a spine would need {c.leaves} ports; a switch has at most "
                      f"{MAX_SWITCH_PORTS} (port {CPU_PORT} is the CPU port)")
    cap = leaf_capacity(prefix)
    if c.leaves > cap:
        raise ctx.err("addressing.host_prefix",
                      f"{prefix} holds {cap} leaf /24 subnets; the fabric has {c.leaves} leaves")
    nodes = [_DNode(f"spine{s}", "spine", "clos.spines") for s in range(1, c.spines + 1)]
    nodes += [_DNode(f"leaf{k}", "leaf", "clos.leaves") for k in range(1, c.leaves + 1)]
    nodes += [_DNode(f"h{h}", "host", "clos.hosts_per_leaf")
              for h in range(1, c.leaves * c.hosts_per_leaf + 1)]
    hr, hd = _rate_bps(c.host_link.rate_gbps), _delay_ns(c.host_link.delay_us)
    fr, fd = _rate_bps(c.fabric_link.rate_gbps), _delay_ns(c.fabric_link.delay_us)
    links = []
    for k in range(1, c.leaves + 1):
        for j in range(1, c.hosts_per_leaf + 1):
            links.append(_DLink(f"h{(k - 1) * c.hosts_per_leaf + j}", f"leaf{k}", hr, hd, "clos"))
    for k in range(1, c.leaves + 1):
        for s in range(1, c.spines + 1):
            links.append(_DLink(f"leaf{k}", f"spine{s}", fr, fd, "clos"))
    return nodes, links


def _validate_and_build(name: str, ctx: _Ctx, nodes: list[_DNode], links: list[_DLink],
                        prefixes: dict[str, ipaddress.IPv4Network],
                        servers: tuple[Server, ...] = (), rails: tuple[str, ...] = ()) -> Fabric:
    # Nodes: names and uniqueness.
    by_name: dict[str, _DNode] = {}
    for n in nodes:
        if not NODE_NAME_RE.fullmatch(n.name):
            raise ctx.err(f"{n.where}.name",
                          f"{n.name!r} is not a valid node name: use [a-z][a-z0-9]* "
                          f"(it names Linux interfaces <node>-ethN)")
        if len(n.name) > MAX_NODE_NAME:
            raise ctx.err(f"{n.where}.name",
                          f"{n.name!r} is longer than {MAX_NODE_NAME} characters "
                          f"(interface names <node>-ethN must fit 15)")
        if n.name in by_name:
            raise ctx.err(f"{n.where}.name",
                          f"duplicate node name {n.name!r} (first at {ctx.path(by_name[n.name].where)})")
        by_name[n.name] = n
    for role in ("spine", "leaf", "host"):
        if not any(n.role == role for n in nodes):
            raise ctx.err("nodes", f"no node has role {role}; a 2-tier CLOS needs at least one")

    # Links: endpoints and roles.
    pair_first: dict[frozenset, _DLink] = {}
    for l in links:
        for end in ("a", "b"):
            peer = getattr(l, end)
            if peer not in by_name:
                raise ctx.err(f"{l.where}.{end}", f"unknown node {peer!r}")
        if l.a == l.b:
            raise ctx.err(f"{l.where}.b", f"self-link: {l.a} to itself")
        ra, rb = by_name[l.a].role, by_name[l.b].role
        roles = {ra, rb}
        if roles not in ({"host", "leaf"}, {"leaf", "spine"}):
            raise ctx.err(l.where,
                          f"{ra}-{rb} link {l.a}-{l.b} is not valid in a 2-tier CLOS "
                          f"(hosts connect to leaves, leaves to spines)")
        pa, pb = by_name[l.a].plane, by_name[l.b].plane
        if "host" not in roles and pa != pb:
            raise ctx.err(l.where, f"link {l.a}-{l.b} joins the {pa} plane to the {pb} plane; "
                                   f"planes are separate networks")
        key = frozenset((l.a, l.b))
        if key in pair_first and roles != {"leaf", "spine"}:
            raise ctx.err(l.where, f"parallel link {l.a}-{l.b} (first at "
                                   f"{ctx.path(pair_first[key].where)}); only leaf-spine "
                                   f"links may be parallel")
        pair_first.setdefault(key, l)

    # Per-node degree rules.
    attached: dict[str, list[_DLink]] = {n.name: [] for n in nodes}
    for l in links:
        attached[l.a].append(l)
        attached[l.b].append(l)
    for n in nodes:
        mine = attached[n.name]
        if n.role == "host":
            if not mine:
                raise ctx.err(n.where, f"host {n.name} has no link; a host needs one link to a leaf")
            if len(mine) > 1:
                raise ctx.err(mine[1].where, f"host {n.name} has a second link (first at "
                                             f"{ctx.path(mine[0].where)}); a host has exactly one")
        elif n.role == "leaf":
            if not any(by_name[_other(l, n.name)].role == "spine" for l in mine):
                raise ctx.err(n.where, f"leaf {n.name} has no link to a spine")
        elif not mine:
            raise ctx.err(n.where, f"spine {n.name} has no link")

    # A host is on its leaf's plane.
    for n in nodes:
        if n.role == "host":
            n.plane = by_name[_other(attached[n.name][0], n.name)].plane

    # Capacity: hosts per leaf, leaves in the prefix, ports per switch.
    leaves = [n for n in nodes if n.role == "leaf"]
    for leaf in leaves:
        hosts = sum(1 for l in attached[leaf.name] if by_name[_other(l, leaf.name)].role == "host")
        if hosts > MAX_HOSTS_PER_LEAF:
            raise ctx.err(leaf.where, f"leaf {leaf.name} has {hosts} hosts; its /24 holds "
                                      f"{MAX_HOSTS_PER_LEAF} (.1-.253, .254 is the gateway)")
    for plane, prefix in prefixes.items():
        cap = leaf_capacity(prefix)
        count = sum(1 for l in leaves if l.plane == plane)
        if count > cap:
            key = "host_prefix" if plane == COMPUTE_PLANE else f"{plane}_prefix"
            what = "the fabric" if len(prefixes) == 1 else f"the {plane} plane"
            raise ctx.err(f"addressing.{key}",
                          f"{prefix} holds {cap} leaf /24 subnets; {what} has {count} leaves")
    for n in nodes:
        if n.role != "host" and len(attached[n.name]) > MAX_SWITCH_PORTS:
            raise ctx.err(n.where, f"{n.role} {n.name} has {len(attached[n.name])} links; a switch "
                                   f"has at most {MAX_SWITCH_PORTS} ports (port {CPU_PORT} is the CPU port)")

    # Every host reaches every host: leaves with hosts share one switch component.
    _check_reachability(ctx, nodes, links, by_name)

    # Build: role indexes, port numbers, oriented links.
    counters = {r: 0 for r in ROLES}
    out_nodes = []
    for n in nodes:
        counters[n.role] += 1
        out_nodes.append(Node(n.name, n.role, counters[n.role], n.plane))  # type: ignore[arg-type]
    next_port = {n.name: (HOST_PORT_NO if n.role == "host" else FIRST_SWITCH_PORT) for n in nodes}
    out_links = []
    for l in links:
        a, b = l.a, l.b
        if _TIER[by_name[a].role] > _TIER[by_name[b].role]:
            a, b = b, a
        pa, pb = next_port[a], next_port[b]
        next_port[a], next_port[b] = pa + 1, pb + 1
        out_links.append(Link(a, pa, b, pb, l.rate_bps, l.delay_ns))
    planes = tuple(Plane(p, str(net)) for p, net in prefixes.items()) if len(prefixes) > 1 else ()
    return Fabric(name, ctx.source, tuple(out_nodes), tuple(out_links),
                  str(prefixes[COMPUTE_PLANE]), planes, servers, rails)


def _other(l: _DLink, name: str) -> str:
    return l.b if l.a == name else l.a


def _check_reachability(ctx: _Ctx, nodes, links, by_name) -> None:
    """Every host reaches every host of its plane (planes never reach each other)."""
    adj: dict[str, set[str]] = {n.name: set() for n in nodes if n.role != "host"}
    host_leaf: dict[str, str] = {}
    for l in links:
        ra, rb = by_name[l.a].role, by_name[l.b].role
        if ra != "host" and rb != "host":
            adj[l.a].add(l.b)
            adj[l.b].add(l.a)
        elif ra == "host":
            host_leaf[l.a] = l.b
        else:
            host_leaf[l.b] = l.a
    planes = dict.fromkeys(by_name[leaf].plane for leaf in host_leaf.values())
    for plane in planes:
        hosts = [n.name for n in nodes if n.role == "host" and by_name[host_leaf[n.name]].plane == plane]
        start = host_leaf[hosts[0]]
        seen = {start}
        todo = [start]
        while todo:
            cur = todo.pop()
            for nxt in adj[cur]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        for h in hosts[1:]:
            if host_leaf[h] not in seen:
                raise ctx.err("links", f"host {hosts[0]} (on {start}) cannot reach host {h} "
                                       f"(on {host_leaf[h]}): no path between the leaves through spines")


def _check_pipeline_limits(fabric: Fabric, ctx: _Ctx, where: dict[str, str]) -> None:
    from emulator.topo.routes import compute_routes

    for sw, routes in compute_routes(fabric).items():
        if len(routes) > MAX_IPV4_ROUTES:
            raise ctx.err(where[sw], f"{sw} needs {len(routes)} IPv4 routes; the P4 pipeline's "
                                     f"ipv4_lpm holds {MAX_IPV4_ROUTES}")
        for r in routes:
            if len(r.next_hops) > MAX_ECMP_GROUP_SIZE:
                raise ctx.err(where[sw], f"{sw} needs a {len(r.next_hops)}-way ECMP group toward "
                                         f"{r.prefix}; the P4 pipeline's max_group_size is "
                                         f"{MAX_ECMP_GROUP_SIZE}")
