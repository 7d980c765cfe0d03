"""Three tiers: pods joined by super spines (parametric and explicit), and
rail-optimized scalable units -- their wiring, routes, paths and rejections."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from emulator.experiment.ideal_fct import FabricPaths
from emulator.topo import compute_routes, fabric_from_dict, load_fabric
from emulator.topo.show import render_fabric
from tests.unit.test_routes import all_walks
from tests.unit.test_topo import BASE_LINKS, BASE_NODES, assert_error, explicit
from tests.unit.test_topo_servers import rail

TOPOS = Path(__file__).resolve().parents[2] / "topologies"
LINK = {"rate_gbps": 100, "delay_us": 1}


def pods(**clos):
    c = {"pods": 2, "spines": 2, "leaves": 2, "hosts_per_leaf": 2, "super_spines": 2,
         "host_link": dict(LINK), "fabric_link": dict(LINK)}
    c.update(clos)
    return {"name": "t", "clos": c}


def test_pods_2x2x2_wiring_ports_and_device_ids():
    f = load_fabric(TOPOS / "pods-2x2x2.yaml")
    assert [n.name for n in f.switches()] == ["leaf1", "leaf2", "leaf3", "leaf4", "spine1", "spine2",
                                              "spine3", "spine4", "super1", "super2"]
    assert [f.device_id(n) for n in f.superspines()] == [9, 10]
    assert [[n.name for n in pod] for pod in f.pods] == [
        ["leaf1", "leaf2", "spine1", "spine2"], ["leaf3", "leaf4", "spine3", "spine4"]]
    assert f.pod_of("spine3") == 2 and f.pod_of("super1") is None
    # a spine: its pod's leaves, then its plane's super spine; a super spine: port p = pod p
    assert [p.peer for p in f.ports("spine3")] == ["leaf3", "leaf4", "super1"]
    assert [(p.port_no, p.peer) for p in f.ports("super2")] == [(1, "spine2"), (2, "spine4")]
    assert [p.peer for p in f.ports("leaf3")] == ["h5", "h6", "spine3", "spine4"]
    assert [f.host_leaf(h).name for h in ("h4", "h5")] == ["leaf2", "leaf3"]
    assert f.addresses.host_ip("h5") == "10.0.3.1"


def test_paths_turn_at_the_lowest_common_tier():
    f = load_fabric(TOPOS / "pods-2x2x2.yaml")
    routes = compute_routes(f)
    # between pods: 2 paths (one per plane), 5 switches; inside a pod: 2 paths, 3 switches
    assert all_walks(f, routes, "h5", "h1", max_hops=5) == (2, 5)
    assert all_walks(f, routes, "h3", "h2", max_hops=3) == (2, 3)
    paths = FabricPaths(f)
    for sport in range(49152, 49152 + 16):
        cross = [h.node for h in paths.path("h5", "h1", sport)]
        assert cross[:2] == ["h5", "leaf3"] and cross[3] in ("super1", "super2") and cross[-1] == "leaf1"
        assert not any(n.startswith("super") for n in (h.node for h in paths.path("h3", "h2", sport)))
    # a spine reaches another pod through its own plane's super spine only
    (to_leaf3,) = [r for r in routes["spine1"] if r.prefix == "10.0.3.0/24"]
    assert [h.peer for h in to_leaf3.next_hops] == ["super1"]


def test_super_spine_planes_with_several_per_plane():
    f = fabric_from_dict(pods(super_spines=4))
    assert [p.peer for p in f.ports("spine1")] == ["leaf1", "leaf2", "super1", "super2"]
    assert [p.peer for p in f.ports("spine4")] == ["leaf3", "leaf4", "super3", "super4"]
    assert [p.peer for p in f.ports("super3")] == ["spine2", "spine4"]
    (to_leaf3,) = [r for r in compute_routes(f)["spine1"] if r.prefix == "10.0.3.0/24"]
    assert [h.peer for h in to_leaf3.next_hops] == ["super1", "super2"]      # 2-way ECMP up
    assert all_walks(f, compute_routes(f), "h1", "h8", max_hops=5) == (4, 5)


def test_an_explicit_three_tier_fabric():
    nodes = BASE_NODES + [("spine3", "spine"), ("leaf3", "leaf"), ("h4", "host"), ("top", "superspine")]
    links = BASE_LINKS + [("h4", "leaf3"), ("leaf3", "spine3"), ("spine1", "top"),
                          ("spine3", "top"), ("spine3", "top")]          # parallel: allowed
    f = fabric_from_dict(explicit(nodes, links))
    assert len(f.pods) == 2 and f.pod_of("spine3") == 2
    assert all_walks(f, compute_routes(f), "h4", "h1", max_hops=5) == (2, 5)   # 2 parallel links
    assert [l.b for l in f.links if l.a == "spine3"] == ["top", "top"]      # oriented upwards


def test_topo_show_draws_the_tiers():
    text = render_fabric(load_fabric(TOPOS / "pods-2x2x2.yaml"))
    assert "2 pods, 2 super spines, 4 spines, 4 leaves, 8 hosts" in text
    assert "Tiers: pods (leaves + spines) joined by super spines" in text
    assert "super1        spine1 (1) spine3 (2)" in text
    assert "2 leaves, 1 super spine" in text and "2 hosts, 2 spines" not in text


@pytest.mark.parametrize("data, field, words", [
    (pods(super_spines=None), "clos.super_spines", ["required with 2 pods"]),
    (pods(super_spines=3), "clos.super_spines", ["multiple of clos.spines"]),
    (pods(pods=1), "clos.super_spines", ["only with pods > 1"]),
    (pods(pods=1, super_spines=None, super_link=dict(LINK)), "clos.super_link", ["only with pods > 1"]),
    (pods(spines=2, super_spines=130), "clos.super_spines", ["65 super spines per plane", "ECMP"]),
    (pods(leaves=250, super_spines=20), "clos.leaves", ["a spine would need 250 leaf + 10 super spine"]),
    (explicit(BASE_NODES + [("top", "superspine")], BASE_LINKS + [("leaf1", "top")]),
     "links[7]", ["leaf-superspine", "spines to super spines"]),
    (explicit(BASE_NODES + [("top", "superspine")], BASE_LINKS),
     "nodes[7]", ["super spine top has no link to a spine"]),
])
def test_bad_three_tier(tmp_path, data, field, words):
    assert_error(tmp_path, data, field, *words)


def test_rail_units_each_have_their_own_rail_leaves():
    f = fabric_from_dict(rail(servers={**rail()["servers"], "count": 4},
                              rail_optimized={"spines": 2, "units": 2, "fabric_link": dict(LINK)}))
    assert [n.name for n in f.leaves()] == [f"leaf{k}" for k in range(1, 9)]
    assert [f.host_leaf(n).name for n in f.server("server2").nics] == ["leaf1", "leaf2", "leaf3", "leaf4"]
    assert [f.host_leaf(n).name for n in f.server("server3").nics] == ["leaf5", "leaf6", "leaf7", "leaf8"]
    routes = compute_routes(f)
    assert all_walks(f, routes, "s1n0", "s2n0", max_hops=1) == (1, 1)     # same unit, same rail
    assert all_walks(f, routes, "s1n0", "s3n0", max_hops=3) == (2, 3)     # across units: spines


def test_bad_rail_units(tmp_path):
    data = rail(servers={**rail()["servers"], "count": 3},
                rail_optimized={"spines": 2, "units": 2, "fabric_link": dict(LINK)})
    assert_error(tmp_path, data, "rail_optimized.units", "3 servers do not split into 2")


def test_servers_on_pods():
    data = copy.deepcopy(pods())
    c = data["clos"]
    del c["hosts_per_leaf"], c["host_link"]
    data.update(servers={"count": 4, "gpus_per_server": 1, "nic_link": dict(LINK)})
    f = fabric_from_dict(data)
    assert [f.host_leaf(s.nics[0]).name for s in f.servers()] == ["leaf1", "leaf2", "leaf3", "leaf4"]
    assert all_walks(f, compute_routes(f), "s1n0", "s4n0", max_hops=5) == (2, 5)


def test_topo_show_numbers_rails_within_their_unit():
    f = load_fabric(TOPOS / "rail-8x8-2su.yaml")
    text = render_fabric(f)
    assert "8 rails x 2 scalable units" in text
    rows = [line.split() for line in text.splitlines() if " leaf" in line and "10.0." in line]
    assert rows[0][:3] == ["1", "0", "leaf1"] and rows[8][:3] == ["2", "0", "leaf9"]
    assert rows[15][:3] == ["2", "7", "leaf16"] and "s8n7" in rows[15]
    one_unit = render_fabric(fabric_from_dict(rail()))
    assert "scalable units" not in one_unit and "Unit" not in one_unit
