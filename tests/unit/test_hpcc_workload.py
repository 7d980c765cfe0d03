"""``cc: hpcc`` with a ``workload:`` and ``storage:``: the collective and
storage agents' NICs get what the host agents' get (HPCC's parameters, the
INT records to reserve, an ACK per packet, one T), T and the records range
over the workload's own QPs, and dcqcn's configs stay as they were."""
from __future__ import annotations

import copy

import pytest

from emulator.collectives.engine import QPN_BASE
from emulator.collectives.schedule import conn_key
from emulator.collectives.storage import READ_QPN_BASE
from emulator.errors import ConfigError
from emulator.experiment.agents import nic_config
from emulator.experiment.ideal_fct import FabricPaths, base_rtt_ns, int_max_hops, link_framing
from emulator.experiment.model import experiment_from_dict, read_experiment_data
from emulator.experiment.servers import server_configs
from emulator.experiment.workload_qps import QpEnds, workload_qps
from emulator.int_md import INT_UDP_DPORT
from emulator.nic.wall import nic_wall
from emulator.schema.nic import DEFAULT_MTU_BYTES
from emulator.wire import RETH_BYTES
from tests.conftest import REPO

EXP = REPO / "experiments"


def _exp(name: str, **changes):
    data = copy.deepcopy(read_experiment_data(EXP / name))
    data.update(dilation=1000, **changes)
    return experiment_from_dict(data, EXP / name)


def _all_nics(cfgs: dict) -> list:
    """Every NIC config of the server agents: GPU NICs, readers' own, the target's."""
    out = []
    for c in cfgs.values():
        out += list(getattr(c, "nics", []))
        st = getattr(c, "storage", None)
        if st is not None and st.nic is not None:
            out.append(st.nic)
        if getattr(c, "nic", None) is not None:
            out.append(c.nic)
    return out


@pytest.mark.parametrize("name", ["allreduce-rail.yaml", "checkpoint-shared.yaml",
                                  "checkpoint-separate.yaml", "allreduce-rail-congested.yaml"])
def test_workload_and_storage_nics_get_hpcc_as_the_host_agents_do(name, tmp_path):
    e = _exp(name, cc="hpcc", hpcc={"eta": 0.9})
    nics = _all_nics(server_configs(e, tmp_path, None))
    assert nics
    t_ns = base_rtt_ns(e)
    for n in nics:
        assert n.dcqcn.enabled is False and n.ack_every_n == 1
        assert n.int_max_hops == int_max_hops(e) > 0
        assert n.hpcc.eta == 0.9 and n.hpcc.base_rtt_us == t_ns / 1000
        assert nic_wall(n).cc.base_rtt_ns == t_ns            # fabric ns, one T for all
    # the plain flows' host agents (the congested variant's competing job): the same T
    for f in e.flows:
        assert nic_config(e, f.src).hpcc == nics[0].hpcc


def test_dcqcn_workload_configs_carry_no_int():
    e = _exp("checkpoint-shared.yaml")
    for n in _all_nics(server_configs(e, REPO / "unused", None)):
        assert n.dcqcn.enabled is True and n.hpcc is None
        assert n.int_max_hops == 0 and n.ack_every_n == 16


def test_workload_qps_are_the_agents_connections_both_ways():
    e = _exp("allreduce-rail.yaml", cc="hpcc")
    qps = workload_qps(e)
    # the snake ring's two server-to-server hops (rank 3 <-> 7 on rail 3, 4 <-> 0
    # on rail 0), ring and barrier, each connection's two QPs
    assert set(qps) == {QpEnds("s1n3", "s2n3", QPN_BASE + conn_key(7, 0), QPN_BASE + 3),
                        QpEnds("s2n3", "s1n3", QPN_BASE + 3, QPN_BASE + 7),
                        QpEnds("s2n0", "s1n0", QPN_BASE + 0, QPN_BASE + 4),
                        QpEnds("s1n0", "s2n0", QPN_BASE + 4, QPN_BASE + 0)}
    reads = [q for q in workload_qps(_exp("checkpoint-shared.yaml", cc="hpcc"))
             if q.src_qpn < QPN_BASE]
    assert sorted(reads) == sorted([QpEnds("s1n0", "st1n0", READ_QPN_BASE, READ_QPN_BASE),
                                    QpEnds("st1n0", "s1n0", READ_QPN_BASE, READ_QPN_BASE),
                                    QpEnds("s2n0", "st1n0", READ_QPN_BASE + 1, READ_QPN_BASE + 1),
                                    QpEnds("st1n0", "s2n0", READ_QPN_BASE + 1, READ_QPN_BASE + 1)])
    assert workload_qps(_exp("incast-hpcc.yaml")) == ()


def test_t_and_int_records_cover_the_workload_s_longest_path():
    """On the 64-GPU rails the ring's hop between the scalable units crosses
    a spine: 3 switches, and T is that QP's round trip, not a rail hop's."""
    e = _exp("allreduce-rail-64.yaml", cc="hpcc")
    assert not e.flows                                   # only the workload's QPs
    paths = FabricPaths(e.fabric, INT_UDP_DPORT)
    longest = max(len(paths.flow_path(q)) for q in workload_qps(e))
    assert int_max_hops(e) == longest - 1 == 3
    framing = link_framing(e.fabric, 3)
    data = framing.frame_bytes(RETH_BYTES, DEFAULT_MTU_BYTES) + framing.wire_overhead_bytes
    ack = framing.ack_frame_bytes + framing.wire_overhead_bytes
    want = max(sum(data * 8e9 / h.rate_bps + h.delay_ns for h in paths.flow_path(q))
               + sum(ack * 8e9 / h.rate_bps + h.delay_ns for h in paths.ack_path(q))
               for q in workload_qps(e))
    assert base_rtt_ns(e) == round(want)
    assert base_rtt_ns(e) > base_rtt_ns(_exp("allreduce-rail.yaml", cc="hpcc"))   # rail only


def test_gpudirect_staging_runs_under_hpcc(tmp_path):
    """allreduce-rail-nogdr's endpoints: set GPUDirect off only: no CPU model holds a packet."""
    e = _exp("allreduce-rail-nogdr.yaml", cc="hpcc")
    nics = _all_nics(server_configs(e, tmp_path, None))
    assert all(n.hpcc is not None and n.gpudirect is False for n in nics)


@pytest.mark.parametrize("name,endpoints", [
    ("incast-hpcc.yaml", {"host_cpu": {"crypto_ns_per_packet": 100}}),
    ("incast-hpcc.yaml", {"overrides": [{"hosts": ["h1"], "dpu_cpu": {"crypto_ns_per_byte": 1}}]}),
    ("multitenant-nic-vs-dpu-nocost.yaml", None),           # tenant partitions
])
def test_hpcc_still_refused_where_a_cpu_model_holds_packets(name, endpoints):
    data = copy.deepcopy(read_experiment_data(EXP / name))
    data["cc"] = "hpcc"
    if endpoints is not None:
        data["endpoints"] = endpoints
    with pytest.raises(ConfigError) as e:
        experiment_from_dict(data, EXP / name)
    assert str(e.value).endswith("cc: hpcc with endpoints' per-packet CPU costs or tenant "
                                 "partitions: not yet")
