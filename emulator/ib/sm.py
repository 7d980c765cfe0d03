"""The subnet manager's sweep, on the topology file: LIDs and linear
forwarding tables for an InfiniBand fabric (IBA Vol. 1, chapter 14; OpenSM's
routing engines). The controller installs what this computes, as it
installs ``emulator.topo.routes`` on a RoCE fabric.

* Discovery: a breadth-first sweep from the SM's port (the first host of
  the file, where OpenSM would run on a CA), neighbours in port order, as
  OpenSM's sweep walks the subnet; nodes that are not connected to it are
  not part of its subnet (a storage plane runs its own SM).
* LIDs: 1, 2, ... in discovery order (LMC 0: one LID per CA port and per
  switch, its port 0), as OpenSM hands them out on a fresh subnet.
* Routes: up*/down* (OpenSM's ``updn`` engine; ``ftree`` on a fat tree
  finds the same set of paths): a path may climb the tiers (leaf, spine,
  super spine) and then only descend, which keeps credit loops -- and so
  deadlocks -- out of a lossless fabric; among such paths only the fewest
  hops count (min-hop). Per switch and destination LID, an LFT holds one
  port: where several ports are on shortest up/down paths, the one that
  carries the fewest CA destinations so far is taken (ties: the lowest
  port), CAs in LID order, then the switches' LIDs (which do not count:
  data goes to CAs), as OpenSM's min-hop balancing does. So a leaf spreads
  the CAs it reaches upward evenly over its uplinks -- IB's load spreading
  is per destination, not per flow as RoCE's ECMP hash. A switch's LID is
  reached from below it: a spine has no up/down path to another spine.
"""
from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field

from emulator.topo.graph import Fabric
from emulator.p4.p4info import IB_P4INFO, P4Info

TIER = {"host": 0, "leaf": 1, "spine": 2, "superspine": 3}
MAX_UNICAST_LID = 0xBFFF          # 0x0001-0xBFFF unicast; 0xC000- multicast; 0xFFFF permissive


@dataclass(frozen=True)
class Subnet:
    """What a sweep found: ``lid`` of every node reached, every switch's
    linear forwarding table {DLID: egress port}, and the links it walked
    (``ports``: node -> [(port, peer)])."""
    sm_node: str
    lid: dict[str, int]
    lft: dict[str, dict[int, int]]
    ports: dict[str, list[tuple[int, str]]] = field(repr=False)

    def path(self, src: str, dst: str) -> list[str]:
        """The nodes a packet from CA ``src`` to ``dst`` visits, following the LFTs."""
        dlid = self.lid[dst]
        hops = [src, self.ports[src][0][1]]           # a CA's one link
        while hops[-1] != dst:
            if len(hops) > len(self.lid):
                raise RuntimeError(f"no path from {src} to {dst}: a loop through {hops[-4:]}")
            node = hops[-1]
            hops.append(dict(self.ports[node])[self.lft[node][dlid]])
        return hops


