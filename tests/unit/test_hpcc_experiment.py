"""``cc: hpcc`` in an experiment: what the agents get (HPCC's parameters, the
INT records to reserve, T), what is refused, and the paths and ideal FCTs on
INT's UDP port (its ECMP hash)."""
from __future__ import annotations

import pytest

from emulator.errors import ConfigError
from emulator.experiment.agents import cc_fields, nic_fields
from emulator.experiment.ideal_fct import (
    FabricPaths, base_rtt_ns, flow_paths, int_max_hops, link_framing, standalone_fct_ns,
)
from emulator.experiment.model import experiment_from_dict, load_experiment
from emulator.int_md import INT_UDP_DPORT, int_bytes
from emulator.wire import ROCE_FRAMING, ROCEV2_UDP_DPORT, WIRE_OVERHEAD_BYTES
from tests.conftest import REPO

TRAFFIC = [{"src": "h2", "dst": "h1", "size_bytes": 65536},      # same leaf: one switch
           {"src": "h4", "dst": "h1", "size_bytes": 65536}]      # across the spines: three


def exp(**kw):
    return experiment_from_dict({"name": "x", "topology": "../topologies/clos-2x2-h3.yaml",
                                 "dilation": 1000, "traffic": TRAFFIC, **kw},
                                REPO / "experiments" / "x.yaml")


def test_hpcc_nics_get_hpcc_int_and_every_packet_acked():
    e = exp(cc="hpcc", hpcc={"eta": 0.9})
    f = nic_fields(e, "h2")
    assert f["dcqcn"].enabled is False
    assert f["int_max_hops"] == 3                       # leaf, spine, leaf
    assert f["hpcc"].eta == 0.9 and f["dilation"] == 1000.0
    from emulator.experiment.agents import agent_configs
    from emulator.nic.wall import nic_wall
    cfgs = agent_configs(e, REPO / "results" / "unused", None)
    assert {c.ack_every_n for c in cfgs.values()} == {1}
    h = nic_wall(cfgs["h2"]).cc                         # the NIC's HPCC parameters
    assert h.eta == 0.9 and h.dilation == 1000.0
    assert h.base_rtt_ns == base_rtt_ns(e) > 0          # fabric ns: not x D


def test_dcqcn_and_none():
    assert cc_fields(exp())["dcqcn"].enabled is True
    none = cc_fields(exp(cc="none"))
    assert none["dcqcn"].enabled is False and "hpcc" not in none


def test_base_rtt_is_the_longest_flows_round_trip_with_int_bytes():
    e = exp(cc="hpcc")
    paths = flow_paths(e)
    assert paths.dport == INT_UDP_DPORT
    framing = link_framing(e.fabric, 3)
    assert framing.hdr_bytes == ROCE_FRAMING.hdr_bytes + int_bytes(3)
    data = framing.frame_bytes(16, 1024) + WIRE_OVERHEAD_BYTES
    ack = framing.ack_frame_bytes + WIRE_OVERHEAD_BYTES
    far = e.flows[1]
    want = sum(data * 8e9 / h.rate_bps + h.delay_ns for h in paths.flow_path(far)) \
        + sum(ack * 8e9 / h.rate_bps + h.delay_ns for h in paths.ack_path(far))
    assert base_rtt_ns(e) == round(want)
    assert len(paths.flow_path(far)) - 1 == int_max_hops(e) == 3


def test_ideal_fct_counts_the_int_bytes_and_hashes_on_int_s_port():
    d, h = exp(), exp(cc="hpcc")
    assert int_max_hops(d) == 0
    for fd, fh in zip(d.flows, h.flows):
        assert standalone_fct_ns(h, fh) > standalone_fct_ns(d, fd)      # bigger frames
    # the paths are those of the port the packets carry
    plain = FabricPaths(h.fabric)
    assert plain.dport == ROCEV2_UDP_DPORT
    f = h.flows[1]
    assert flow_paths(h).flow_path(f) == plain.path(f.src, f.dst, f.udp_sport, INT_UDP_DPORT)


@pytest.mark.parametrize("extra,field", [
    ({"cc": "hpcc", "dcqcn": {"enabled": True}}, "cc"),
    ({"cc": "none", "dcqcn": {"g": 0.1}}, "cc"),
    ({"cc": "cubic"}, "cc"),
    ({"hpcc": {"eta": 0}}, "hpcc.eta"),
])
def test_refused_with_the_field_named(extra, field):
    with pytest.raises(ConfigError) as e:
        exp(**extra)
    assert field in str(e.value)


def test_hpcc_refused_where_int_does_not_run():
    with pytest.raises(ConfigError, match="infiniband"):
        experiment_from_dict({"name": "x", "topology": "../topologies/clos-2x2-h3-ib.yaml",
                              "cc": "hpcc", "traffic": TRAFFIC}, REPO / "experiments" / "x.yaml")


@pytest.mark.parametrize("name", ["incast-hpcc", "hol-victim-hpcc", "fairness-hpcc"])
def test_shipped_hpcc_twins_load(name):
    e = load_experiment(REPO / "experiments" / f"{name}.yaml")
    assert e.spec.cc == "hpcc" and not e.spec.qos.ecn.enabled and e.spec.qos.pfc.enabled
    twin = {"incast-hpcc": "incast-dcqcn", "hol-victim-hpcc": "hol-victim-dcqcn",
            "fairness-hpcc": "fairness"}[name]
    d = load_experiment(REPO / "experiments" / f"{twin}.yaml")
    assert [(f.src, f.dst, f.size_bytes, f.start_fabric_ns) for f in e.flows] == \
        [(f.src, f.dst, f.size_bytes, f.start_fabric_ns) for f in d.flows]
    assert e.spec.topology == d.spec.topology
