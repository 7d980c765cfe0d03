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
    from emulator.topo.model import Fabric


def _num(x: float) -> str:
    return f"{x:g}"


def _count(n: int, one: str, many: str = "") -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def render_fabric(fabric: "Fabric", *, width: int = 120, color: bool = False) -> str:
    """The fabric as text: nodes with addresses, links with ports, routes.

    Plain text unless ``color`` (then ANSI styles, for a terminal).
    """
    plan = fabric.addresses
    routes = compute_routes(fabric)
    groups = ecmp_groups(routes)

    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color,
                      color_system="standard" if color else None,
                      highlight=False, emoji=False, soft_wrap=False)

    console.print(
        f"[bold]Fabric {fabric.name}[/bold]  ({fabric.source})\n"
        f"{len(fabric.spines())} spines, {len(fabric.leaves())} leaves, "
        f"{len(fabric.hosts())} hosts, {len(fabric.links)} links; "
        f"host prefix {fabric.host_prefix}"
    )

    nodes = Table(title="Nodes", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("Node", "Role", "#", "Device", "IP / subnet", "Gateway",
                "MAC / router MAC", "Ports", "Attached to"):
        nodes.add_column(col, no_wrap=True)
    for sw in fabric.switches():
        is_leaf = sw.role == "leaf"
        ports = fabric.ports(sw)
        attached = (_count(len(fabric.leaf_hosts(sw)), "host") if is_leaf
                    else _count(len({p.peer for p in ports}), "leaf", "leaves"))
        nodes.add_row(sw.name, sw.role, str(sw.index), str(fabric.device_id(sw)),
                      plan.leaf_subnet(sw) if is_leaf else "-",
                      plan.leaf_gateway(sw) if is_leaf else "-",
                      plan.router_mac(sw), str(len(ports)), attached)
    for h in fabric.hosts():
        leaf = fabric.host_leaf(h)
        nodes.add_row(h.name, "host", str(h.index), "-", plan.host_ip(h),
                      plan.host_gateway(h), plan.host_mac(h), plan.host_ifname(h),
                      f"{leaf.name} port {fabric.ports(h)[0].peer_port_no}")
    console.print(nodes)

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
    console.print(links)

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
    console.print(rt)
    text = buf.getvalue()
    if not color:  # rich pads every line to the table width
        text = "\n".join(line.rstrip() for line in text.splitlines()) + "\n"
    return text


__all__ = ["render_fabric"]
