"""The server form: servers, rail-optimized wiring, storage planes, and every rejection."""
from __future__ import annotations

import copy
import ipaddress
from pathlib import Path

import pytest

from emulator.topo import compute_routes, fabric_from_dict, load_fabric, longest_prefix_match
from tests.unit.test_routes import all_walks
from tests.unit.test_topo import assert_error, write

TOPOS = Path(__file__).resolve().parents[2] / "topologies"
LINK = {"rate_gbps": 100, "delay_us": 1}

RAIL = {
    "name": "t",
    "servers": {"count": 2, "gpus_per_server": 4, "nvlink": {"rate_gbps": 7200, "delay_us": 0.25},
                "nic_link": dict(LINK)},
    "rail_optimized": {"spines": 2, "fabric_link": dict(LINK)},
}
STORAGE = {"count": 1, "nic_link": dict(LINK)}
PLANE = {"leaves": 1, "spines": 1, "access_link": dict(LINK), "fabric_link": dict(LINK)}


def rail(**extra):
    data = copy.deepcopy(RAIL)
    data.update(copy.deepcopy(extra))
    return data


def separate():
    return rail(storage_servers=STORAGE, storage_plane=PLANE)


# ------------------------------------------------------------ good files

def test_rail_2x4_servers():
    f = load_fabric(TOPOS / "rail-2x4.yaml")
    assert [s.name for s in f.servers()] == ["server1", "server2"]
    s1 = f.server("server1")
    assert (s1.role, s1.gpus, s1.nics) == ("compute", 4, ("s1n0", "s1n1", "s1n2", "s1n3"))
    assert (s1.nvlink_rate_bps, s1.nvlink_delay_ns) == (7_200_000_000_000, 250)
    assert (s1.dpu, s1.tenant, s1.storage_nic) == (False, None, None)
    assert all(f.server_of(n) == s1 for n in s1.nics)
    assert f.server_of("s2n3").name == "server2"
    assert [n.name for n in f.spines()] == ["spine1", "spine2"]
    assert [n.name for n in f.switches()] == ["leaf1", "leaf2", "leaf3", "leaf4", "spine1", "spine2"]
    assert f.rails == ("leaf1", "leaf2", "leaf3", "leaf4") and f.is_rail_optimized()
    assert all(l.rate_bps == 100_000_000_000 for l in f.links)
    with pytest.raises(ValueError):
        f.server_of("leaf1")
    with pytest.raises(KeyError):
        f.server("server3")


def test_rail_wiring_nic_i_of_every_server_on_leaf_i():
    f = load_fabric(TOPOS / "rail-2x4.yaml")
    for server in f.servers():
        for rank, nic in enumerate(server.nics):
            assert f.host_leaf(nic).name == f.rails[rank] == f"leaf{rank + 1}"
            (p,) = f.ports(nic)
            assert p.ifname == f"{nic}-eth0"
    for leaf in f.leaves():
        # ports 1..2 face server1, server2's NIC of that rail; 3..4 the spines
        assert [(p.port_no, p.peer) for p in f.ports(leaf)] == [
            (1, f"s1n{leaf.index - 1}"), (2, f"s2n{leaf.index - 1}"), (3, "spine1"), (4, "spine2")]
    for spine in f.spines():
        assert [p.peer for p in f.ports(spine)] == ["leaf1", "leaf2", "leaf3", "leaf4"]


def test_rail_routes_same_rail_one_hop_cross_rail_via_spines():
    f = load_fabric(TOPOS / "rail-2x4.yaml")
    routes = compute_routes(f)
    assert all_walks(f, routes, "s1n0", "s2n0", max_hops=1) == (1, 1)   # rail leaf only
    assert all_walks(f, routes, "s1n0", "s2n3", max_hops=3) == (2, 3)   # over either spine
    assert all_walks(f, routes, "s1n0", "s1n3", max_hops=3) == (2, 3)   # own server, other rail


