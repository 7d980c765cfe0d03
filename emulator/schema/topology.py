"""The schema of a topology file (validated here; resolved by ``emulator.topo.build``).

A topology file describes one leaf/spine (CLOS) fabric of P4 switches with
hosts on the leaves: two tiers, or three (pods joined by super spines). It is YAML, in one of two forms -- or, for GPU
servers with several NICs, rail-optimized fabrics and a separate storage
plane, in the server form documented in ``emulator/topo/servers.py``.

A *host* node is one NIC endpoint: one port to its leaf, its own IP, MAC and
gateway. A *server* groups NIC endpoints (GPU i <-> NIC i) in one network
namespace; in the two forms below every host is its own 1-GPU server of the
same name (``Fabric.servers()``).

Parametric form::
Forms: parametric (``clos:``: two tiers, or three with pods and super spines),
explicit (``nodes:`` + ``links:``) and the server form (``topo/servers.py``). The
fields, what makes a fabric rejected, and the addressing: ``docs/design-notes.md``,
"The topology file: forms, rules, addressing".
What this module checks is what can be checked on the file alone: types,
ranges, unknown fields, the fabric name, which form is given and the
address prefixes. What needs the expanded node/link graph (names, link
rules, reachability, capacities, pipeline sizes) is ``emulator.topo.build``.
"""
from __future__ import annotations

import ipaddress
from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, Field, model_validator

from emulator.schema.limits import DelayUs, RateGbps, name_problem
from emulator.schema.load import FieldError, StrictSpec
from emulator.schema.management import ManagementSpec, check_against_planes
from emulator.schema.vocabulary import DEFAULT_HOST_PREFIX, DEFAULT_STORAGE_PREFIX, Role

# Hosts a plane can address: 254 leaves (a spine's ports), 253 hosts on each
# leaf's /24. Counts are bounded by it before the fabric is expanded.
MAX_HOSTS = 254 * 253


def _host_count(n: int) -> int:
    """at most MAX_HOSTS (254 leaves x 253 hosts)"""
    if n > MAX_HOSTS:
        raise ValueError(f"must be at most {MAX_HOSTS}: a plane addresses 254 leaves x 253 hosts")
    return n


Count = Annotated[int, Field(ge=1), AfterValidator(_host_count)]   # of servers, hosts, NICs


class LinkParams(StrictSpec):
    rate_gbps: RateGbps
    delay_us: DelayUs

    @property
    def rate_bps(self) -> int:
        return rate_bps(self.rate_gbps)

    @property
    def delay_ns(self) -> int:
        return delay_ns(self.delay_us)


def rate_bps(gbps: float) -> int:
    """A file's Gbit/s as the model's integer bit/s (at least 1)."""
    return max(1, round(gbps * 1e9))


def delay_ns(us: float) -> int:
    """A file's µs as the model's integer ns."""
    return round(us * 1e3)


class ClosSpec(StrictSpec):
    spines: int = Field(ge=1)          # per pod
    leaves: int = Field(ge=1)          # per pod
    pods: int = Field(default=1, ge=1)
    # With pods > 1 (required then, refused with one pod): the third tier.
    # Spine j of every pod links to the super spines of plane j.
    super_spines: Optional[int] = Field(default=None, ge=1)
    super_link: Optional[LinkParams] = None   # spine-super spine links; default fabric_link
    # hosts_per_leaf and host_link are required without servers, refused with
    # them (a server's NICs link at servers.nic_link); see FabricSpec._form.
    hosts_per_leaf: Optional[int] = Field(default=None, ge=1)
    host_link: Optional[LinkParams] = None
    servers_per_leaf: Optional[int] = Field(default=None, ge=1)   # only with servers
    fabric_link: LinkParams


class TenantSpec(StrictSpec):
    name: str
    count: Count   # servers, consecutive in server order
    dpu: Optional[bool] = None           # default: servers.dpu


class ServersSpec(StrictSpec):
    count: Count
    gpus_per_server: Count
    nvlink: Optional[LinkParams] = None  # required with more than one GPU
    nic_link: LinkParams
    dpu: bool = False
    tenants: Optional[list[TenantSpec]] = None

    @model_validator(mode="after")
    def _nics(self):
        _check_nics(self.count, self.gpus_per_server, "gpus_per_server")
        return self


class RailOptimizedSpec(StrictSpec):
    spines: int = Field(ge=1)
    units: int = Field(default=1, ge=1)    # scalable units, each with its own rail leaves
    fabric_link: LinkParams


class StorageServersSpec(StrictSpec):
    count: Count
    nics_per_server: Count = 1
    nic_link: LinkParams
    dpu: bool = False

    @model_validator(mode="after")
    def _nics(self):
        _check_nics(self.count, self.nics_per_server, "nics_per_server")
        return self


def _check_nics(servers: int, per_server: int, field: str) -> None:
    # Checked before the fabric is expanded: a billion servers must not be built to be refused.
    if servers * per_server > MAX_HOSTS:
        raise FieldError(field, f"{servers} servers x {per_server} NICs = {servers * per_server} hosts; a plane "
                                f"addresses at most {MAX_HOSTS} (254 leaves x 253 hosts)")


class StoragePlaneSpec(StrictSpec):
    leaves: int = Field(ge=1)
    spines: int = Field(ge=1)
    access_link: LinkParams              # a compute server's storage NIC to its storage leaf
    fabric_link: LinkParams


class NodeSpec(StrictSpec):
    name: str
    role: Role


class LinkSpec(StrictSpec):
    a: str
    b: str
    rate_gbps: RateGbps
    delay_us: DelayUs


class AddressingSpec(StrictSpec):
    host_prefix: str = DEFAULT_HOST_PREFIX          # the compute plane's
    storage_prefix: Optional[str] = None            # only with storage_plane


