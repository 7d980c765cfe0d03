"""The server form of a topology file: GPU servers, rails, a storage plane.

A server is one machine (one Mininet host, one network namespace) holding
several NICs; each NIC is a ``host`` node of the fabric as in the plain
forms (one port to its leaf, its own IP, MAC, gateway). This module expands
the server form into those nodes and links plus the ``Server`` records.

The fields, the compute fabric (rail-optimized or CLOS), the storage servers (on the
compute fabric or a plane of their own) and node names: ``docs/design-notes.md``,
"The server form of a topology file".
"""
from __future__ import annotations

import math
import re
from typing import Optional

from emulator.schema.topology import FabricSpec
from emulator.topo.draft import BuildContext, DraftLink, DraftNode, clos_switches
from emulator.topo.graph import (
    MAX_ECMP_GROUP_SIZE,
    MAX_NODE_NAME,
    MAX_SWITCH_PORTS,
    STORAGE_PLANE,
    Server,
)

TENANT_NAME_RE = re.compile(r"[a-z][a-z0-9-]*")
MAX_TENANT_NAME = 32


def nic_name(server: int, nic: int) -> str:
    return f"s{server}n{nic}"


def storage_nic_name(server: int, dpu: bool) -> str:
    return f"s{server}dpu" if dpu else f"s{server}st"


def storage_server_nic_name(server: int, nic: int) -> str:
    return f"st{server}n{nic}"


def expand_servers(spec: FabricSpec, ctx: BuildContext):
    """-> (nodes, links, servers, rails) of a server-form topology."""
    s = spec.servers
    assert s is not None
    tenants = _tenants(spec, ctx)
    if s.gpus_per_server > 1 and s.nvlink is None:
        raise ctx.err("servers.nvlink", "required with gpus_per_server > 1 (the NVLink/NVSwitch "
                                        "domain joining a server's GPUs)")
    nv_rate = s.nvlink.rate_bps if s.nvlink else 0
    nv_delay = s.nvlink.delay_ns if s.nvlink else 0
    nodes, uplinks, n_leaves, leaf_of = _compute_switches(spec, ctx)
    host_links: list[tuple[int, DraftLink]] = []     # (leaf number, link)
    for k in range(1, s.count + 1):
        for i in range(s.gpus_per_server):
            nodes.append(DraftNode(nic_name(k, i), "host", "servers.count"))
            host_links.append((leaf_of(k, i), DraftLink.of(nic_name(k, i), f"leaf{leaf_of(k, i)}",
                                                    s.nic_link, "servers.nic_link")))
    # Leaf by leaf (stable: server by server, NIC by NIC), then the uplinks.
    links = [l for _, l in sorted(host_links, key=lambda t: t[0])] + uplinks

    separate = spec.storage_plane is not None
    servers = [Server(f"server{k}", "compute", s.gpus_per_server,
                      tuple(nic_name(k, i) for i in range(s.gpus_per_server)),
                      nv_rate, nv_delay, dpu=tenants[k - 1][1], tenant=tenants[k - 1][0],
                      storage_nic=storage_nic_name(k, tenants[k - 1][1]) if separate else None)
               for k in range(1, s.count + 1)]
    _add_storage(spec, ctx, nodes, links, servers, n_leaves)
    for n in nodes:
        if len(n.name) > MAX_NODE_NAME:
            raise ctx.err(n.where, f"too large: it would name a node {n.name!r}, longer than "
                                   f"{MAX_NODE_NAME} characters (interface names <node>-ethN "
                                   f"must fit 15)")
    rails = tuple(f"leaf{j}" for j in range(1, n_leaves + 1)) if spec.rail_optimized else ()
    return nodes, links, tuple(servers), rails


def _compute_switches(spec: FabricSpec, ctx: BuildContext):
    """-> (switch nodes, their links, number of leaves, leaf_of(server k, NIC i)):
    the compute plane's switches and the leaf number of each server's NIC i."""
    s = spec.servers
    assert s is not None
    if spec.rail_optimized is not None:
        ro = spec.rail_optimized
        if s.count % ro.units:
            raise ctx.err("rail_optimized.units", f"{s.count} servers do not split into {ro.units} "
                                                  f"scalable units of equal size")
        per_unit = s.count // ro.units
        n_leaves = s.gpus_per_server * ro.units
        _check_spines(ctx, "rail_optimized.spines", ro.spines)
        if n_leaves > MAX_SWITCH_PORTS:
            raise ctx.err("servers.gpus_per_server",
                          f"{ro.units} units x {s.gpus_per_server} rails need {n_leaves} leaves; "
                          f"a spine has at most {MAX_SWITCH_PORTS} ports")
        nodes, uplinks = clos_switches(1, n_leaves, ro.spines, None, ro.fabric_link, None,
                                       "rail_optimized")
        for n in nodes:
            if n.role == "leaf":                  # rails come from the servers' GPUs
                n.where = "servers.count"

        def leaf_of(k: int, i: int) -> int:      # rail i of server k's unit
            return (k - 1) // per_unit * s.gpus_per_server + i + 1
    else:
        c = spec.clos
        assert c is not None
        _check_spines(ctx, "clos.spines", c.spines)
        n_leaves = c.pods * c.leaves
        per_leaf = c.servers_per_leaf or math.ceil(s.count / n_leaves)
        if s.count > per_leaf * n_leaves:
            raise ctx.err("clos.servers_per_leaf",
                          f"{n_leaves} leaves x {per_leaf} servers hold {per_leaf * n_leaves} "
                          f"servers; servers.count is {s.count}")
        nodes, uplinks = clos_switches(c.pods, c.leaves, c.spines, c.super_spines,
                                       c.fabric_link, c.super_link)

        def leaf_of(k: int, i: int) -> int:
            return (k - 1) // per_leaf + 1
    return nodes, uplinks, n_leaves, leaf_of


