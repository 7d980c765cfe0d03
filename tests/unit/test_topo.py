"""Topology files -> Fabric: shape of the resolved model and every rejection."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from emulator.errors import ConfigError
from emulator.topo import Fabric, Link, Node, fabric_from_dict, load_fabric

ROOT = Path(__file__).resolve().parents[2]
TOPOS = ROOT / "topologies"
ALL_FILES = sorted(TOPOS.glob("*.yaml"))

LINK = {"rate_gbps": 100, "delay_us": 1}

CLOS_2X2 = {
    "name": "t",
    "clos": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2,
             "host_link": dict(LINK), "fabric_link": dict(LINK)},
}


def explicit(nodes, links, **extra):
    """A small explicit fabric: nodes as (name, role), links as (a, b)."""
    return {
        "name": "t",
        "nodes": [{"name": n, "role": r} for n, r in nodes],
        "links": [{"a": a, "b": b, **LINK} for a, b in links],
        **extra,
    }


# spine1, spine2; leaf1 (h1, h2), leaf2 (h3): the base the bad cases edit.
BASE_NODES = [("spine1", "spine"), ("spine2", "spine"), ("leaf1", "leaf"), ("leaf2", "leaf"),
              ("h1", "host"), ("h2", "host"), ("h3", "host")]
BASE_LINKS = [("h1", "leaf1"), ("h2", "leaf1"), ("h3", "leaf2"),
              ("leaf1", "spine1"), ("leaf1", "spine2"), ("leaf2", "spine1"), ("leaf2", "spine2")]


def write(tmp_path: Path, data, name="topo.yaml") -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return p


def load_error(tmp_path: Path, data) -> tuple[Path, ConfigError]:
    p = write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_fabric(p)
    return p, info.value


def assert_error(tmp_path, data, field, *words):
    p, err = load_error(tmp_path, data)
    assert err.file == str(p)
    assert err.field == field, str(err)
    assert str(err).startswith(f"{p}: {field}: " if field else f"{p}: "), str(err)
    assert "\n" not in str(err)
    for w in words:
        assert w in err.reason, str(err)
    return err


# ------------------------------------------------------------ good files

@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: p.name)
def test_shipped_files_load(path):
    fabric = load_fabric(path)
    assert fabric.source == str(path)
    assert fabric.name == path.stem
    assert fabric.hosts() and fabric.leaves() and fabric.spines()


def test_shipped_files_present():
    names = {p.name for p in ALL_FILES}
    assert {"clos-2x2.yaml", "clos-4x4.yaml", "explicit-3leaf.yaml"} <= names


def test_clos_2x2_shape():
    f = load_fabric(TOPOS / "clos-2x2.yaml")
    assert [n.name for n in f.spines()] == ["spine1", "spine2"]
    assert [n.name for n in f.leaves()] == ["leaf1", "leaf2"]
    assert [n.name for n in f.hosts()] == ["h1", "h2", "h3", "h4"]
    assert [n.name for n in f.switches()] == ["leaf1", "leaf2", "spine1", "spine2"]
    assert [f.device_id(s) for s in f.switches()] == [1, 2, 3, 4]
    assert f.node("spine2") == Node("spine2", "spine", 2)
    assert [f.host_leaf(h).name for h in ("h1", "h2", "h3", "h4")] == ["leaf1", "leaf1", "leaf2", "leaf2"]
    assert all(l.rate_bps == 100_000_000_000 and l.delay_ns == 1000 for l in f.links)
    assert len(f.links) == 4 + 4
    # Leaf ports: hosts first, then one uplink per spine, in spine order.
    assert [(p.port_no, p.peer, p.ifname) for p in f.ports("leaf1")] == [
        (1, "h1", "leaf1-eth1"), (2, "h2", "leaf1-eth2"),
        (3, "spine1", "leaf1-eth3"), (4, "spine2", "leaf1-eth4")]
    # Spine port k faces leaf k.
    assert [(p.port_no, p.peer) for p in f.ports("spine2")] == [(1, "leaf1"), (2, "leaf2")]
    # Hosts: one port, number 0, <host>-eth0, as Mininet numbers it.
    (hp,) = f.ports("h3")
    assert (hp.port_no, hp.ifname, hp.peer, hp.peer_port_no) == (0, "h3-eth0", "leaf2", 1)
    # Port and link views agree.
    for n in f.nodes:
        for p in f.ports(n):
            link = f.links[p.link_index]
            assert link.port_of(p.node) == p.port_no
            assert link.peer_of(p.node) == p.peer
            assert f.port(p.peer, p.peer_port_no).peer == n.name
    assert f.link_between("leaf2", "spine1") == Link("leaf2", 3, "spine1", 2, 10**11, 1000)
    assert f.link_between("h1", "spine1") is None
    assert f.port_towards("leaf2", "spine1") == f.port("leaf2", 3)
    assert f.port_towards("spine1", "leaf2") == f.port("spine1", 2)
    with pytest.raises(KeyError, match="h1 has no port towards spine1"):
        f.port_towards("h1", "spine1")


def test_clos_4x4_numbers_hosts_leaf_by_leaf():
    f = load_fabric(TOPOS / "clos-4x4.yaml")
    assert len(f.spines()) == len(f.leaves()) == 4 and len(f.hosts()) == 16
    assert [h.name for h in f.leaf_hosts("leaf3")] == ["h9", "h10", "h11", "h12"]
    assert [p.peer for p in f.ports("leaf3")][4:] == ["spine1", "spine2", "spine3", "spine4"]


def test_parametric_and_explicit_forms_resolve_identically(tmp_path):
    """clos-2x2 written out by hand (spine-first link ends) is the same fabric."""
    nodes = [("spine1", "spine"), ("spine2", "spine"), ("leaf1", "leaf"), ("leaf2", "leaf"),
             ("h1", "host"), ("h2", "host"), ("h3", "host"), ("h4", "host")]
    links = [("h1", "leaf1"), ("leaf1", "h2"), ("h3", "leaf2"), ("h4", "leaf2"),
             ("spine1", "leaf1"), ("leaf1", "spine2"), ("leaf2", "spine1"), ("spine2", "leaf2")]
    data = explicit(nodes, links, addressing={"host_prefix": "10.0.0.0/16"})
    data["name"] = "clos-2x2"
    hand = load_fabric(write(tmp_path, data))
    para = load_fabric(TOPOS / "clos-2x2.yaml")
    assert hand.nodes == para.nodes
    assert hand.links == para.links
    assert hand.host_prefix == para.host_prefix
    for n in para.nodes:
        assert hand.ports(n) == para.ports(n)
    assert hand.source != para.source and hand != para   # source differs, shape does not


def test_explicit_3leaf_shape():
    f = load_fabric(TOPOS / "explicit-3leaf.yaml")
    assert len(f.spines()) == 2 and len(f.leaves()) == 3
    per_leaf = [len(f.leaf_hosts(l)) for l in f.leaves()]
    assert all(1 <= n <= 2 for n in per_leaf)
    # a parallel leaf-spine link
    assert any(len(f.links_between(l, s)) > 1 for l in f.leaves() for s in f.spines())
    for l in f.leaves():
        for s in f.spines():
            towards = f.ports_towards(l, s)
            assert [f.links[p.link_index] for p in towards] == list(f.links_between(l, s))
            assert towards == tuple(sorted(towards, key=lambda p: p.port_no))
            if towards:
                assert f.port_towards(l, s) == towards[0]
    # a leaf connected to only one spine
    partial = [l for l in f.leaves()
               if len({p.peer for p in f.ports(l) if p.peer.startswith("spine")}) == 1]
    assert [l.name for l in partial] == ["leaf3"]
    assert len({l.rate_bps for l in f.links}) > 1
    # links are stored lower tier first
    tier = {"host": 0, "leaf": 1, "spine": 2}
    assert all(tier[f.node(l.a).role] < tier[f.node(l.b).role] for l in f.links)


def test_fractional_rates_and_zero_delay(tmp_path):
    data = copy.deepcopy(CLOS_2X2)
    data["clos"]["host_link"] = {"rate_gbps": 2.5, "delay_us": 0}
    data["clos"]["fabric_link"] = {"rate_gbps": 0.1, "delay_us": 0.25}
    f = load_fabric(write(tmp_path, data))
    assert f.link_between("h1", "leaf1").rate_bps == 2_500_000_000
    assert f.link_between("h1", "leaf1").delay_ns == 0
    assert f.link_between("leaf1", "spine1").rate_bps == 100_000_000
    assert f.link_between("leaf1", "spine1").delay_ns == 250


def test_fabric_from_dict_and_prefix():
    f = fabric_from_dict(copy.deepcopy(CLOS_2X2))
    assert isinstance(f, Fabric) and f.source == "<inline>"
    bad = copy.deepcopy(CLOS_2X2)
    bad["clos"]["spines"] = 0
    with pytest.raises(ConfigError) as info:
        fabric_from_dict(bad, "exp.yaml", field_prefix="topology")
    assert str(info.value).startswith("exp.yaml: topology.clos.spines: ")


def test_loading_is_deterministic():
    for p in ALL_FILES:
        assert load_fabric(p) == load_fabric(p)


def test_model_is_immutable():
    f = load_fabric(TOPOS / "clos-2x2.yaml")
    with pytest.raises(Exception):
        f.name = "x"  # type: ignore[misc]
    with pytest.raises(Exception):
        f.nodes[0].name = "x"  # type: ignore[misc]
    assert isinstance(f.nodes, tuple) and isinstance(f.links, tuple)


def test_lookup_errors():
    f = load_fabric(TOPOS / "clos-2x2.yaml")
    with pytest.raises(KeyError):
        f.node("nope")
    with pytest.raises(ValueError):
        f.device_id("h1")
    with pytest.raises(ValueError):
        f.host_leaf("leaf1")
    with pytest.raises(KeyError):
        f.port("leaf1", 9)


# ------------------------------------------------------------ bad files

def test_missing_file(tmp_path):
    p = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_fabric(p)
    assert str(info.value).startswith(f"{p}: cannot read")


def test_yaml_syntax_error_names_line(tmp_path):
    p = write(tmp_path, "name: t\nclos:\n  spines: [1\n  leaves: 2\n")
    with pytest.raises(ConfigError) as info:
        load_fabric(p)
    assert info.value.field.startswith("line ")
    assert "YAML" in info.value.reason


def test_yaml_duplicate_key_is_an_error(tmp_path):
    p = write(tmp_path, "name: t\nname: u\nclos: {}\n")
    with pytest.raises(ConfigError) as info:
        load_fabric(p)
    assert info.value.field == "line 2" and "duplicate key 'name'" in info.value.reason


@pytest.mark.parametrize("text,reason", [("", "empty"), ("- a\n- b\n", "mapping")])
def test_top_level_not_a_mapping(tmp_path, text, reason):
    assert_error(tmp_path, text, "", reason)


@pytest.mark.parametrize("edit,field,words", [
    (lambda d: d["clos"].update(spines=0), "clos.spines", [">= 1"]),
    (lambda d: d["clos"].update(leaves=0), "clos.leaves", [">= 1"]),
    (lambda d: d["clos"].update(hosts_per_leaf=0), "clos.hosts_per_leaf", [">= 1"]),
    (lambda d: d["clos"].update(spines=True), "clos.spines", ["integer", "true"]),
    (lambda d: d["clos"].update(leaves="2"), "clos.leaves", ["integer"]),
    (lambda d: d["clos"].update(leaves=2.0), "clos.leaves", ["integer"]),
    (lambda d: d["clos"].update(spine=2), "clos.spine", ["unknown field", "spines"]),
    (lambda d: d["clos"].pop("fabric_link"), "clos.fabric_link", ["required"]),
    (lambda d: d["clos"]["host_link"].update(rate_gbps=0), "clos.host_link.rate_gbps", ["> 0"]),
    (lambda d: d["clos"]["host_link"].update(rate_gbps=-5), "clos.host_link.rate_gbps", ["> 0"]),
    (lambda d: d["clos"]["fabric_link"].update(delay_us=-1), "clos.fabric_link.delay_us", [">= 0"]),
    (lambda d: d["clos"]["fabric_link"].update(delay_us=False), "clos.fabric_link.delay_us", ["number"]),
    (lambda d: d["clos"]["fabric_link"].update(rate_gbps=float("inf")), "clos.fabric_link.rate_gbps", ["finite"]),
    (lambda d: d["clos"]["fabric_link"].update(mtu=9000), "clos.fabric_link.mtu", ["unknown field"]),
    (lambda d: d["clos"].update(hosts_per_leaf=254), "clos.hosts_per_leaf", ["253"]),
    (lambda d: d["clos"].update(spines=65), "clos.spines", ["64"]),
    (lambda d: d["clos"].update(spines=64, hosts_per_leaf=200), "clos.hosts_per_leaf", ["254"]),
    (lambda d: d["clos"].update(leaves=255), "clos.leaves", ["254"]),
    (lambda d: d.update(addressing={"host_prefix": "10.0.0.0/23"}), "addressing.host_prefix",
     ["1 leaf", "2 leaves"]),
    (lambda d: d.update(addressing={"host_prefix": "10.0.0.0/24"}), "addressing.host_prefix", ["/23"]),
    (lambda d: d.update(addressing={"host_prefix": "10.0.0.1/16"}), "addressing.host_prefix", ["host bits"]),
    (lambda d: d.update(addressing={"host_prefix": "fd00::/48"}), "addressing.host_prefix", ["IPv4"]),
    (lambda d: d.update(addressing={"host_prefix": "ten"}), "addressing.host_prefix", ["IPv4"]),
    (lambda d: d.update(addressing={"prefix": "10.0.0.0/16"}), "addressing.prefix", ["host_prefix"]),
    (lambda d: d.pop("name"), "name", ["required"]),
    (lambda d: d.update(name="Clos_2"), "name", ["fabric name"]),
    (lambda d: d.update(name="a" * 64), "name", ["63"]),
    (lambda d: d.update(nodes=[]), "clos", ["not both"]),
    (lambda d: d.pop("clos"), "", ["either clos or nodes"]),
    (lambda d: d.update(topology="x"), "topology", ["unknown field", "clos", "nodes"]),
])
def test_bad_parametric(tmp_path, edit, field, words):
    data = copy.deepcopy(CLOS_2X2)
    edit(data)
    assert_error(tmp_path, data, field, *words)


def _nodes(extra=(), drop=()):
    return [n for n in BASE_NODES if n[0] not in drop] + list(extra)


def _links(extra=(), drop=()):
    return [l for i, l in enumerate(BASE_LINKS) if i not in drop] + list(extra)


@pytest.mark.parametrize("nodes,links,field,words", [
    # names
    (_nodes([("leaf1", "leaf")]), _links(), "nodes[7].name", ["duplicate", "nodes[2]"]),
    (_nodes([("Leaf3", "leaf")]), _links(), "nodes[7].name", ["not a valid node name"]),
    (_nodes([("3leaf", "leaf")]), _links(), "nodes[7].name", ["not a valid node name"]),
    (_nodes([("leaf-3", "leaf")]), _links(), "nodes[7].name", ["not a valid node name"]),
    (_nodes([("leaf12345", "leaf")]), _links(), "nodes[7].name", ["8 characters"]),
    (_nodes([("tor1", "tor")]), _links(), "nodes[7].role", ["superspine, spine, leaf or host", "'tor'"]),
    # links
    (_nodes(), _links([("leaf2", "spine9")]), "links[7].b", ["unknown node", "spine9"]),
    (_nodes(), _links([("leaf9", "spine1")]), "links[7].a", ["unknown node"]),
    (_nodes(), _links([("leaf1", "leaf1")]), "links[7].b", ["self-link"]),
    (_nodes(), _links([("h1", "h2")]), "links[7]", ["host-host"]),
    (_nodes([("h4", "host")]), _links([("h4", "spine1")]), "links[7]", ["host-spine"]),
    (_nodes(), _links([("spine1", "h3")]), "links[7]", ["spine-host"]),
    (_nodes(), _links([("leaf1", "leaf2")]), "links[7]", ["leaf-leaf"]),
    (_nodes(), _links([("spine1", "spine2")]), "links[7]", ["spine-spine"]),
    (_nodes(), _links([("leaf1", "h1")]), "links[7]", ["parallel", "links[0]"]),
    (_nodes(), _links([("h1", "leaf2")]), "links[7]", ["host h1", "second link", "links[0]"]),
    # degree and counts
    (_nodes([("h4", "host")]), _links(), "nodes[7]", ["host h4 has no link"]),
    (_nodes([("leaf3", "leaf"), ("h4", "host")]), _links([("h4", "leaf3")]), "nodes[7]",
     ["leaf3 has no link to a spine"]),
    (_nodes([("spine3", "spine")]), _links(), "nodes[7]", ["spine3 has no link"]),
    (_nodes(drop={"spine1", "spine2"}), _links(drop={3, 4, 5, 6}), "nodes", ["role spine"]),
    (_nodes(drop={"leaf1", "leaf2"}), [], "nodes", ["role leaf"]),
    (_nodes(drop={"h1", "h2", "h3"}), _links(drop={0, 1, 2}), "nodes", ["role host"]),
    ([], [], "nodes", ["role spine"]),
])
def test_bad_explicit(tmp_path, nodes, links, field, words):
    assert_error(tmp_path, explicit(nodes, links), field, *words)


def test_unreachable_host(tmp_path):
    # Two pods that share no spine: leaf1/spine1 and leaf2/spine2.
    links = _links(drop={4, 5})
    err = assert_error(tmp_path, explicit(_nodes(), links), "links", "cannot reach")
    assert "h3" in err.reason


def test_transit_through_a_leaf_is_reachable(tmp_path):
    # leaf1-spine1-leaf2-spine2-leaf3: leaf1 and leaf3 share no spine but connect.
    nodes = _nodes([("leaf3", "leaf"), ("h4", "host")])
    links = _links([("h4", "leaf3"), ("leaf3", "spine2")], drop={4})
    f = load_fabric(write(tmp_path, explicit(nodes, links)))
    assert len(f.hosts()) == 4


def test_explicit_field_errors(tmp_path):
    data = explicit(_nodes(), _links())
    data["links"][2]["rate_gbps"] = True
    assert_error(tmp_path, data, "links[2].rate_gbps", "number", "true")
    data = explicit(_nodes(), _links())
    data["links"][3]["speed"] = 100
    assert_error(tmp_path, data, "links[3].speed", "unknown field", "rate_gbps")
    data = explicit(_nodes(), _links())
    del data["links"][1]["b"]
    assert_error(tmp_path, data, "links[1].b", "required")
    data = explicit(_nodes(), _links())
    data["nodes"][4]["name"] = 7
    assert_error(tmp_path, data, "nodes[4].name", "string")
    data = explicit(_nodes(), _links())
    data["nodes"] = {"spine1": "spine"}
    assert_error(tmp_path, data, "nodes", "list")
    data = explicit(_nodes(), _links())
    del data["links"]
    assert_error(tmp_path, data, "links", "required")


def test_too_many_hosts_on_a_leaf(tmp_path):
    hosts = [(f"h{i}", "host") for i in range(4, 255)]          # h1-h3 + 251 = 254 hosts
    nodes = _nodes(hosts)
    # leaf1: 253 hosts and one uplink = 254 ports, the most a switch has
    links = _links([(h, "leaf1") for h, _ in hosts], drop={4})
    f = load_fabric(write(tmp_path, explicit(nodes, links)))     # 253 fit
    assert f.addresses.host_ip("h254") == "10.0.1.253"
    nodes.append(("h255", "host"))
    links.append(("h255", "leaf1"))
    assert_error(tmp_path, explicit(nodes, links), "nodes[2]", "leaf1 has 254 hosts", "253")


def test_too_many_leaves_for_host_prefix(tmp_path):
    data = explicit(_nodes(), _links(), addressing={"host_prefix": "192.168.0.0/23"})
    assert_error(tmp_path, data, "addressing.host_prefix", "192.168.0.0/23", "2 leaves")
    data["addressing"]["host_prefix"] = "192.168.0.0/22"
    assert load_fabric(write(tmp_path, data)).host_prefix == "192.168.0.0/22"


def test_too_many_switch_ports(tmp_path):
    hosts = [(f"h{i}", "host") for i in range(4, 204)]           # leaf1: 202 hosts
    links = _links([(h, "leaf1") for h, _ in hosts] + [("leaf1", "spine1")] * 51)
    # leaf1: 202 hosts + 2 + 51 uplinks = 255 ports
    assert_error(tmp_path, explicit(_nodes(hosts), links), "nodes[2]", "255 links", "254")


def test_ecmp_group_too_wide(tmp_path):
    # 63 parallel links more from leaf1 to spine1: 65 equal-cost uplinks to leaf2.
    links = _links([("leaf1", "spine1")] * 63)
    assert_error(tmp_path, explicit(_nodes(), links), "nodes[2]", "65-way ECMP", "64")
    links = _links([("leaf1", "spine1")] * 62)                   # 64-way: fits
    assert load_fabric(write(tmp_path, explicit(_nodes(), links)))


def test_parallel_leaf_spine_links_allowed(tmp_path):
    f = load_fabric(write(tmp_path, explicit(_nodes(), _links([("spine1", "leaf1")]))))
    both = f.links_between("leaf1", "spine1")
    assert [(l.a, l.a_port, l.b, l.b_port) for l in both] == [
        ("leaf1", 3, "spine1", 1), ("leaf1", 5, "spine1", 3)]
