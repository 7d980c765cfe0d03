"""The builder: a topology file (or its parsed data) -> a checked ``Fabric``.

    fabric = load_fabric("topologies/clos-2x2.yaml")

``emulator.schema.topology`` validates the file on its own (types, ranges,
which form, the prefixes); this module expands the form into nodes and
links (the server form through ``servers.py``), checks what needs the graph
-- node names, link rules, degrees, reachability, capacities, and the P4
pipeline's table sizes through ``routes.py`` -- and numbers the ports. It
sits on top of the topology layer: graph <- addressing, routes, servers <-
build. Every problem is a ``ConfigError("FILE", "field.path", "reason")``.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from emulator.schema.load import read_yaml, show, validate
from emulator.schema.topology import ClosSpec, FabricSpec, delay_ns, rate_bps
from emulator.topo.addressing import MGMT_BRIDGE, MGMT_HOST, AddressPlan, switch_mgmt_netns
from emulator.topo.draft import BuildContext, DraftLink, DraftNode, clos_switches
from emulator.topo.graph import (
    COMPUTE_PLANE,
    CPU_PORT,
    FIRST_SWITCH_PORT,
    HOST_PORT_NO,
    MAX_ECMP_GROUP_SIZE,
    MAX_HOSTS_PER_LEAF,
    MAX_IPV4_ROUTES,
    MAX_NODE_NAME,
    MAX_SWITCH_PORTS,
    NODE_NAME_RE,
    ROLES,
    STORAGE_PLANE,
    Fabric,
    Link,
    ManagementNet,
    Node,
    Plane,
    Server,
)
from emulator.topo.routes import compute_routes
from emulator.topo.servers import expand_servers

_TIER = {"host": 0, "leaf": 1, "spine": 2, "superspine": 3}
# Links join adjacent tiers only; between switches they may be parallel (ECMP).
_LINK_ROLES = ({"host", "leaf"}, {"leaf", "spine"}, {"spine", "superspine"})


def load_fabric(path: str | Path, *, field_prefix: str = "") -> Fabric:
    """Read and validate a topology file; raise ConfigError on any problem."""
    return fabric_from_dict(read_yaml(path, "topology file"), str(path), field_prefix=field_prefix)


def fabric_from_dict(data: Any, source: str = "<inline>", *, field_prefix: str = "") -> Fabric:
    """Validate an already-parsed topology (e.g. embedded in an experiment).

    ``field_prefix`` (e.g. ``"topology"``) is prepended to field paths in
    errors, so they point into the enclosing file.
    """
    ctx = BuildContext(str(source), field_prefix)
    if data is None:
        raise ctx.err("", "topology is empty")
    if not isinstance(data, Mapping):
        raise ctx.err("", f"a topology must be a mapping, got {show(data)}")
    spec = validate(FabricSpec, dict(data), ctx.source, prefix=field_prefix)
    return build_fabric(spec, ctx)


def build_fabric(spec: FabricSpec, ctx: BuildContext) -> Fabric:
    """The fabric a validated topology file describes."""
    compute, storage = spec.prefixes()
    prefixes = {COMPUTE_PLANE: compute, **({STORAGE_PLANE: storage} if storage else {})}
    servers: tuple[Server, ...] = ()
    rails: tuple[str, ...] = ()
    if spec.servers is not None:
        nodes, links, servers, rails = expand_servers(spec, ctx)
    elif spec.clos is not None:
        nodes, links = _expand_clos(spec.clos, compute, ctx)
    else:
        nodes = [DraftNode(n.name, n.role, f"nodes[{i}]") for i, n in enumerate(spec.nodes or [])]
        links = [DraftLink(l.a, l.b, rate_bps(l.rate_gbps), delay_ns(l.delay_us), f"links[{i}]")
                 for i, l in enumerate(spec.links or [])]
    fabric = _validate_and_build(spec.name, ctx, nodes, links, prefixes, servers, rails,
                                 spec.link_layer, _management(spec))
    _check_pipeline_limits(fabric, ctx, {n.name: n.where for n in nodes})
    _check_management(fabric, ctx, {n.name: n.where for n in nodes})
    return fabric


def _management(spec: FabricSpec) -> tuple[ManagementNet, ...]:
    if spec.management is None:
        return ()
    return tuple(ManagementNet(kind, str(net.network()), rate_bps(net.rate_gbps))
                 for kind, net in spec.management.networks().items())


def _check_management(fabric: Fabric, ctx: BuildContext, where: dict[str, str]) -> None:
    """Every member has an address in its subnet; no fabric node or server is
    named as a management namespace is (they would be one Mininet node)."""
    if not fabric.management:
        return
    taken = {n.name for n in fabric.nodes} | {s.name for s in fabric.servers()}
    reserved = {MGMT_HOST: "the management host"}
    for m in fabric.management:
        reserved[MGMT_BRIDGE[m.kind]] = f"the {m.kind} management bridge"
        if m.kind == "out_of_band":
            reserved.update({switch_mgmt_netns(sw.name): f"{sw.name}'s management namespace"
                             for sw in fabric.switches()})
        subnet = ipaddress.IPv4Network(m.subnet)
        members = 1 + (len(fabric.switches()) if m.kind == "out_of_band" else len(fabric.servers()))
        if members > subnet.num_addresses - 2:
            what = "switches" if m.kind == "out_of_band" else "servers"
            raise ctx.err(f"management.{m.kind}.subnet",
                          f"{subnet} holds {subnet.num_addresses - 2} addresses; the network has "
                          f"{members} members (the management host and {members - 1} {what})")
    for name in sorted(taken & set(reserved)):
        raise ctx.err(where.get(name, "servers"), f"node name {name!r} is taken by {reserved[name]} "
                                                  "(management:): rename the node")


def leaf_capacity(prefix: ipaddress.IPv4Network) -> int:
    """How many leaf /24s fit in a host prefix (offset 0 is left unused)."""
    return 2 ** (24 - prefix.prefixlen) - 1


def _expand_clos(c: ClosSpec, prefix: ipaddress.IPv4Network, ctx: BuildContext):
    # Limits first, so errors name the clos field rather than a generated node.
    if c.hosts_per_leaf > MAX_HOSTS_PER_LEAF:
        raise ctx.err("clos.hosts_per_leaf",
                      f"{c.hosts_per_leaf} hosts do not fit a leaf's /24 "
                      f"(at most {MAX_HOSTS_PER_LEAF}: .1-.253, .254 is the gateway)")
    check_clos_limits(c, c.hosts_per_leaf, "hosts_per_leaf", ctx)
    n_leaves = c.pods * c.leaves
    cap = leaf_capacity(prefix)
    if n_leaves > cap:
        raise ctx.err("addressing.host_prefix",
                      f"{prefix} holds {cap} leaf /24 subnets; the fabric has {n_leaves} leaves")
    nodes, uplinks = clos_switches(c.pods, c.leaves, c.spines, c.super_spines,
                                   c.fabric_link, c.super_link)
    nodes += [DraftNode(f"h{h}", "host", "clos.hosts_per_leaf")
              for h in range(1, n_leaves * c.hosts_per_leaf + 1)]
    hr, hd = c.host_link.rate_bps, c.host_link.delay_ns
    links = [DraftLink(f"h{(k - 1) * c.hosts_per_leaf + j}", f"leaf{k}", hr, hd, "clos")
             for k in range(1, n_leaves + 1) for j in range(1, c.hosts_per_leaf + 1)]
    return nodes, links + uplinks


def check_clos_limits(c: ClosSpec, down_ports: int, down_field: str, ctx: BuildContext) -> None:
    """A CLOS's switches fit the pipeline: ECMP group sizes and port counts
    (``down_ports``: what a leaf has below it, named by ``clos.<down_field>``)."""
    per_plane = (c.super_spines or 0) // c.spines
    if c.spines > MAX_ECMP_GROUP_SIZE:
        raise ctx.err("clos.spines",
                      f"{c.spines} spines need {c.spines}-way ECMP; the P4 pipeline's "
                      f"max_group_size is {MAX_ECMP_GROUP_SIZE}")
    if per_plane > MAX_ECMP_GROUP_SIZE:
        raise ctx.err("clos.super_spines",
                      f"{per_plane} super spines per plane need {per_plane}-way ECMP on a spine; "
                      f"the P4 pipeline's max_group_size is {MAX_ECMP_GROUP_SIZE}")
    for what, fld, ports in (
            (f"{down_ports} {down_field.replace('_per_leaf', '')} + {c.spines} spine ports",
             down_field, down_ports + c.spines),
            (f"{c.leaves} leaf + {per_plane} super spine ports", "leaves", c.leaves + per_plane),
            (f"{c.pods} pod ports", "pods", c.pods if per_plane else 0)):
        if ports > MAX_SWITCH_PORTS:
            who = {"leaves": "spine", "pods": "super spine"}.get(fld, "leaf")
            raise ctx.err(f"clos.{fld}",
                          f"a {who} would need {what} = {ports}; a switch has at most "
                          f"{MAX_SWITCH_PORTS} ports (port {CPU_PORT} is the CPU port)")


def _validate_and_build(name: str, ctx: BuildContext, nodes: list[DraftNode], links: list[DraftLink],
                        prefixes: dict[str, ipaddress.IPv4Network],
                        servers: tuple[Server, ...] = (), rails: tuple[str, ...] = (),
                        link_layer: str = "roce",
                        management: tuple[ManagementNet, ...] = ()) -> Fabric:
    """Check the drafted graph (in this order: names, links, degrees, capacity,
    reachability) and build the ``Fabric``: the first problem raises."""
    by_name = _check_names(ctx, nodes)
    _check_links(ctx, links, by_name)
    attached = _check_degrees(ctx, nodes, links, by_name)
    # A host is on its leaf's plane.
    for n in nodes:
        if n.role == "host":
            n.plane = by_name[_other(attached[n.name][0], n.name)].plane
    _check_capacity(ctx, nodes, attached, by_name, prefixes)
    # Every host reaches every host: leaves with hosts share one switch component.
    _check_reachability(ctx, nodes, links, by_name)
    out_nodes, out_links = _number(nodes, links, by_name)
    planes = tuple(Plane(p, str(net)) for p, net in prefixes.items()) if len(prefixes) > 1 else ()
    return Fabric(name, ctx.source, tuple(out_nodes), tuple(out_links),
                  str(prefixes[COMPUTE_PLANE]), planes, servers, rails, link_layer,
                  management, address_plan=AddressPlan)


def _check_names(ctx: BuildContext, nodes: list[DraftNode]) -> dict[str, DraftNode]:
    """Node names valid and unique, every role present; returns the nodes by name."""
    by_name: dict[str, DraftNode] = {}
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
            raise ctx.err("nodes", f"no node has role {role}; a CLOS needs at least one")
    return by_name


def _check_links(ctx: BuildContext, links: list[DraftLink], by_name: dict[str, DraftNode]) -> None:
    """Links: known endpoints, roles a CLOS allows, one plane, parallel only between switches."""
    pair_first: dict[frozenset, DraftLink] = {}
    for l in links:
        for end in ("a", "b"):
            peer = getattr(l, end)
            if peer not in by_name:
                raise ctx.err(f"{l.where}.{end}", f"unknown node {peer!r}")
        if l.a == l.b:
            raise ctx.err(f"{l.where}.b", f"self-link: {l.a} to itself")
        ra, rb = by_name[l.a].role, by_name[l.b].role
        roles = {ra, rb}
        if roles not in _LINK_ROLES:
            raise ctx.err(l.where,
                          f"{ra}-{rb} link {l.a}-{l.b} is not valid in a CLOS "
                          f"(hosts connect to leaves, leaves to spines, spines to super spines)")
        pa, pb = by_name[l.a].plane, by_name[l.b].plane
        if "host" not in roles and pa != pb:
            raise ctx.err(l.where, f"link {l.a}-{l.b} joins the {pa} plane to the {pb} plane; "
                                   f"planes are separate networks")
        key = frozenset((l.a, l.b))
        if key in pair_first and "host" in roles:
            raise ctx.err(l.where, f"parallel link {l.a}-{l.b} (first at "
                                   f"{ctx.path(pair_first[key].where)}); only links between "
                                   f"switches may be parallel")
        pair_first.setdefault(key, l)


def _check_degrees(ctx: BuildContext, nodes: list[DraftNode], links: list[DraftLink],
                   by_name: dict[str, DraftNode]) -> dict[str, list[DraftLink]]:
    """Per-node degree rules; returns each node's links."""
    attached: dict[str, list[DraftLink]] = {n.name: [] for n in nodes}
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
        elif n.role == "superspine":
            if not mine:
                raise ctx.err(n.where, f"super spine {n.name} has no link to a spine")
        elif not mine:
            raise ctx.err(n.where, f"spine {n.name} has no link")
    return attached