def test_servers_with_plain_clos_share_a_leaf(tmp_path):
    data = {"name": "t",
            "servers": {"count": 3, "gpus_per_server": 2, "nvlink": {"rate_gbps": 900, "delay_us": 0.5},
                        "nic_link": dict(LINK)},
            "clos": {"spines": 1, "leaves": 2, "fabric_link": dict(LINK)}}
    f = load_fabric(write(tmp_path, data))
    # ceil(3 / 2) = 2 servers per leaf, in order: server1, server2 on leaf1; server3 on leaf2.
    assert {n: f.host_leaf(n).name for s in f.servers() for n in s.nics} == {
        "s1n0": "leaf1", "s1n1": "leaf1", "s2n0": "leaf1", "s2n1": "leaf1",
        "s3n0": "leaf2", "s3n1": "leaf2"}
    assert [p.peer for p in f.ports("leaf1")] == ["s1n0", "s1n1", "s2n0", "s2n1", "spine1"]
    assert f.rails == () and not f.is_rail_optimized()
    data["clos"]["servers_per_leaf"] = 1
    data["clos"]["leaves"] = 3
    f = load_fabric(write(tmp_path, data))
    assert [f.host_leaf(s.nics[0]).name for s in f.servers()] == ["leaf1", "leaf2", "leaf3"]


def test_plain_fabric_every_host_is_a_1gpu_server():
    f = load_fabric(TOPOS / "clos-2x2.yaml")
    assert [s.name for s in f.servers()] == [h.name for h in f.hosts()]
    for h in f.hosts():
        s = f.server_of(h)
        assert (s.name, s.role, s.gpus, s.nics, s.all_nics) == (h.name, "compute", 1, (h.name,), (h.name,))
        assert f.server(h.name) == s and s.nvlink_rate_bps == 0
    assert [p.name for p in f.planes()] == ["compute"]
    assert f.plane("compute").host_prefix == f.host_prefix
    assert f.servers("storage") == () and f.rails == ()


def test_shared_storage_on_the_compute_fabric():
    f = load_fabric(TOPOS / "rail-2x4-storage-shared.yaml")
    st = f.server("storage1")
    assert (st.role, st.gpus, st.nics, st.storage_nic) == ("storage", 0, ("st1n0",), None)
    assert [s.name for s in f.servers("compute")] == ["server1", "server2"]
    assert all(s.storage_nic is None for s in f.servers())
    assert [p.name for p in f.planes()] == ["compute"] and len(f.switches()) == 6
    # After leaf1's server and spine ports: compute ports are those of rail-2x4.
    assert [p.peer for p in f.ports("leaf1")] == ["s1n0", "s2n0", "spine1", "spine2", "st1n0"]
    routes = compute_routes(f)
    for s in f.servers("compute"):
        for nic in s.nics:       # every GPU NIC reaches storage, and back
            assert all_walks(f, routes, nic, "st1n0", max_hops=3)[0] >= 1
            assert all_walks(f, routes, "st1n0", nic, max_hops=3)[0] >= 1


