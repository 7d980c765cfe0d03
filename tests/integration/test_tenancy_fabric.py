"""Tenants and DPUs for real: experiments with an ``endpoints:`` section run
through the runner under Mininet (embedded switches, RoCE agents, one
namespace per server). Tenant blue's two servers have DPUs, tenant red's
two have plain NICs; every server has one NIC on one leaf. In virtual
time: the host CPU and DPU models keep fabric time either way, and a
foreign QP's timeouts cost no wall time there."""
from __future__ import annotations

import json

import pytest

from emulator.experiment.model import experiment_from_dict
from emulator.experiment.runner import run_experiment
from emulator.experiment.time_mode import VIRTUAL, resolve_time
from tests.conftest import REPO

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]

TOPO = {"name": "tenants-4x1",
        "servers": {"count": 4, "gpus_per_server": 1, "nic_link": {"rate_gbps": 100, "delay_us": 1},
                    "tenants": [{"name": "blue", "count": 2, "dpu": True}, {"name": "red", "count": 2}]},
        "clos": {"spines": 1, "leaves": 1, "fabric_link": {"rate_gbps": 100, "delay_us": 1}}}


def _run(tmp_path, traffic, endpoints, **extra) -> dict:
    data = {"name": "tenancy", "topology": TOPO, "time": "virtual",
            "qos": {"pfc": {"enabled": True}, "ecn": {"enabled": False}},
            "dcqcn": {"enabled": False}, "endpoints": endpoints, "traffic": traffic,
            "limits": {"wall_s": 40}, **extra}
    exp = experiment_from_dict(data, REPO / "experiments" / "tenancy-test.yaml", target="embedded")
    exp = resolve_time(exp, "embedded")
    assert exp.time_mode == VIRTUAL
    return run_experiment(exp, tmp_path, plots=False)


def _agent(tmp_path, host) -> dict:
    return json.loads((tmp_path / "run" / f"{host}.result.json").read_text())


def test_tenant_isolation_drops_every_foreign_packet_and_none_of_the_own(tmp_path):
    size = 262144
    traffic = [{"src": "s1n0", "dst": "s2n0", "size_bytes": size},          # blue
               {"src": "s3n0", "dst": "s4n0", "size_bytes": size},          # red
               {"src": "s3n0", "dst": "s1n0", "size_bytes": 16384, "expect": "dropped"},
               {"src": "s2n0", "dst": "s4n0", "size_bytes": 16384, "expect": "dropped"}]
    # retry_cnt 2: the foreign QPs give up after 3 rounds instead of 8
    s = _run(tmp_path, traffic, {"host_cpu": {"cores": 1}}, nic={"retry_cnt": 2})
    own = [f for f in s["flows"] if f["expect"] == "delivered"]
    foreign = [f for f in s["flows"] if f["expect"] == "dropped"]
    assert all(f["complete"] and f["intact"] and f["delivered_bytes"] == size for f in own), own
    assert s["complete"] and s["isolation"]["isolated"], s["isolation"]
    # Independently of the summary: what the foreign QPs put on the wire,
    # from the senders' result files, against the receivers' drop counters.
    sent = {f["dst"]: next(x["tx_packets"] for x in _agent(tmp_path, f["src"])["send"]
                           if x["flow_id"] == f["flow_id"]) for f in foreign}
    assert sent["s1n0"] >= 16 and sent["s4n0"] >= 16            # at least one full round each
    for host in ("s1n0", "s2n0", "s3n0", "s4n0"):
        r = _agent(tmp_path, host)
        assert r["endpoint"]["tenant_drops"] == sent.get(host, 0), (host, r["endpoint"])
        assert r["endpoint"]["pkey"] == 0x8000 | (1 if host in ("s1n0", "s2n0") else 2)
    for f in foreign:                                # nothing acked, nothing placed
        snd = next(x for x in _agent(tmp_path, f["src"])["send"] if x["flow_id"] == f["flow_id"])
        assert snd["status"] == "RETRY_EXC_ERR" and snd["acked_bytes"] == 0
        assert f["delivered_bytes"] == 0 and not f["complete"]
    assert s["tenants"]["blue"]["complete"] == s["tenants"]["red"]["complete"] == 1
    assert (tmp_path / "hosts.csv").read_text().count("\n") == 1 + 4


def test_dpu_host_outdrives_a_cpu_bound_plain_nic_host(tmp_path):
    size = 131072                                    # 128 packets per flow
    traffic = [{"src": "s1n0", "dst": "s2n0", "size_bytes": size},          # blue: DPUs
               {"src": "s3n0", "dst": "s4n0", "size_bytes": size}]          # red: plain NICs
    cost_ns = 300 + 800                              # firewall + crypto, fabric ns per packet
    s = _run(tmp_path, traffic, {"host_cpu": {"cores": 1, "firewall_ns_per_packet": 300,
                                              "crypto_ns_per_packet": 800}},
             # ACKs come every 16 packets of 1.1 us: keep the RTO above that
             nic={"rto_us": 60})
    assert s["complete"], [f for f in s["flows"] if not f["complete"]]
    h = {x["host"]: x for x in s["hosts"]}
    blue, red = h["s1n0"], h["s3n0"]
    cpu_cap_gbps = size * 8 / (size // 1024 * cost_ns)     # one core, 1.1 us per packet
    print(f"\nblue (DPU) {blue['goodput_gbps']} Gbps host busy {blue['host_cpu_busy_active']}; "
          f"red (plain) {red['goodput_gbps']} Gbps busy {red['host_cpu_busy_active']} "
          f"(CPU bound {cpu_cap_gbps:.2f} Gbps); receiver {h['s4n0']['host_cpu_busy_active']}")
    assert blue["goodput_gbps"] >= 4 * red["goodput_gbps"]
    assert blue["goodput_gbps"] >= 30                       # a large part of 100 Gbps
    assert 0.6 * cpu_cap_gbps <= red["goodput_gbps"] <= 1.05 * cpu_cap_gbps
    assert red["host_cpu_busy_active"] >= 0.85 and h["s4n0"]["host_cpu_busy_active"] >= 0.85
    assert blue["host_cpu_busy"] == 0 and h["s2n0"]["host_cpu_busy"] == 0
    assert blue["dpu"] and not red["dpu"]
    # the plain host's CPU did every packet's work, sent and received
    assert _agent(tmp_path, "s3n0")["endpoint"]["host_cpu"]["packets"] >= size // 1024
    assert (tmp_path / "summary.json").exists()
