"""Experiment files with a ``workload:`` (and ``storage:``): parsing, the
one-line errors, server-agent configs, and the storage reader on real NICs."""
from __future__ import annotations

import copy
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from emulator.nic.wall import nic_wall
from tests.nics import roce_nic
from emulator.nic.nic import RoceNic
from emulator.collectives.storage import READ_QPN_BASE, StorageReader, block_pattern
from emulator.agents.dpu import StorageTarget
from emulator.errors import ConfigError
from emulator.experiment.dilation import with_dilation
from emulator.experiment.model import experiment_from_dict, load_experiment
from emulator.experiment.servers import plain_hosts, server_configs
from tests.conftest import REPO

EXP = REPO / "experiments"
BASE = {"name": "w", "topology": "../topologies/rail-2x4.yaml", "dilation": 1000,
        "workload": {"tests": [{"collective": "all_reduce", "sizes": [65536]}]}}


def _exp(**changes):
    data = copy.deepcopy(BASE)
    for k, v in changes.items():
        if v is None:
            data.pop(k, None)
        else:
            data[k] = v
    return experiment_from_dict(data, EXP / "w.yaml")


def _err(**changes) -> str:
    with pytest.raises(ConfigError) as e:
        _exp(**changes)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_workload_alone_runs_on_every_compute_server():
    exp = _exp()
    assert exp.flows == () and exp.workload.servers == ("server1", "server2")
    assert plain_hosts(exp) == set()          # no host agents: the server agents own the NICs


def test_a_workload_needs_gpu_servers_and_two_ranks():
    assert "workload: needs GPU servers: topology 'clos-2x2' has none" in _err(
        topology="../topologies/clos-2x2.yaml")
    one_gpu = {"name": "g", "servers": {"count": 2, "gpus_per_server": 1,
                                        "nic_link": {"rate_gbps": 100, "delay_us": 1}},
               "rail_optimized": {"spines": 1, "fabric_link": {"rate_gbps": 100, "delay_us": 1}}}
    assert _exp(topology=one_gpu).workload.servers == ("server1", "server2")   # 2 ranks, no NVLink
    wl = {**BASE["workload"], "servers": ["server1"]}
    assert "workload.servers: 1 server x 1 GPU = 1 rank: a collective needs at least 2" in _err(
        topology=one_gpu, workload=wl)
    assert _exp(workload=wl).workload.servers == ("server1",)                 # 1 server x 4 GPUs


def test_neither_traffic_nor_workload_is_an_error():
    assert "give 'traffic' or 'workload'" in _err(workload=None)


def test_workload_errors_name_the_field():
    wl = {"tests": [{"collective": "all_reduce", "sizes": [6]}]}
    assert "w.yaml: workload.tests[0].sizes[0]: 6 B is not a multiple of 4 B" in _err(workload=wl)
    wl = {"servers": ["server9"], "tests": [{"collective": "all_reduce", "sizes": [64]}]}
    assert "workload.servers[0]: 'server9' is not a compute server" in _err(workload=wl)
    wl = {"tests": [{"collective": "all_reduce", "sizes": [64]}], "bogus": 1}
    assert "workload.bogus" in _err(workload=wl)
    # 8 ranks: an all_gather share per rank is 4 B x 8
    wl = {"tests": [{"collective": "all_gather", "sizes": [64 * 4 + 4 * 8 * 3 + 4]}]}
    assert "4 B x 8 ranks = 32 B" in _err(workload=wl)


def test_plain_flow_on_a_workload_nic_is_rejected():
    msg = _err(traffic=[{"src": "s1n0", "dst": "s2n1", "size_bytes": 1000}])
    assert "traffic: flow 0 (s1n0 -> s2n1) uses NIC s1n0, which server1 drives" in msg


def test_plain_flows_beside_a_workload_on_other_servers():
    exp = load_experiment(EXP / "allreduce-rail-congested.yaml")
    assert exp.workload.servers == ("server1", "server3")
    assert plain_hosts(exp) == {"s2n0", "s2n1", "s4n0", "s4n1"}


def test_storage_needs_training_and_a_storage_server():
    st = {"server": "storage1"}
    assert "storage: needs workload.training" in _err(
        topology="../topologies/rail-2x4-storage-shared.yaml", storage=st)
    wl = {"training": {"steps": 1, "size_bytes": 4096}}
    assert "storage.server: 'storage1' is not a storage server" in _err(workload=wl, storage=st)


def test_readers_use_the_storage_nic_on_a_separate_plane_else_nic0():
    shared = load_experiment(EXP / "checkpoint-shared.yaml")
    separate = load_experiment(EXP / "checkpoint-separate.yaml")
    assert shared.workload.readers == (("server1", "s1n0"), ("server2", "s2n0"))
    assert separate.workload.readers == (("server1", "s1st"), ("server2", "s2st"))
    assert separate.workload.storage_nic == "st1n0"


def test_all_to_all_pairs_hosts_of_one_plane_only():
    exp = _exp(topology="../topologies/rail-2x4-storage-separate.yaml", workload=None,
               traffic=[{"pattern": "all-to-all", "size_bytes": 1000}])
    planes = {f: exp.fabric.node(f).plane for f in (h.name for h in exp.fabric.hosts())}
    assert all(planes[f.src] == planes[f.dst] for f in exp.flows)
    # 8 compute NICs; storage plane: s1st, s2st, st1n0
    assert len(exp.flows) == 8 * 7 + 3 * 2
    msg = _err(topology="../topologies/rail-2x4-storage-separate.yaml", workload=None,
               traffic=[{"src": "s1n0", "dst": "st1n0", "size_bytes": 1000}])
    assert "traffic[0].dst: st1n0 is on the storage plane, s1n0 on the compute plane" in msg