def test_separate_storage_plane_is_isolated():
    f = load_fabric(TOPOS / "rail-2x4-storage-separate.yaml")
    assert [(p.name, p.host_prefix) for p in f.planes()] == [
        ("compute", "10.0.0.0/16"), ("storage", "10.1.0.0/16")]
    assert [n.name for n in f.plane_nodes("storage", "leaf")] == ["sleaf1"]
    assert [n.name for n in f.plane_nodes("storage", "spine")] == ["sspine1"]
    assert [s.storage_nic for s in f.servers("compute")] == ["s1st", "s2st"]
    assert f.server_of("s1st").name == "server1"
    assert f.server("server1").all_nics == ("s1n0", "s1n1", "s1n2", "s1n3", "s1st")
    assert {f.node(n).plane for n in ("s1st", "s2st", "st1n0", "sleaf1", "sspine1")} == {"storage"}
    assert {f.node(n).plane for n in f.server("server1").nics} == {"compute"}
    plan, routes = f.addresses, compute_routes(f)
    st_ip = plan.host_ip("st1n0")
    assert ipaddress.IPv4Address(st_ip) in ipaddress.IPv4Network("10.1.0.0/16")
    # No compute switch has a route to the storage plane, nor a storage switch to compute.
    for sw in f.switches():
        other = "storage" if sw.plane == "compute" else "compute"
        other_net = ipaddress.IPv4Network(f.plane(other).host_prefix)
        assert all(not r.network.subnet_of(other_net) for r in routes[sw.name]), sw.name
    for nic in f.server("server1").nics:
        assert longest_prefix_match(routes[f.host_leaf(nic).name], st_ip) is None
    # Storage access: each compute server's storage NIC reaches storage1 and back.
    for nic in ("s1st", "s2st"):
        assert all_walks(f, routes, nic, "st1n0", max_hops=3) == (1, 1)
        assert all_walks(f, routes, "st1n0", nic, max_hops=3) == (1, 1)
    # Compute is wired exactly as in rail-2x4, with the same device ids.
    base = load_fabric(TOPOS / "rail-2x4.yaml")
    for sw in base.switches():
        assert f.ports(sw) == base.ports(sw) and f.device_id(sw) == base.device_id(sw)
        assert f.addresses.router_mac(sw) == base.addresses.router_mac(sw)
    assert [f.device_id(s) for s in ("sleaf1", "sspine1")] == [7, 8]


def test_addresses_and_ids_unique_across_planes():
    for name in ("rail-2x4-storage-separate", "rail-4x2-dpu", "rail-2x4-storage-shared"):
        f = load_fabric(TOPOS / f"{name}.yaml")
        plan = f.addresses
        ips = [plan.host_ip(h) for h in f.hosts()]
        macs = [plan.host_mac(h) for h in f.hosts()] + [plan.router_mac(s) for s in f.switches()]
        subnets = [plan.leaf_subnet(l) for l in f.leaves()]
        ids = [f.device_id(s) for s in f.switches()]
        assert len(set(ips)) == len(ips) and len(set(macs)) == len(macs)
        assert len(set(subnets)) == len(subnets)
        assert ids == list(range(1, len(ids) + 1))
        nets = [ipaddress.IPv4Network(p.host_prefix) for p in f.planes()]
        assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1:])
        for h in f.hosts():
            assert plan.host_gateway(h) == plan.leaf_gateway(f.host_leaf(h))
        assert len(f.switches()) <= 8           # a Python process per switch, 2 cores


def test_storage_prefix_and_leaf_numbering_per_plane(tmp_path):
    data = separate()
    data["storage_plane"]["leaves"] = 2
    data["storage_servers"]["count"] = 2
    data["addressing"] = {"host_prefix": "10.8.0.0/16", "storage_prefix": "172.20.0.0/22"}
    f = load_fabric(write(tmp_path, data))
    plan = f.addresses
    # storage plane leaf k gets the /24 at offset k of its own prefix
    assert [plan.leaf_subnet(l) for l in f.plane_nodes("storage", "leaf")] == [
        "172.20.1.0/24", "172.20.2.0/24"]
    assert plan.leaf_subnet("leaf1") == "10.8.1.0/24"
    # 4 storage-plane NICs over 2 leaves: s1st, s2st | st1n0, st2n0
    assert [f.host_leaf(n).name for n in ("s1st", "s2st", "st1n0", "st2n0")] == [
        "sleaf1", "sleaf1", "sleaf2", "sleaf2"]
    assert plan.host_ip("st2n0") == "172.20.2.2"