def sweep(fabric: Fabric, sm_node: str | None = None) -> Subnet:
    """LIDs and LFTs of the subnet the SM on ``sm_node`` (default: the
    fabric's first host) manages."""
    hosts = fabric.hosts()
    if not hosts:
        raise ValueError(f"fabric {fabric.name} has no host for the subnet manager to run on")
    sm_node = sm_node or hosts[0].name
    order = _discover(fabric, sm_node)
    if len(order) > MAX_UNICAST_LID:
        raise ValueError(f"{len(order)} nodes: more than the {MAX_UNICAST_LID} unicast LIDs")
    lid = {name: i for i, name in enumerate(order, start=1)}
    ports = {n: [(p.port_no, p.peer) for p in fabric.ports(n)] for n in order}
    switches = [n for n in order if fabric.node(n).is_switch]
    tier = {n: TIER[fabric.node(n).role] for n in order}
    lft: dict[str, dict[int, int]] = {s: {} for s in switches}
    load: dict[str, dict[int, int]] = {s: {} for s in switches}   # port -> destinations routed
    # CAs first, in LID order, and only they count toward a port's load: the
    # data goes to CAs (a switch's LID gets management packets), as
    # OpenSM's ftree routes CA LIDs before switch LIDs.
    cas = [n for n in order if tier[n] == 0]
    for dst in cas + switches:
        dlid = lid[dst]
        dist = _updown_distances(dst, ports, tier)
        for s in switches:
            if s == dst:
                lft[s][dlid] = 0          # its own LID: port 0, the switch's management port
                continue
            here = dist.get((s, True))
            if here is None:
                continue                  # unreachable on up/down paths (a broken fabric)
            cands = [port for port, peer in ports[s] if _next_ok(s, peer, tier, dist, here)]
            port = min(cands, key=lambda p: (load[s].get(p, 0), p))
            if tier[dst] == 0:
                load[s][port] = load[s].get(port, 0) + 1
            lft[s][dlid] = port
    return Subnet(sm_node, lid, lft, ports)


def _discover(fabric: Fabric, start: str) -> list[str]:
    seen, order, todo = {start}, [start], deque([start])
    while todo:
        for p in fabric.ports(todo.popleft()):
            if p.peer not in seen:
                seen.add(p.peer)
                order.append(p.peer)
                todo.append(p.peer)
    return order


def _updown_distances(dst: str, ports: dict, tier: dict) -> dict[tuple[str, bool], int]:
    """Fewest hops from each (node, may still climb) to ``dst`` on paths that
    climb, then only descend. Computed backwards from ``dst``: arriving
    at ``dst`` the path is descending (or empty)."""
    dist = {(dst, False): 0, (dst, True): 0}
    todo = deque([(dst, False), (dst, True)])
    while todo:
        node, climbing = todo.popleft()
        d = dist[(node, climbing)]
        for _, prev in ports[node]:
            if tier[prev] == 0 and prev != dst:
                continue                  # CAs do not forward
            if tier[prev] > tier[node]:
                # prev -> node descends: then node may only descend (a climb
                # after a descent is not up/down); prev may be in either phase
                states = [] if climbing else [(prev, False), (prev, True)]
            else:
                # prev -> node climbs (a level link counts as a climb): prev is climbing
                states = [(prev, True)]
            for st in states:
                if st not in dist:
                    dist[st] = d + 1
                    todo.append(st)
    return dist


def _next_ok(s: str, peer: str, tier: dict, dist: dict, here: int) -> bool:
    """Is ``s -> peer`` the first hop of a shortest up/down path from ``s``
    (which may still climb)?"""
    if tier[s] < tier[peer]:              # climbing: peer may still climb
        return dist.get((peer, True)) == here - 1
    return dist.get((peer, False)) == here - 1


@functools.lru_cache(maxsize=4)
def path_records(fabric: Fabric) -> dict[str, int]:
    """IP -> LID of every CA the sweep reaches: what the SA's path records
    tell a NIC about its peers (one sweep per fabric, cached)."""
    subnet = sweep(fabric)
    plan = fabric.addresses
    return {plan.host_ip(h.name): subnet.lid[h.name] for h in fabric.hosts()
            if h.name in subnet.lid}


def lft_entries(subnet: Subnet, switch: str, p4info=None) -> list:
    """``switch``'s LFT as P4Runtime table entries of ``IbIngress.lft``
    (``p4src/ib.p4``): DLID -> forward(port), its own LID excepted (port 0
    is the switch's management port, not a P4 port: the controller, not the
    pipeline, answers what is sent to it)."""
    info = P4Info.coerce(p4info if p4info is not None else IB_P4INFO)
    own = subnet.lid[switch]
    return [info.table_entry("lft", {"dlid": dlid}, ("forward", {"port": port}))
            for dlid, port in sorted(subnet.lft[switch].items()) if dlid != own]
