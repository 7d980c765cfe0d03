"""Human-readable summary of a fabric (``fabric-emu topo show FILE``)."""
from __future__ import annotations

import io
from collections import Counter
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table

from emulator.topo.routes import compute_routes, ecmp_groups

if TYPE_CHECKING:  # pragma: no cover
    from emulator.topo.graph import Fabric


def _num(x: float) -> str:
    return f"{x:g}"


def _count(n: int, one: str, many: str = "") -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def render_fabric(fabric: "Fabric", *, width: int = 120, color: bool = False) -> str:
    """The fabric as text: nodes with addresses, links with ports, routes.

    Plain text unless ``color`` (then ANSI styles, for a terminal).
    """
    routes = compute_routes(fabric)
    groups = ecmp_groups(routes)

    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color,
                      color_system="standard" if color else None,
                      highlight=False, emoji=False, soft_wrap=False)

    planes = fabric.planes()
    multi_plane = len(planes) > 1
    supers = fabric.superspines()
    tiers = (f"{len(fabric.pods)} pods, {_count(len(supers), 'super spine')}, " if supers else "")
    console.print(
        f"[bold]Fabric {fabric.name}[/bold]  ({fabric.source})\n{tiers}"
        f"{len(fabric.spines())} spines, {len(fabric.leaves())} leaves, "
        f"{len(fabric.hosts())} hosts, {len(fabric.links)} links; "
        f"host prefix {fabric.host_prefix}"
        + "".join(f", {p.name} prefix {p.host_prefix}" for p in planes[1:])
    )
    if fabric.server_table:
        console.print(_servers_line(fabric))
        _print_servers(console, fabric)
    if fabric.is_rail_optimized():
        _print_rails(console, fabric)
    if multi_plane:
        _print_planes(console, fabric)
    if supers:
        _print_tiers(console, fabric)
    console.print(_nodes_table(fabric, multi_plane))
    console.print(_links_table(fabric))
    console.print(_routes_table(fabric, routes, groups))
    if fabric.management:
        _print_management(console, fabric)
    text = buf.getvalue()
    if not color:  # rich pads every line to the table width
        text = "\n".join(line.rstrip() for line in text.splitlines()) + "\n"
    return text