def test_tenants_and_dpus():
    f = load_fabric(TOPOS / "rail-4x2-dpu.yaml")
    got = [(s.name, s.tenant, s.dpu, s.storage_nic) for s in f.servers("compute")]
    assert got == [("server1", "blue", True, "s1dpu"), ("server2", "blue", True, "s2dpu"),
                   ("server3", "red", False, "s3st"), ("server4", "red", False, "s4st")]
    assert f.server("storage1").dpu is True
    assert all(s.gpus == 2 and s.nvlink_delay_ns == 500 for s in f.servers("compute"))
    assert f.links_between("s1dpu", "sleaf1")[0].rate_bps == 50_000_000_000   # access_link
    assert [h.name for h in f.leaf_hosts("leaf2")] == ["s1n1", "s2n1", "s3n1", "s4n1"]


def test_one_gpu_servers_need_no_nvlink(tmp_path):
    data = rail()
    data["servers"].update(gpus_per_server=1)
    del data["servers"]["nvlink"]
    f = load_fabric(write(tmp_path, data))
    assert f.server("server1").nvlink_rate_bps == 0 and f.rails == ("leaf1",)


def test_model_equality_and_determinism():
    for name in ("rail-2x4", "rail-2x4-storage-separate", "rail-4x2-dpu"):
        assert load_fabric(TOPOS / f"{name}.yaml") == load_fabric(TOPOS / f"{name}.yaml")
    assert fabric_from_dict(rail()) != fabric_from_dict(separate())


def test_mininet_topo_one_host_per_server(tmp_path):
    """The host part of FabricTopo: one Mininet host per server holding all its NICs."""
    topo_mod = pytest.importorskip("mininet.topo")
    from emulator.net.mininet_topo import add_links, add_servers

    f = load_fabric(TOPOS / "rail-2x4-storage-separate.yaml")
    topo = topo_mod.Topo()
    for sw in f.switches():
        topo.addSwitch(sw.name)
    add_servers(topo, f, host_cls=None)
    add_links(topo, f)
    assert sorted(topo.hosts()) == ["server1", "server2", "storage1"]
    plan = f.addresses
    nics = topo.nodeInfo("server1")["nics"]
    assert [n["ifname"] for n in nics] == [f"{n}-eth0" for n in f.server("server1").all_nics]
    assert [n["cidr"] for n in nics] == [plan.host_cidr(n) for n in f.server("server1").all_nics]
    assert nics[4]["gateway_mac"] == plan.router_mac("sleaf1")
    assert topo.nodeInfo("server1")["ip"] == plan.host_cidr("s1n0")
    by_intf = {}
    for a, b, info in topo.links(withKeys=False, withInfo=True):
        by_intf[info["intfName1"]] = (info["node1"], info["port1"], info["node2"], info["port2"])
    assert by_intf["s1n3-eth0"] == ("server1", 3, "leaf4", 1)
    assert by_intf["s1st-eth0"] == ("server1", 4, "sleaf1", 1)
    assert by_intf["st1n0-eth0"] == ("storage1", 0, "sleaf1", 3)
    assert len(by_intf) == len(f.links)


# ------------------------------------------------------------ bad files

def _set(path, value):
    """An edit setting data[path...] = value (None: delete the key)."""
    def edit(d):
        *parents, key = path
        for p in parents:
            d = d[p]
        if value is None:
            del d[key]
        else:
            d[key] = value
    return edit


CLOS_SERVERS = {"spines": 1, "leaves": 2, "fabric_link": dict(LINK)}
PLAIN_CLOS = {"spines": 1, "leaves": 1, "hosts_per_leaf": 2, "host_link": dict(LINK),
              "fabric_link": dict(LINK)}


