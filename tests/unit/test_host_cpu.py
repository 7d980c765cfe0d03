"""The CPU model on its own, and the host agent's endpoint config keys
(dpu, tenant, host_cpu, gpudirect) end to end over veth."""
from __future__ import annotations

import json
import subprocess

import pytest

from pydantic import ValidationError

from emulator.nic.host_cpu import CpuServers
from emulator.nic.wall import cpu_params
from emulator.schema.nic import HostCpuConfig
from emulator.errors import ConfigError
from emulator.schema.agent import HostAgentConfig

from .test_nic_loopback import PY, QPN, ROOT, config, needs_root, run_pair, veth  # noqa: F401


def test_cpu_servers_are_a_fcfs_queue():
    c = CpuServers(cores=2)
    c.reset(0)
    assert c.admit(0, 10) == 10 and c.admit(0, 10) == 10      # two cores in parallel
    assert c.admit(5, 10) == 20                                 # waits for a core
    assert c.admit(100, 1) == 101                               # idle cores start at arrival
    assert c.busy_ns == 31 and c.busy_fraction(101) == pytest.approx(31 / 202)
    p = cpu_params(HostCpuConfig(crypto_ns_per_packet=100, cores=4), 10)
    assert p.crypto_ns_per_packet == 1000 and p.cores == 4 and p.any_cost()
    assert not cpu_params(HostCpuConfig(), 10).any_cost()
    for bad in ({"cores": 0}, {"firewall_ns_per_packet": -1}, {"bogus": 1}):
        with pytest.raises(ValidationError):
            HostCpuConfig(**bad)


@pytest.mark.parametrize("extra", [{"tenant": 0}, {"dpu": 1}, {"host_cpu": {"cores": 0}},
                                   {"staging_rate_bps": 0}, {"storage_qpns": [99]}])
def test_agent_rejects_bad_endpoint_keys(tmp_path, extra):
    cfg = {"host": "h", "ifname": "x", "mac": "02:00:00:00:00:01", "ip": "10.0.0.1",
           "gateway_mac": "02:00:00:00:00:02", "result_path": str(tmp_path / "r.json"),
           "qps": [{"qpn": 16, "remote_ip": "10.0.0.2", "remote_qpn": 32}], **extra}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError):
        HostAgentConfig.load(path)


@needs_root
def test_agents_report_cpu_busy_tenant_and_staging(veth):  # noqa: F811
    rate = 20_000_000
    size = 128 * 1024                                 # 128 packets
    cost_ns = 1_000_000                               # 1 ms of crypto per packet: 128 ms
    a = config(veth, "a", rate,
               send=[{"flow_id": 3, "qpn": QPN["a"], "op": "write", "size_bytes": size,
                      "rkey": 0x1234, "remote_addr": 0}],
               tenant=5, host_cpu={"crypto_ns_per_packet": cost_ns},
               gpudirect=False, staging_rate_bps=1e9, staging_latency_ns=5_000_000)
    b = config(veth, "b", rate,
               expect=[{"flow_id": 3, "qpn": QPN["b"], "op": "write", "size_bytes": size}],
               tenant=5, dpu=True, host_cpu={"crypto_ns_per_packet": cost_ns})
    res, out = run_pair(veth, a, b)
    ra, rb = res["a"], res["b"]
    assert ra["complete"] and rb["complete"] and rb["expect"][0]["intact"], out
    ea, eb = ra["endpoint"], rb["endpoint"]
    assert ea["pkey"] == eb["pkey"] == 0x8005 and ea["tenant_drops"] == eb["tenant_drops"] == 0
    # every data packet sent costs its crypto, a resend too (this pair runs on the
    # wall clock: a starved agent's ACK timeouts resend); 128 at least
    sent = ra["send"][0]["tx_packets"]
    assert sent >= size // 1024
    assert ea["host_cpu"]["busy_ns"] == pytest.approx(sent * cost_ns, rel=0.01)
    assert 0 < ea["host_cpu"]["busy_fraction"] < 1
    assert eb["host_cpu"]["busy_ns"] == 0 and eb["dpu"] is True
    # the plain host's CPU, not the link (6.5 ms of frames), set the pace
    assert ra["send"][0]["fct_ns"] >= size // 1024 * cost_ns + 5_000_000
    assert ra["gpudirect"] == {"enabled": False, "staging_rate_bps": 1e9,
                               "staging_latency_ns": 5e6, "staged_bytes": size}
    assert rb["gpudirect"] is None and "endpoint" in rb
    # no endpoint keys: no endpoint section, as before
    assert json.loads(json.dumps(ra["nic"]))["tenant_drops"] == 0