def test_server_configs_are_dilated_and_agree_on_both_ends(tmp_path):
    exp = with_dilation(load_experiment(EXP / "checkpoint-separate.yaml"), 10000)   # file: auto
    d = exp.dilation
    cfg = server_configs(exp, tmp_path, 123)
    s1, s2, st = cfg["server1"], cfg["server2"], cfg["storage1"]
    assert [n.ifname for n in s1.nics] == [f"s1n{i}-eth0" for i in range(4)]
    assert s1.nics[0].rate_bps == int(100e9) and s1.nics[0].dilation == d   # fabric: the NIC
    assert s1.nics[0].tx_delay_ns == 1000                                   # dilates them
    assert nic_wall(s1.nics[0]).rate_bps == int(100e9 / d)
    assert nic_wall(s1.nics[0]).tx_delay_ns == int(1000 * d)
    assert s1.nvlink.model_dump() == {"rate_bps": 7200e9 / d, "delay_ns": 250 * d}
    assert s1.rank_ips == s2.rank_ips and s1.rank_ips["4"] == exp.fabric.addresses.host_ip("s2n0")
    assert (s1.server, s2.server, s1.servers) == (0, 1, 2)
    assert s1.start_at_unix_ns == 123 and s1.workload.servers is None
    # reader j <-> target client j: same QPN both ends, the reader's storage NIC's IP
    assert s1.storage.nic.ifname == "s1st-eth0"
    assert s1.storage.target_ip == st.nic.ip == exp.fabric.addresses.host_ip("st1n0")
    assert [c.qpn for c in st.clients] == [READ_QPN_BASE, READ_QPN_BASE + 1]
    assert st.clients[1].remote_ip == s2.storage.nic.ip
    shared = server_configs(with_dilation(load_experiment(EXP / "checkpoint-shared.yaml"), 10000),
                            tmp_path, 0)
    assert shared["server1"].storage.nic is None        # reads share NIC 0


def _nic_pair(rate_bps):
    sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a = roce_nic(None, "02:00:00:00:0a:01", "10.99.0.1", "02:00:00:00:0b:01", rate_bps=rate_bps,
                sock=sa, rto_ns=2_000_000_000)
    b = roce_nic(None, "02:00:00:00:0b:01", "10.99.0.2", "02:00:00:00:0a:01", rate_bps=rate_bps,
                sock=sb, rto_ns=2_000_000_000)
    return a, b


@pytest.mark.parametrize("corrupt", [False, True])
def test_storage_reader_reads_and_checks_blocks(corrupt):
    target_nic, reader_nic = _nic_pair(200_000_000)
    try:
        blk, nblk = 8192, 4
        target = StorageTarget(target_nic, blk, nblk, rkey=0x5107, addr=0x1000_0000)
        for k in range(nblk):
            target.block(k)[:] = block_pattern(k, blk).tobytes()
        if corrupt:
            target.block(2)[100] ^= 0xFF
        target.serve(target_nic.create_qp(READ_QPN_BASE, "10.99.0.2", READ_QPN_BASE))
        r = StorageReader(reader_nic, READ_QPN_BASE, "10.99.0.1", blk, nblk, depth=2)
        r.start()
        end = time.monotonic() + 20
        while r.done_blocks < 6 and time.monotonic() < end:
            for nic in (target_nic, reader_nic):
                nic.run_once(0.001)
            target_nic.poll_cq()
            for c in reader_nic.poll_cq():
                r.on_completion(c)
        r.stop()
        assert r.done_blocks >= 6 and r.error is None
        # blocks 0,1,2,3,0,1: the corrupted block 2 was read once
        assert r.wrong_blocks == (1 if corrupt else 0)
        rep = r.report()
        assert rep["bytes_in_window"] == r.done_blocks * blk and rep["window_ns"] > 0
    finally:
        target_nic.close()
        reader_nic.close()


def test_block_patterns_differ_between_blocks():
    assert (block_pattern(0, 4096) != block_pattern(1, 4096)).any()
    assert block_pattern(3, 4096).dtype.name == "uint8"
    for k, n in ((0, 1), (5, 4096), (1000, 262144), (250, 300)):      # byte i: (i + 97 k) mod 251
        want = ((np.arange(n, dtype=np.int64) + 97 * k) % 251).astype(np.uint8)
        assert np.array_equal(block_pattern(k, n), want)


def test_endpoint_costs_and_tenancy_on_workload_nics_are_refused():
    """The server agents model GPUDirect staging only: host CPU costs or
    tenant partitions for their NICs would be silently ignored."""
    msg = _err(endpoints={"host_cpu": {"cores": 1, "crypto_ns_per_packet": 800}})
    assert "w.yaml: endpoints.host_cpu: per-packet host CPU costs apply to NICs running plain flows" in msg
    msg = _err(endpoints={"overrides": [{"servers": ["server2"], "host_cpu": {"firewall_ns_per_packet": 1}}]})
    assert "endpoints.overrides[0].host_cpu" in msg
    # GPUDirect settings and a cost-free host_cpu are what the server agents take.
    assert _exp(endpoints={"gpudirect": False, "host_cpu": {"cores": 2}}).workload is not None