@pytest.mark.parametrize("edit,field,words", [
    # forms
    (_set(["rail_optimized"], None), "servers", ["requires rail_optimized or clos"]),
    (lambda d: d.update(clos=copy.deepcopy(CLOS_SERVERS)), "rail_optimized", ["not both"]),
    (lambda d: d.update(nodes=[], links=[]), "servers", ["nodes + links"]),
    (lambda d: d.update(storage_plane=copy.deepcopy(PLANE)), "storage_plane",
     ["requires storage_servers"]),
    (lambda d: d.update(addressing={"storage_prefix": "10.1.0.0/16"}), "addressing.storage_prefix",
     ["only with storage_plane"]),
    # servers fields
    (_set(["servers", "count"], 0), "servers.count", [">= 1"]),
    (_set(["servers", "gpus_per_server"], "4"), "servers.gpus_per_server", ["integer"]),
    (_set(["servers", "gpus_per_server"], 0), "servers.gpus_per_server", [">= 1"]),
    (_set(["servers", "dpu"], "yes"), "servers.dpu", ["true or false", "'yes'"]),
    (_set(["servers", "nvlink"], None), "servers.nvlink", ["required", "gpus_per_server > 1"]),
    (_set(["servers", "nvlink", "rate_gbps"], 0), "servers.nvlink.rate_gbps", ["> 0"]),
    (_set(["servers", "nvlink", "delay_us"], -0.25), "servers.nvlink.delay_us", [">= 0"]),
    (_set(["servers", "nic_link"], None), "servers.nic_link", ["required"]),
    (_set(["servers", "gpus"], 4), "servers.gpus", ["unknown field", "gpus_per_server"]),
    (_set(["servers"], [1, 2]), "servers", ["mapping"]),
    # tenants
    (_set(["servers", "tenants"], [{"name": "a", "count": 1}, {"name": "b", "count": 2}]),
     "servers.tenants", ["add up to 3", "servers.count is 2"]),
    (_set(["servers", "tenants"], [{"name": "A", "count": 2}]), "servers.tenants[0].name",
     ["not a valid tenant name"]),
    (_set(["servers", "tenants"], [{"name": "a", "count": 1}, {"name": "a", "count": 1}]),
     "servers.tenants[1].name", ["duplicate", "servers.tenants[0]"]),
    (_set(["servers", "tenants"], [{"name": "a", "count": 2, "color": "red"}]),
     "servers.tenants[0].color", ["unknown field", "dpu"]),
    (_set(["servers", "tenants"], [{"name": "a", "count": 0}]), "servers.tenants[0].count", [">= 1"]),
    # rail_optimized
    (_set(["rail_optimized", "spines"], 65), "rail_optimized.spines", ["65-way ECMP", "64"]),
    (_set(["rail_optimized", "spines"], 0), "rail_optimized.spines", [">= 1"]),
    (_set(["rail_optimized", "leaves"], 4), "rail_optimized.leaves", ["unknown field", "spines"]),
    (_set(["rail_optimized", "fabric_link"], None), "rail_optimized.fabric_link", ["required"]),
    # capacity: 254 servers put 254 NICs on every rail leaf
    (_set(["servers", "count"], 254), "servers.count", ["leaf1 has 254 hosts", "253"]),
    (lambda d: d.update(addressing={"host_prefix": "10.0.0.0/22"}), "addressing.host_prefix",
     ["3 leaf /24 subnets", "4 leaves"]),
])
def test_bad_rail(tmp_path, edit, field, words):
    data = rail()
    edit(data)
    assert_error(tmp_path, data, field, *words)