class FabricSpec(StrictSpec):
    name: str                                       # [a-z0-9][a-z0-9-]*, <= 63 chars
    clos: Optional[ClosSpec] = None
    nodes: Optional[list[NodeSpec]] = None
    links: Optional[list[LinkSpec]] = None
    servers: Optional[ServersSpec] = None
    rail_optimized: Optional[RailOptimizedSpec] = None
    storage_servers: Optional[StorageServersSpec] = None
    storage_plane: Optional[StoragePlaneSpec] = None
    addressing: Optional[AddressingSpec] = None
    management: Optional[ManagementSpec] = None     # in-band / out-of-band (schema/management.py)
    # the fabric's link layer: RoCEv2 on Ethernet (PFC, ECN), or InfiniBand
    # (credit-based flow control, LIDs and LFTs from the subnet manager)
    link_layer: Literal["roce", "infiniband"] = "roce"

    @model_validator(mode="after")
    def _whole_file(self):
        # In this order: a file's first problem is the one reported.
        _check_name(self.name)
        _check_form(self)
        compute, storage = self.prefixes()
        if self.management is not None:
            check_against_planes(self.management, {"host_prefix": compute,
                                                   **({"storage_prefix": storage} if storage else {})})
        return self

    def prefixes(self) -> tuple[ipaddress.IPv4Network, Optional[ipaddress.IPv4Network]]:
        """(compute plane's prefix, separate storage plane's prefix or None)."""
        compute = _parse_prefix(self, "host_prefix")
        if self.storage_plane is None:
            if self.addressing and self.addressing.storage_prefix is not None:
                raise FieldError("addressing.storage_prefix",
                                 "only with storage_plane (the prefix of a separate storage network)")
            return compute, None
        storage = _parse_prefix(self, "storage_prefix")
        if storage.overlaps(compute):
            raise FieldError("addressing.storage_prefix",
                             f"{storage} overlaps host_prefix {compute}: each plane needs its own prefix")
        return compute, storage


def _check_name(name: str) -> None:
    if (why := name_problem(name, "fabric")) is not None:
        raise FieldError("name", why)


def _parse_prefix(spec: FabricSpec, key: str) -> ipaddress.IPv4Network:
    default = DEFAULT_HOST_PREFIX if key == "host_prefix" else DEFAULT_STORAGE_PREFIX
    text = (getattr(spec.addressing, key) if spec.addressing else None) or default
    fld = f"addressing.{key}"
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError as e:
        raise FieldError(fld, f"not a valid IPv4 prefix: {e}") from None
    if not isinstance(net, ipaddress.IPv4Network):
        raise FieldError(fld, f"{text} is IPv6; {key} must be IPv4")
    if net.prefixlen > 23:
        raise FieldError(fld, f"{text} is too small: leaf k gets the /24 at offset k inside it, "
                              f"so it must be /23 or shorter")
    return net


def _check_form(spec: FabricSpec) -> None:
    """Exactly one fabric form: clos | nodes + links | servers + (rail_optimized | clos)."""
    explicit = spec.nodes is not None or spec.links is not None
    if spec.clos is not None and explicit:
        raise FieldError("clos", "give either clos or nodes + links, not both")
    if spec.rail_optimized is not None:
        if spec.servers is None:
            raise FieldError("rail_optimized", "requires servers (rail i joins NIC i of every server)")
        if spec.clos is not None:
            raise FieldError("rail_optimized", "give either rail_optimized or clos, not both")
    if spec.servers is not None:
        if explicit:
            raise FieldError("servers", "servers need rail_optimized or clos, not nodes + links")
        if spec.clos is None and spec.rail_optimized is None:
            raise FieldError("servers", "requires rail_optimized or clos (the fabric their NICs attach to)")
    elif spec.storage_servers is not None:
        raise FieldError("storage_servers", "requires servers (the compute servers)")
    if spec.storage_plane is not None and spec.storage_servers is None:
        raise FieldError("storage_plane", "requires storage_servers (the servers on the storage plane)")
    if spec.clos is None and not explicit and spec.servers is None:
        raise FieldError("", "missing fabric: give either clos or nodes + links "
                             "(or servers with rail_optimized or clos)")
    if explicit and spec.nodes is None:
        raise FieldError("nodes", "required with links")
    if explicit and spec.links is None:
        raise FieldError("links", "required with nodes")
    c = spec.clos
    if c is not None:
        _check_pods(c)
    if c is not None and spec.servers is None:
        for key in ("hosts_per_leaf", "host_link"):
            if getattr(c, key) is None:
                raise FieldError(f"clos.{key}", "required")
        if c.servers_per_leaf is not None:
            raise FieldError("clos.servers_per_leaf", "only with servers (use hosts_per_leaf)")
    elif c is not None:
        if c.hosts_per_leaf is not None:
            raise FieldError("clos.hosts_per_leaf", "not with servers: use servers_per_leaf "
                                                    "(a server's NICs share its leaf)")
        if c.host_link is not None:
            raise FieldError("clos.host_link", "not with servers: NIC links are servers.nic_link")


def _check_pods(c: ClosSpec) -> None:
    if c.pods == 1:
        for key in ("super_spines", "super_link"):
            if getattr(c, key) is not None:
                raise FieldError(f"clos.{key}", "only with pods > 1 (super spines join pods)")
        return
    if c.super_spines is None:
        raise FieldError("clos.super_spines", f"required with {c.pods} pods: the tier that joins them")
    if c.super_spines % c.spines:
        raise FieldError("clos.super_spines",
                         f"{c.super_spines} super spines do not split into {c.spines} planes "
                         f"(spine j of every pod links to plane j): use a multiple of clos.spines")
