"""Where a cluster run puts each node (``emulator.net.cluster.place``) and
what the ``cluster:`` section accepts (``emulator.schema.cluster``)."""
from __future__ import annotations

import pytest

from emulator.net.cluster import place
from emulator.schema.cluster import ClusterSpec
from emulator.schema.load import FieldError
from emulator.topo import load_fabric
from tests.conftest import REPO

SERVERS = [{"name": "a", "address": "localhost"}, {"name": "b", "address": "10.0.0.2"}]


def spec(placement):
    return ClusterSpec.model_validate({"servers": SERVERS, "placement": placement})


def fabric(name):
    return load_fabric(REPO / "topologies" / f"{name}.yaml")


def test_pods_put_each_pod_on_its_server_and_hosts_beside_their_leaf():
    fab = fabric("pods-2x2x2")
    where = place(spec("pods"), fab)
    assert {n for n, s in where.items() if s == "a"} == {
        "leaf1", "leaf2", "spine1", "spine2", "super1", "h1", "h2", "h3", "h4"}
    assert {n for n, s in where.items() if s == "b"} == {
        "leaf3", "leaf4", "spine3", "spine4", "super2", "h5", "h6", "h7", "h8"}


def test_pods_on_a_one_pod_fabric_is_refused():
    with pytest.raises(FieldError, match="'pods' needs a fabric of 2 or more pods"):
        place(spec("pods"), fabric("clos-2x2"))


def test_switch_bin_is_mininets_placer_with_hosts_beside_their_switch():
    fab = fabric("clos-4x4")
    where = place(spec("switch-bin"), fab)
    sw = [s.name for s in fab.switches()]
    counts = [sum(where[n] == srv for n in sw) for srv in ("a", "b")]
    assert counts == [len(sw) // 2, len(sw) - len(sw) // 2]
    for srv in fab.servers():
        assert where[srv.name] == where[fab.host_leaf(srv.all_nics[0]).name]


def test_a_mapping_places_by_name_a_nic_places_its_server_and_every_switch_is_needed():
    fab = fabric("clos-2x2")
    where = place(spec({"leaf1": "a", "spine1": "a", "leaf2": "b", "spine2": "b", "h1": "b"}), fab)
    assert where["h1"] == "b" and where["h2"] == "a" and where["h3"] == "b"
    with pytest.raises(FieldError, match="switch spine2 has no server"):
        place(spec({"leaf1": "a", "spine1": "a", "leaf2": "b"}), fab)
    with pytest.raises(FieldError) as e:
        place(spec({"leaf9": "a"}), fab)
    assert e.value.field == "placement.leaf9"


@pytest.mark.parametrize("servers, placement, field, reason", [
    (SERVERS[:1], "pods", "servers", "at least 2"),
    ([SERVERS[0], {**SERVERS[1], "name": "a"}], "pods", "servers", "named twice"),
    ([SERVERS[0], {**SERVERS[1], "address": "localhost"}], "pods", "servers", "only one server"),
    (SERVERS, {"leaf1": "c"}, "placement", "server 'c' is not in servers"),
    ([SERVERS[0], {**SERVERS[1], "name": "B"}], "pods", "servers", "must match"),
])
def test_bad_cluster_sections_name_field_and_reason(tmp_path, servers, placement, field, reason):
    from emulator.errors import ConfigError
    from emulator.schema.load import validate
    with pytest.raises(ConfigError) as e:
        validate(ClusterSpec, {"servers": servers, "placement": placement}, tmp_path / "x.yaml")
    assert field in str(e.value) and reason in str(e.value)