def _check_capacity(ctx: BuildContext, nodes: list[DraftNode],
                    attached: dict[str, list[DraftLink]], by_name: dict[str, DraftNode],
                    prefixes: dict[str, ipaddress.IPv4Network]) -> None:
    """Capacity: hosts per leaf, leaves in the prefix, ports per switch."""
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


def _number(nodes: list[DraftNode], links: list[DraftLink],
            by_name: dict[str, DraftNode]) -> tuple[list[Node], list[Link]]:
    """Role indexes, port numbers, links oriented from the lower tier."""
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
    return out_nodes, out_links


def _other(l: DraftLink, name: str) -> str:
    return l.b if l.a == name else l.a


def _check_reachability(ctx: BuildContext, nodes, links, by_name) -> None:
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
                                       f"(on {host_leaf[h]}): no path between the leaves through the switches")


def _check_pipeline_limits(fabric: Fabric, ctx: BuildContext, where: dict[str, str]) -> None:
    for sw, routes in compute_routes(fabric).items():
        if len(routes) > MAX_IPV4_ROUTES:
            raise ctx.err(where[sw], f"{sw} needs {len(routes)} IPv4 routes; the P4 pipeline's "
                                     f"ipv4_lpm holds {MAX_IPV4_ROUTES}")
        for r in routes:
            if len(r.next_hops) > MAX_ECMP_GROUP_SIZE:
                raise ctx.err(where[sw], f"{sw} needs a {len(r.next_hops)}-way ECMP group toward "
                                         f"{r.prefix}; the P4 pipeline's max_group_size is "
                                         f"{MAX_ECMP_GROUP_SIZE}")
