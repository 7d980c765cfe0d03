"""The subnet manager's sweep (``emulator/ib/sm.py``) on the shipped
topologies: LIDs in discovery order, and LFTs whose every CA-to-CA path
arrives, is as short as the fabric allows, climbs and then only descends
(up*/down*: no credit loop), and spreads destinations evenly over a leaf's
uplinks."""
from __future__ import annotations

from collections import Counter, deque
from pathlib import Path

import pytest

from emulator.ib.sm import TIER, sweep
from emulator.topo import load_fabric

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
SHAPES = ["clos-2x2", "clos-4x4", "explicit-3leaf", "pods-2x2x2", "rail-2x4", "rail-8x8-2su"]


def fewest_hops(fabric, src: str, dst: str) -> int:
    """Shortest path over the links, CAs never transit (no up/down rule)."""
    dist, todo = {src: 0}, deque([src])
    while todo:
        n = todo.popleft()
        if n == dst:
            return dist[n]
        if n != src and not fabric.node(n).is_switch:
            continue
        for p in fabric.ports(n):
            if p.peer not in dist:
                dist[p.peer] = dist[n] + 1
                todo.append(p.peer)
    raise AssertionError(f"{dst} unreachable from {src}")


@pytest.fixture(params=SHAPES)
def fabric(request):
    return load_fabric(TOPOLOGIES / f"{request.param}.yaml")


def test_lids_are_handed_out_from_the_sm_in_discovery_order(fabric):
    subnet = sweep(fabric)
    sm = fabric.hosts()[0].name
    assert subnet.sm_node == sm and subnet.lid[sm] == 1
    assert sorted(subnet.lid.values()) == list(range(1, len(subnet.lid) + 1))
    # breadth first: the SM's leaf next, then nodes one hop further, ...
    assert subnet.lid[fabric.host_leaf(sm).name] == 2
    depth = {n: fewest_hops(fabric, sm, n) if n != sm else 0 for n in subnet.lid}
    by_lid = sorted(subnet.lid, key=subnet.lid.get)
    assert [depth[n] for n in by_lid] == sorted(depth[n] for n in by_lid)


def test_every_ca_reaches_every_ca_on_a_shortest_up_down_path(fabric):
    subnet = sweep(fabric)
    cas = [h.name for h in fabric.hosts() if h.name in subnet.lid]
    for src in cas:
        for dst in cas:
            if src == dst:
                continue
            path = subnet.path(src, dst)
            assert path[0] == src and path[-1] == dst
            assert len(path) - 1 == fewest_hops(fabric, src, dst), path
            tiers = [TIER[fabric.node(n).role] for n in path]
            top = tiers.index(max(tiers))
            assert tiers[:top + 1] == sorted(tiers[:top + 1]), f"climbs after a descent: {path}"
            assert tiers[top:] == sorted(tiers[top:], reverse=True), f"climbs after a descent: {path}"


def test_a_switch_sends_its_own_lid_to_its_management_port(fabric):
    subnet = sweep(fabric)
    for sw, lft in subnet.lft.items():
        assert lft[subnet.lid[sw]] == 0


@pytest.mark.parametrize("shape", [s for s in SHAPES if s != "explicit-3leaf"])
def test_a_leaf_spreads_the_cas_it_reaches_upward_evenly_over_its_uplinks(shape):
    # a regular fabric: every uplink leads to every remote CA (explicit-3leaf's
    # leaf3 hangs off spine1 alone: its CAs have one way in)
    fabric = load_fabric(TOPOLOGIES / f"{shape}.yaml")
    subnet = sweep(fabric)
    hosts = {h.name for h in fabric.hosts()}
    for leaf in fabric.leaves():
        if leaf.name not in subnet.lft:
            continue                    # another plane: another subnet
        uplinks = {p.port_no for p in fabric.ports(leaf) if fabric.node(p.peer).is_switch}
        per_port = Counter(port for lid, port in subnet.lft[leaf.name].items()
                           if port in uplinks and
                           next(n for n, l in subnet.lid.items() if l == lid) in hosts)
        counts = [per_port.get(p, 0) for p in uplinks]
        assert max(counts) - min(counts) <= 1, (leaf.name, per_port)


def test_a_separate_plane_is_another_subnet():
    fabric = load_fabric(TOPOLOGIES / "rail-2x4-storage-separate.yaml")
    subnet = sweep(fabric)
    storage = [n.name for n in fabric.plane_nodes("storage")]
    assert storage and not set(storage) & set(subnet.lid)
    other = sweep(fabric, storage[0] if not fabric.node(storage[0]).is_switch
                  else next(n for n in storage if not fabric.node(n).is_switch))
    assert set(other.lid) == set(storage)


def test_no_route_descends_and_climbs_again():
    # spine1 -> leaf -> spine2 is the shortest way between the spines, and a
    # descent followed by a climb: up*/down* routes none (min-hop alone would)
    fabric = load_fabric(TOPOLOGIES / "clos-2x2.yaml")
    subnet = sweep(fabric)
    assert subnet.lid["spine2"] not in subnet.lft["spine1"]
    assert subnet.lid["spine1"] not in subnet.lft["spine2"]
    assert subnet.lid["spine2"] in subnet.lft["leaf1"]          # from below: a climb


def test_the_lfts_are_entries_of_ib_p4s_contract():
    from emulator.ib.sm import lft_entries
    from emulator.p4.p4info import IB_P4INFO, P4Info
    fabric = load_fabric(TOPOLOGIES / "pods-2x2x2.yaml")
    subnet = sweep(fabric)
    info = P4Info.load(IB_P4INFO)
    lft = info.table("lft")
    for sw in subnet.lft:
        entries = lft_entries(subnet, sw, info)
        assert len(entries) == len(subnet.lft[sw]) - 1            # not its own LID
        for e in entries:
            assert e.table_id == lft.preamble.id == 0x02000101    # pinned in p4src/ib.p4
            dlid = int.from_bytes(e.match[0].exact.value, "big")
            port = int.from_bytes(e.action.action.params[0].value, "big")
            assert subnet.lft[sw][dlid] == port and port != 0
