"""IPv4 routes of every switch: what the controller writes into ipv4_lpm.

* A leaf has a /32 per attached host (one next hop: the host's port,
  smac = the leaf's router MAC, dmac = the host's MAC).
* Every switch has a /24 per leaf subnet other than its own (a leaf's own
  subnet is covered by its /32s), with ECMP over every port -- parallel
  links included -- whose peer switch is one hop closer to that leaf
  (shortest paths by hop count, BFS over the switch graph; hosts never
  transit). In a full CLOS a leaf spreads over all its uplinks and a spine
  uses its link(s) to the leaf; in a partially connected explicit fabric the
  same rule follows e.g. spine -> leaf -> spine -> leaf when that is the
  shortest way. Next hops toward a switch carry smac = own router MAC,
  dmac = the peer's router MAC.

Planes (a compute fabric and a separate storage network) are disconnected
switch graphs, so the same rule gives a switch routes to the leaves of its
own plane only: a NIC has no route to another plane's NICs.

Next hops strictly decrease the distance, so forwarding is loop-free.
Everything is ordered deterministically: switches in ``fabric.switches()``
order, routes by (network address, prefix length), next hops by port.
"""
from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from emulator.topo.graph import Fabric


@dataclass(frozen=True, order=True)
class NextHop:
    port_no: int   # egress P4 port
    smac: str      # rewritten Ethernet source: the switch's router MAC
    dmac: str      # rewritten Ethernet destination: peer router MAC or host MAC
    peer: str      # node name at the other end of the port


@dataclass(frozen=True)
class Route:
    prefix: str                       # "10.0.2.0/24" or "10.0.1.1/32"
    next_hops: tuple[NextHop, ...]    # sorted by port; > 1 means ECMP

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.prefix)

    @property
    def prefix_len(self) -> int:
        return self.network.prefixlen

    @property
    def is_ecmp(self) -> bool:
        return len(self.next_hops) > 1

    def covers(self, ip: str) -> bool:
        return ipaddress.IPv4Address(ip) in self.network


def switch_distances(fabric: Fabric, target: str) -> dict[str, int]:
    """Hop count from every switch that can reach switch ``target``."""
    dist = {target: 0}
    todo = deque([target])
    while todo:
        cur = todo.popleft()
        for p in fabric.ports(cur):
            if fabric.node(p.peer).is_switch and p.peer not in dist:
                dist[p.peer] = dist[cur] + 1
                todo.append(p.peer)
    return dist


def compute_routes(fabric: Fabric) -> dict[str, list[Route]]:
    """switch name -> its routes (see the module docstring)."""
    plan = fabric.addresses
    rmac = {sw.name: plan.router_mac(sw) for sw in fabric.switches()}
    table: dict[str, list[Route]] = {sw.name: [] for sw in fabric.switches()}

    for leaf in fabric.leaves():
        # Host routes on the leaf itself.
        for p in fabric.ports(leaf):
            if not fabric.node(p.peer).is_switch:
                hop = NextHop(p.port_no, rmac[leaf.name], plan.host_mac(p.peer), p.peer)
                table[leaf.name].append(Route(f"{plan.host_ip(p.peer)}/32", (hop,)))
        # The leaf's subnet on every other switch, over shortest paths.
        subnet = plan.leaf_subnet(leaf)
        dist = switch_distances(fabric, leaf.name)
        for sw in fabric.switches():
            if sw.name == leaf.name or sw.name not in dist:
                continue
            hops = tuple(sorted(
                NextHop(p.port_no, rmac[sw.name], rmac[p.peer], p.peer)
                for p in fabric.ports(sw)
                if p.peer in dist and dist[p.peer] == dist[sw.name] - 1
            ))
            table[sw.name].append(Route(subnet, hops))

    for routes in table.values():
        routes.sort(key=lambda r: (int(r.network.network_address), r.prefix_len))
    return table


def longest_prefix_match(routes: Iterable[Route], ip: str) -> Route | None:
    """The route an LPM table would pick for ip, or None."""
    addr = ipaddress.IPv4Address(ip)
    best: Route | None = None
    for r in routes:
        if addr in r.network and (best is None or r.prefix_len > best.prefix_len):
            best = r
    return best


def ecmp_groups(routes: Mapping[str, Sequence[Route]], min_size: int = 2
                ) -> dict[str, list[tuple[NextHop, ...]]]:
    """switch -> its distinct next-hop sets of at least min_size next hops.

    With the default, these are the action-profile groups the controller
    installs (one per distinct ECMP set), in first-use order over the routes.
    """
    out: dict[str, list[tuple[NextHop, ...]]] = {}
    for sw, rs in routes.items():
        seen: dict[tuple[NextHop, ...], None] = {}
        for r in rs:
            if len(r.next_hops) >= min_size:
                seen.setdefault(r.next_hops, None)
        out[sw] = list(seen)
    return out


def nexthop_members(routes: Mapping[str, Sequence[Route]]) -> dict[str, list[NextHop]]:
    """switch -> its distinct next hops (one action-profile member each), sorted."""
    return {sw: sorted({h for r in rs for h in r.next_hops}) for sw, rs in routes.items()}


__all__ = ["NextHop", "Route", "compute_routes", "ecmp_groups", "nexthop_members",
           "longest_prefix_match", "switch_distances"]
