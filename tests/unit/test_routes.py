"""Routes: every host reaches every host over every ECMP choice, loop-free."""
from __future__ import annotations

from pathlib import Path

import pytest

from emulator.topo import (
    NextHop,
    compute_routes,
    ecmp_groups,
    fabric_from_dict,
    load_fabric,
    longest_prefix_match,
    nexthop_members,
)

TOPOS = Path(__file__).resolve().parents[2] / "topologies"
ALL_FILES = sorted(TOPOS.glob("*.yaml"))
LINK = {"rate_gbps": 100, "delay_us": 1}


def explicit(nodes, links):
    return fabric_from_dict({
        "name": "t",
        "nodes": [{"name": n, "role": r} for n, r in nodes],
        "links": [{"a": a, "b": b, **LINK} for a, b in links],
    })


def chain_fabric():
    """leaf1-spine1-leaf2-spine2-leaf3: leaf1 reaches leaf3 only through leaf2."""
    return explicit(
        [("spine1", "spine"), ("spine2", "spine"), ("leaf1", "leaf"), ("leaf2", "leaf"),
         ("leaf3", "leaf"), ("h1", "host"), ("h2", "host"), ("h3", "host")],
        [("h1", "leaf1"), ("h2", "leaf2"), ("h3", "leaf3"),
         ("leaf1", "spine1"), ("leaf2", "spine1"), ("leaf2", "spine2"), ("leaf3", "spine2")])


FABRICS = [(p.name, lambda p=p: load_fabric(p)) for p in ALL_FILES] + [("chain", chain_fabric)]


def all_walks(fabric, routes, src, dst, max_hops):
    """Forward a packet src -> dst by LPM, branching on every ECMP choice.

    Checks on every hop what the data plane would: the frame is addressed to
    the switch's router MAC (my_station), the next hop's smac is the switch's
    router MAC and the port really leads to the named peer. Returns the
    number of complete paths and the longest (in switch hops).
    """
    plan = fabric.addresses
    dst_ip = plan.host_ip(dst)
    first = fabric.host_leaf(src).name
    paths, longest = 0, 0
    stack = [(first, plan.gateway_mac(src), 1)]
    while stack:
        sw, dmac, hops = stack.pop()
        assert hops <= max_hops, f"{src}->{dst}: more than {max_hops} hops (loop?)"
        assert dmac == plan.router_mac(sw), f"{sw} would not admit the frame"
        route = longest_prefix_match(routes[sw], dst_ip)
        assert route is not None, f"{sw} has no route to {dst_ip}"
        assert route.next_hops
        for hop in route.next_hops:
            port = fabric.port(sw, hop.port_no)
            assert port.peer == hop.peer
            assert hop.smac == plan.router_mac(sw)
            if fabric.node(hop.peer).role == "host":
                assert hop.peer == dst, f"{src}->{dst} delivered to {hop.peer}"
                assert hop.dmac == plan.host_mac(dst)
                paths += 1
                longest = max(longest, hops)
            else:
                stack.append((hop.peer, hop.dmac, hops + 1))
    return paths, longest


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: p.name)
def test_every_host_reaches_every_host_within_its_tiers(path):
    f = load_fabric(path)
    routes = compute_routes(f)
    # two tiers: leaf-spine-leaf (a partial explicit fabric: one more); three: up to a super spine
    max_hops = 5 if f.superspines() else 4
    for src in f.hosts():
        for dst in f.hosts():
            if src != dst and src.plane == dst.plane:    # planes never reach each other
                paths, longest = all_walks(f, routes, src.name, dst.name, max_hops=max_hops)
                assert paths >= 1 and longest <= max_hops


def test_chain_fabric_transits_a_leaf():
    f = chain_fabric()
    routes = compute_routes(f)
    for src in f.hosts():
        for dst in f.hosts():
            if src != dst:
                assert all_walks(f, routes, src.name, dst.name, max_hops=len(f.switches()))[0]
    assert all_walks(f, routes, "h1", "h3", max_hops=5) == (1, 5)
    # spine1 reaches leaf3's subnet through leaf2, not back through leaf1.
    (r,) = [r for r in routes["spine1"] if r.prefix == f.addresses.leaf_subnet("leaf3")]
    assert [h.peer for h in r.next_hops] == ["leaf2"]


@pytest.mark.parametrize("name,make", FABRICS, ids=[n for n, _ in FABRICS])
def test_host_routes_on_leaves_only(name, make):
    f = make()
    routes = compute_routes(f)
    plan = f.addresses
    assert list(routes) == [s.name for s in f.switches()]
    for h in f.hosts():
        leaf = f.host_leaf(h).name
        prefix = f"{plan.host_ip(h)}/32"
        holders = [sw for sw, rs in routes.items() if any(r.prefix == prefix for r in rs)]
        assert holders == [leaf]
        (r,) = [r for r in routes[leaf] if r.prefix == prefix]
        assert r.next_hops == (NextHop(f.ports(h)[0].peer_port_no, plan.router_mac(leaf),
                                       plan.host_mac(h), h.name),)
    for sw, rs in routes.items():
        subnets = [r.prefix for r in rs if r.prefix_len == 24]
        expected = [plan.leaf_subnet(l) for l in f.leaves()
                    if l.name != sw and l.plane == f.node(sw).plane]
        assert sorted(subnets) == sorted(expected)          # one /24 per other leaf of its plane
        assert len({r.prefix for r in rs}) == len(rs)        # no duplicate prefixes