def _nodes_table(fabric: "Fabric", multi_plane: bool) -> Table:
    """Every switch and host: index, device id, addresses, ports, what it is attached to."""
    plan = fabric.addresses
    nodes = Table(title="Nodes", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("Node", "Role", "#", "Device", "IP / subnet", "Gateway",
                "MAC / router MAC", "Ports", "Attached to") + (("Plane",) if multi_plane else ()):
        nodes.add_column(col, no_wrap=True)
    plane_col = (lambda n: (n.plane,)) if multi_plane else (lambda n: ())
    for sw in fabric.switches():
        is_leaf = sw.role == "leaf"
        ports = fabric.ports(sw)
        attached = _attached(fabric, sw)
        nodes.add_row(sw.name, sw.role, str(sw.index), str(fabric.device_id(sw)),
                      plan.leaf_subnet(sw) if is_leaf else "-",
                      plan.leaf_gateway(sw) if is_leaf else "-",
                      plan.router_mac(sw), str(len(ports)), attached, *plane_col(sw))
    for h in fabric.hosts():
        leaf = fabric.host_leaf(h)
        nodes.add_row(h.name, "host", str(h.index), "-", plan.host_ip(h),
                      plan.host_gateway(h), plan.host_mac(h), plan.host_ifname(h),
                      f"{leaf.name} port {fabric.ports(h)[0].peer_port_no}", *plane_col(h))
    return nodes


def _links_table(fabric: "Fabric") -> Table:
    """Every link: its ends' ports and interfaces, rate and delay."""
    links = Table(title="Links", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("#", "A", "Port", "Interface", "B", "Port", "Interface"):
        links.add_column(col, no_wrap=True)
    links.add_column("Gbps", justify="right", no_wrap=True)
    links.add_column("Delay µs", justify="right", no_wrap=True)
    for i, l in enumerate(fabric.links):
        a_if = fabric.port(l.a, l.a_port).ifname
        b_if = fabric.port(l.b, l.b_port).ifname
        links.add_row(str(i), l.a, str(l.a_port), a_if, l.b, str(l.b_port), b_if,
                      _num(l.rate_gbps), _num(l.delay_us))
    return links


def _routes_table(fabric: "Fabric", routes: dict, groups: dict) -> Table:
    """Per switch: its routes by prefix length, ECMP routes, groups and their widths."""
    rt = Table(title="Routes", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("Switch", "Device", "Routes", "/32", "/24", "ECMP routes",
                "ECMP groups", "Widths"):
        rt.add_column(col, no_wrap=True)
    for sw in fabric.switches():
        rs = routes[sw.name]
        host_routes = sum(1 for r in rs if r.prefix_len == 32)
        ecmp = [r for r in rs if r.is_ecmp]
        widths = Counter(len(r.next_hops) for r in ecmp)
        width_text = ", ".join(f"{w}-way x{n}" for w, n in sorted(widths.items())) or "-"
        rt.add_row(sw.name, str(fabric.device_id(sw)), str(len(rs)), str(host_routes),
                   str(len(rs) - host_routes), str(len(ecmp)), str(len(groups[sw.name])),
                   width_text)
    return rt


_ROLE_NAMES = {"host": ("host", "hosts"), "leaf": ("leaf", "leaves"),
               "spine": ("spine", "spines"), "superspine": ("super spine", "super spines")}


def _attached(fabric: "Fabric", sw) -> str:
    """What a switch's ports face, tier below first: a leaf's hosts, a
    spine's leaves (and super spines), a super spine's spines."""
    peers = Counter(fabric.node(p).role for p in {p.peer for p in fabric.ports(sw)})
    shown = {"leaf": ("host",), "spine": ("leaf", "superspine"), "superspine": ("spine",)}[sw.role]
    return ", ".join(_count(peers[r], *_ROLE_NAMES[r]) for r in shown if peers[r])


def _print_tiers(console: Console, fabric: "Fabric") -> None:
    """Three tiers: each pod's leaves, spines and hosts, and the super spines
    its spines reach; then each super spine's plane (the spine of each pod it joins)."""
    t = Table(title="Tiers: pods (leaves + spines) joined by super spines", box=box.SIMPLE_HEAD,
              title_justify="left")
    for col in ("Pod", "Leaves", "Spines", "Hosts", "Super spines reached"):
        t.add_column(col, no_wrap=True)
    for i, pod in enumerate(fabric.pods, start=1):
        leaves = [n for n in pod if n.role == "leaf"]
        spines = [n for n in pod if n.role == "spine"]
        reached = dict.fromkeys(p.peer for sp in spines for p in fabric.ports(sp)
                                if fabric.node(p.peer).role == "superspine")
        t.add_row(str(i), " ".join(n.name for n in leaves), " ".join(n.name for n in spines),
                  str(sum(len(fabric.leaf_hosts(n)) for n in leaves)), " ".join(reached) or "-")
    console.print(t)
    t = Table(title="Super spines", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("Super spine", "Spines (pod)"):
        t.add_column(col, no_wrap=True)
    for sup in fabric.superspines():
        t.add_row(sup.name, " ".join(f"{p.peer} ({fabric.pod_of(p.peer)})" for p in fabric.ports(sup)))
    console.print(t)


def _servers_line(fabric: "Fabric") -> str:
    compute, storage = fabric.servers("compute"), fabric.servers("storage")
    gpus = sorted({s.gpus for s in compute})
    text = (f"{_count(len(compute), 'compute server')} x "
            f"{'/'.join(map(str, gpus))} GPU{'s' if gpus != [1] else ''} = "
            f"{_count(sum(s.gpus for s in compute), 'GPU')}")
    if storage:
        text += f", {_count(len(storage), 'storage server')}"
    tenants = list(dict.fromkeys(s.tenant for s in compute if s.tenant))
    if tenants:
        text += f"; tenants {', '.join(tenants)}"
    if fabric.is_rail_optimized():
        g, units = _rails_per_unit(fabric)
        text += f"; {_count(g, 'rail')}" + (f" x {units} scalable units" if units > 1 else "")
    if storage:
        separate = len(fabric.planes()) > 1
        text += "; storage plane separate" if separate else "; storage plane shared"
    return text


def _print_servers(console: Console, fabric: "Fabric") -> None:
    t = Table(title="Servers", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("Server", "Role", "Tenant", "GPUs", "NVLink Gbps", "NVLink µs", "DPU"):
        t.add_column(col, no_wrap=True)
    t.add_column("NICs (rank order) -> leaf")
    t.add_column("Storage NIC", no_wrap=True)
    for s in fabric.servers():
        nvlink = s.nvlink_rate_bps > 0
        nics = " ".join(f"{n}>{fabric.host_leaf(n).name}" for n in s.nics)
        storage = (f"{s.storage_nic}>{fabric.host_leaf(s.storage_nic).name}"
                   + (" (DPU)" if s.dpu else "")) if s.storage_nic else "-"
        t.add_row(s.name, s.role, s.tenant or "-", str(s.gpus),
                  _num(s.nvlink_rate_bps / 1e9) if nvlink else "-",
                  _num(s.nvlink_delay_ns / 1e3) if nvlink else "-",
                  "yes" if s.dpu else "no", nics, storage)
    console.print(t)


def _print_rails(console: Console, fabric: "Fabric") -> None:
    plan = fabric.addresses
    t = Table(title="Rails (rail i = NIC i of every server)", box=box.SIMPLE_HEAD,
              title_justify="left")
    g, units = _rails_per_unit(fabric)
    for col in ("Unit", "Rail", "Leaf", "Subnet")[units == 1:]:
        t.add_column(col, no_wrap=True)
    t.add_column("NICs")
    for i, leaf in enumerate(fabric.rails):
        unit = (str(i // g + 1),) if units > 1 else ()
        t.add_row(*unit, str(i % g), leaf, plan.leaf_subnet(leaf),
                  " ".join(h.name for h in fabric.leaf_hosts(leaf)))
    console.print(t)


def _rails_per_unit(fabric: "Fabric") -> tuple[int, int]:
    """(rails G = a server's GPUs, scalable units): unit u has rail leaves (u-1)G+1..uG."""
    g = fabric.servers("compute")[0].gpus
    return g, len(fabric.rails) // g


def _print_planes(console: Console, fabric: "Fabric") -> None:
    t = Table(title="Planes (routed separately: no route between them)", box=box.SIMPLE_HEAD,
              title_justify="left")
    for col in ("Plane", "Prefix", "Leaves", "Spines", "NICs"):
        t.add_column(col, no_wrap=True)
    for p in fabric.planes():
        t.add_row(p.name, p.host_prefix,
                  " ".join(n.name for n in fabric.plane_nodes(p.name, "leaf")),
                  " ".join(n.name for n in fabric.plane_nodes(p.name, "spine")),
                  str(len(fabric.plane_nodes(p.name, "host"))))
    console.print(t)


def _print_management(console: Console, fabric: "Fabric") -> None:
    """Each management network: its subnet and rate, then every member's address."""
    plan = fabric.addresses
    for net in fabric.management:
        kind = net.kind.replace("_", "-")
        t = Table(title=f"Management network {kind}: {net.subnet}, {_num(net.rate_bps / 1e9)} Gbps "
                        "(a bridge: no PFC)",
                  box=box.SIMPLE_HEAD, title_justify="left")
        for col in ("Member", "Namespace", "Interface", "IP", "MAC", "Bridge port"):
            t.add_column(col, no_wrap=True)
        for m in plan.management_members(net.kind):
            t.add_row(m.node, m.netns, m.ifname, m.cidr, m.mac, m.bridge_ifname)
        console.print(t)


__all__ = ["render_fabric"]