def _add_storage(spec: FabricSpec, ctx: BuildContext, nodes: list[DraftNode],
                 links: list[DraftLink], servers: list[Server], n_leaves: int) -> None:
    """The storage servers, into ``servers``; their NICs and links into ``nodes`` and
    ``links``: on the compute leaves (shared plane) or on a storage plane of their own."""
    separate = spec.storage_plane is not None
    st = spec.storage_servers
    storage_nics: list[str] = []     # storage servers' NICs, server by server
    if st is not None:
        for k in range(1, st.count + 1):
            nics = tuple(storage_server_nic_name(k, j) for j in range(st.nics_per_server))
            servers.append(Server(f"storage{k}", "storage", 0, nics, 0, 0, dpu=st.dpu))
            storage_nics += nics
    if st is not None and not separate:
        # Shared plane: storage NICs round-robin over the compute leaves.
        for m, nic in enumerate(storage_nics):
            nodes.append(DraftNode(nic, "host", "storage_servers.count"))
            links.append(DraftLink.of(nic, f"leaf{m % n_leaves + 1}", st.nic_link, "storage_servers.nic_link"))
    elif st is not None:
        nodes_s, links_s = _storage_plane(spec, ctx, [srv.storage_nic for srv in servers
                                                      if srv.storage_nic], storage_nics)
        # Storage switches after the compute ones, hosts after the compute NICs.
        first_host = next(i for i, n in enumerate(nodes) if n.role == "host")
        nodes[first_host:first_host] = [n for n in nodes_s if n.role != "host"]
        nodes += [n for n in nodes_s if n.role == "host"]
        links += links_s


def _storage_plane(spec: FabricSpec, ctx: BuildContext, access_nics: list[str],
                   storage_nics: list[str]) -> tuple[list[DraftNode], list[DraftLink]]:
    sp, st = spec.storage_plane, spec.storage_servers
    assert sp is not None and st is not None
    _check_spines(ctx, "storage_plane.spines", sp.spines)
    nodes = [DraftNode(f"sspine{j}", "spine", "storage_plane.spines", STORAGE_PLANE)
             for j in range(1, sp.spines + 1)]
    nodes += [DraftNode(f"sleaf{j}", "leaf", "storage_plane.leaves", STORAGE_PLANE)
              for j in range(1, sp.leaves + 1)]
    ends = [(nic, sp.access_link, "storage_plane.access_link") for nic in access_nics]
    ends += [(nic, st.nic_link, "storage_servers.nic_link") for nic in storage_nics]
    per_leaf = math.ceil(len(ends) / sp.leaves)
    links = []
    for e, (nic, params, where) in enumerate(ends):
        nodes.append(DraftNode(nic, "host", where.rsplit(".", 1)[0]))
        links.append(DraftLink.of(nic, f"sleaf{e // per_leaf + 1}", params, where))
    links += [DraftLink.of(f"sleaf{j}", f"sspine{m}", sp.fabric_link, "storage_plane")
              for j in range(1, sp.leaves + 1) for m in range(1, sp.spines + 1)]
    return nodes, links


def _check_spines(ctx: BuildContext, fld: str, spines: int) -> None:
    # Named here, so the error points at the count rather than a generated leaf.
    if spines > MAX_ECMP_GROUP_SIZE:
        raise ctx.err(fld, f"{spines} spines need {spines}-way ECMP; the P4 pipeline's "
                           f"max_group_size is {MAX_ECMP_GROUP_SIZE}")


def _tenants(spec: FabricSpec, ctx: BuildContext) -> list[tuple[Optional[str], bool]]:
    """(tenant, dpu) of compute server 1..count."""
    s = spec.servers
    assert s is not None
    if s.tenants is None:
        return [(None, s.dpu)] * s.count
    out: list[tuple[Optional[str], bool]] = []
    seen: dict[str, int] = {}
    for i, t in enumerate(s.tenants):
        fld = f"servers.tenants[{i}].name"
        if not TENANT_NAME_RE.fullmatch(t.name) or len(t.name) > MAX_TENANT_NAME:
            raise ctx.err(fld, f"{t.name!r} is not a valid tenant name: use [a-z][a-z0-9-]*, "
                               f"at most {MAX_TENANT_NAME} characters")
        if t.name in seen:
            raise ctx.err(fld, f"duplicate tenant {t.name!r} (first at servers.tenants[{seen[t.name]}])")
        seen[t.name] = i
        out += [(t.name, s.dpu if t.dpu is None else t.dpu)] * t.count
    if len(out) != s.count:
        raise ctx.err("servers.tenants", f"the tenants' counts add up to {len(out)} "
                                         f"server{'s' if len(out) != 1 else ''}; "
                                         f"servers.count is {s.count}")
    return out


__all__ = ["expand_servers", "nic_name", "storage_nic_name", "storage_server_nic_name"]