@pytest.mark.parametrize("name,make", FABRICS, ids=[n for n, _ in FABRICS])
def test_routes_are_deterministic_and_sorted(name, make):
    a, b = compute_routes(make()), compute_routes(make())
    assert a == b
    for rs in a.values():
        keys = [(int(r.network.network_address), r.prefix_len) for r in rs]
        assert keys == sorted(keys)
        for r in rs:
            assert list(r.next_hops) == sorted(r.next_hops)
            assert len(set(r.next_hops)) == len(r.next_hops)


def test_clos_2x2_leaves_have_2way_ecmp():
    f = load_fabric(TOPOS / "clos-2x2.yaml")
    routes = compute_routes(f)
    groups = ecmp_groups(routes)
    for leaf in f.leaves():
        (group,) = groups[leaf.name]
        assert [(h.port_no, h.peer) for h in group] == [(3, "spine1"), (4, "spine2")]
        assert all(h.dmac == f.addresses.router_mac(h.peer) for h in group)
        (other,) = [r for r in routes[leaf.name] if r.prefix_len == 24]
        assert other.next_hops == group and other.is_ecmp
    for spine in f.spines():
        assert groups[spine.name] == []
        assert all(len(r.next_hops) == 1 for r in routes[spine.name])
        for r in routes[spine.name]:
            (hop,) = r.next_hops
            assert f.addresses.leaf_subnet(hop.peer) == r.prefix


def test_clos_4x4_ecmp_is_4way_one_group_per_leaf():
    f = load_fabric(TOPOS / "clos-4x4.yaml")
    groups = ecmp_groups(compute_routes(f))
    for leaf in f.leaves():
        (group,) = groups[leaf.name]
        assert [h.peer for h in group] == ["spine1", "spine2", "spine3", "spine4"]


def test_explicit_3leaf_routes():
    f = load_fabric(TOPOS / "explicit-3leaf.yaml")
    routes = compute_routes(f)
    plan = f.addresses

    def hops(sw, leaf):
        (r,) = [r for r in routes[sw] if r.prefix == plan.leaf_subnet(leaf)]
        return [(h.port_no, h.peer) for h in r.next_hops]

    # leaf3 (only on spine1): everyone reaches it through spine1 only.
    assert hops("leaf1", "leaf3") == [(3, "spine1")]
    assert hops("leaf2", "leaf3") == [(2, "spine1")]
    assert hops("spine1", "leaf3") == [(3, "leaf3")]
    # leaf3 itself has a single uplink for everything.
    assert hops("leaf3", "leaf1") == hops("leaf3", "leaf2") == [(3, "spine1")]
    # leaf1 -> leaf2 spreads over spine1 and both parallel links to spine2.
    assert hops("leaf1", "leaf2") == [(3, "spine1"), (4, "spine2"), (5, "spine2")]
    # spine2 -> leaf1 spreads over the parallel pair.
    assert hops("spine2", "leaf1") == [(1, "leaf1"), (2, "leaf1")]
    # h4 (on leaf3) -> h1 takes exactly leaf3, spine1, leaf1.
    assert all_walks(f, routes, "h4", "h1", max_hops=4) == (1, 3)
    # h1 -> h3 has 3 equal-cost paths (one per uplink of leaf1).
    assert all_walks(f, routes, "h1", "h3", max_hops=4) == (3, 3)


def test_ecmp_groups_and_members_helpers():
    f = load_fabric(TOPOS / "explicit-3leaf.yaml")
    routes = compute_routes(f)
    groups = ecmp_groups(routes)
    members = nexthop_members(routes)
    for sw, rs in routes.items():
        distinct = {r.next_hops for r in rs if len(r.next_hops) > 1}
        assert set(groups[sw]) == distinct and len(groups[sw]) == len(distinct)
        assert set(members[sw]) == {h for r in rs for h in r.next_hops}
        assert members[sw] == sorted(members[sw])
        for g in groups[sw]:
            assert set(g) <= set(members[sw])
    assert len(groups["spine2"]) == 2
    all_sets = ecmp_groups(routes, min_size=1)
    assert all(len(all_sets[sw]) == len({r.next_hops for r in rs}) for sw, rs in routes.items())


def test_longest_prefix_match_prefers_host_route():
    f = load_fabric(TOPOS / "clos-2x2.yaml")
    routes = compute_routes(f)
    assert longest_prefix_match(routes["leaf1"], "10.0.1.2").prefix == "10.0.1.2/32"
    assert longest_prefix_match(routes["leaf1"], "10.0.2.77").prefix == "10.0.2.0/24"
    assert longest_prefix_match(routes["leaf1"], "10.0.1.99") is None   # no such host
    assert longest_prefix_match(routes["spine1"], "192.168.0.1") is None