@pytest.mark.parametrize("edit,field,words", [
    (_set(["storage_servers", "count"], 0), "storage_servers.count", [">= 1"]),
    (_set(["storage_servers", "nics_per_server"], 0), "storage_servers.nics_per_server", [">= 1"]),
    (_set(["storage_servers", "nic_link"], None), "storage_servers.nic_link", ["required"]),
    (_set(["storage_plane", "access_link"], None), "storage_plane.access_link", ["required"]),
    (_set(["storage_plane", "leaves"], 0), "storage_plane.leaves", [">= 1"]),
    (_set(["storage_plane", "spines"], 65), "storage_plane.spines", ["64"]),
    (_set(["storage_plane", "prefix"], "10.1.0.0/16"), "storage_plane.prefix",
     ["unknown field", "access_link"]),
    (lambda d: d.update(addressing={"storage_prefix": "10.0.0.0/8"}), "addressing.storage_prefix",
     ["overlaps host_prefix 10.0.0.0/16"]),
    (lambda d: d.update(addressing={"storage_prefix": "10.1.0.0/24"}), "addressing.storage_prefix",
     ["/23"]),
    (lambda d: d.update(addressing={"storage_prefix": "fd00::/48"}), "addressing.storage_prefix",
     ["IPv6", "storage_prefix"]),
    (lambda d: (d.update(addressing={"storage_prefix": "10.1.0.0/23"}),
                d["storage_plane"].update(leaves=2)),
     "addressing.storage_prefix", ["1 leaf /24", "storage plane has 2 leaves"]),
    # the DPU port of server 10000 would be named s10000dpu: 9 characters
    (lambda d: d["servers"].update(count=10000, gpus_per_server=1, dpu=True),
     "storage_plane", ["'s10000dpu'", "8 characters"]),
])
def test_bad_storage(tmp_path, edit, field, words):
    data = separate()
    edit(data)
    assert_error(tmp_path, data, field, *words)


@pytest.mark.parametrize("data,field,words", [
    ({"name": "t", "rail_optimized": {"spines": 1, "fabric_link": LINK}}, "rail_optimized",
     ["requires servers"]),
    ({"name": "t", "clos": PLAIN_CLOS, "storage_servers": STORAGE}, "storage_servers",
     ["requires servers"]),
    ({"name": "t", "clos": {**PLAIN_CLOS, "servers_per_leaf": 2}}, "clos.servers_per_leaf",
     ["only with servers", "hosts_per_leaf"]),
    ({"name": "t", "clos": {k: v for k, v in PLAIN_CLOS.items() if k != "hosts_per_leaf"}},
     "clos.hosts_per_leaf", ["required"]),
    ({"name": "t", "clos": {k: v for k, v in PLAIN_CLOS.items() if k != "host_link"}},
     "clos.host_link", ["required"]),
    ({**rail(), "rail_optimized": None, "clos": {**CLOS_SERVERS, "hosts_per_leaf": 2}},
     "clos.hosts_per_leaf", ["not with servers", "servers_per_leaf"]),
    ({**rail(), "rail_optimized": None, "clos": {**CLOS_SERVERS, "host_link": LINK}},
     "clos.host_link", ["not with servers", "servers.nic_link"]),
    ({**rail(), "rail_optimized": None, "clos": {**CLOS_SERVERS, "servers_per_leaf": 0}},
     "clos.servers_per_leaf", [">= 1"]),
    ({**rail(servers={**RAIL["servers"], "count": 5}), "rail_optimized": None,
      "clos": {**CLOS_SERVERS, "servers_per_leaf": 2}},
     "clos.servers_per_leaf", ["hold 4 servers", "servers.count is 5"]),
])
def test_bad_forms(tmp_path, data, field, words):
    data = {k: v for k, v in copy.deepcopy(data).items() if v is not None}
    assert_error(tmp_path, data, field, *words)


def test_controller_entities_per_plane():
    """What the controller writes: each switch routes only its own plane's prefixes."""
    from emulator.control.controller import switch_entities
    from emulator.p4.p4info import P4Info

    f = load_fabric(TOPOS / "rail-2x4-storage-separate.yaml")
    p4info, routes = P4Info.load(), compute_routes(f)
    stations = set()
    for sw in f.switches():
        ents = switch_entities(f, p4info, sw.name, routes)
        assert len(ents["routes"]) == len(routes[sw.name]) > 0
        stations.add(ents["tables"][0].SerializeToString())
    assert len(stations) == len(f.switches())     # one router MAC per switch, all distinct
    assert len(routes["sleaf1"]) == 3              # /32s of s1st, s2st, st1n0 only
    assert [r.prefix for r in routes["sspine1"]] == ["10.1.1.0/24"]
