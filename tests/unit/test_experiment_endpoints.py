"""The experiment file's ``endpoints:`` section: validation (one-line errors),
resolution (topology tenants/DPUs, overrides, dilation into agent configs),
flows into another tenant, and the per-host results in summary.json."""
from __future__ import annotations

import copy
import pytest

from emulator.experiment.dilation import with_dilation
from emulator.errors import ConfigError
from emulator.experiment.agents import agent_configs
from emulator.experiment.endpoint_results import add_endpoint_results, write_hosts_csv
from emulator.experiment.endpoints import flow_expect, host_params, tenant_numbers
from emulator.experiment.model import experiment_from_dict, load_experiment
from emulator.nic.wall import cpu_params, nic_wall
from emulator.schema.agent import ENDPOINT_KEYS
from tests.conftest import REPO
from tests.summaries import run_summary

FILE = REPO / "experiments" / "x.yaml"
TOPO = {"name": "tenants-4x1",
        "servers": {"count": 4, "gpus_per_server": 1, "nic_link": {"rate_gbps": 100, "delay_us": 1},
                    "tenants": [{"name": "blue", "count": 2, "dpu": True}, {"name": "red", "count": 2}]},
        "clos": {"spines": 1, "leaves": 1, "fabric_link": {"rate_gbps": 100, "delay_us": 1}}}
COSTS = {"cores": 1, "firewall_ns_per_packet": 300, "crypto_ns_per_packet": 800}


def exp_data(**over):
    d = {"name": "t", "topology": copy.deepcopy(TOPO), "dilation": 1000,
         "endpoints": {"host_cpu": dict(COSTS)},
         "traffic": [{"src": "s1n0", "dst": "s2n0", "size_bytes": 4096},
                     {"src": "s3n0", "dst": "s4n0", "size_bytes": 4096},
                     {"src": "s3n0", "dst": "s1n0", "size_bytes": 2048, "expect": "dropped"}]}
    d.update(over)
    return d


def load(**over):
    return experiment_from_dict(exp_data(**over), FILE)


def test_without_endpoints_agent_configs_are_as_before(tmp_path):
    exp = with_dilation(load_experiment(REPO / "experiments" / "demo.yaml"), 10000)   # file: auto
    assert exp.spec.endpoints is None
    for cfg in agent_configs(exp, tmp_path, 0).values():
        assert all(getattr(cfg, k) is None for k in ENDPOINT_KEYS + ("gpudirect",))
        assert not cfg.is_endpoint()
        assert len(cfg.expect) == 3 and len(cfg.send) == 3    # every flow, both ends


def test_tenants_dpus_costs_and_dilation_reach_the_agents(tmp_path):
    exp = load(endpoints={"host_cpu": COSTS, "gpudirect": False,
                          "staging": {"rate_gbps": 200, "latency_us": 5}})
    assert tenant_numbers(exp.fabric) == {"blue": 1, "red": 2}
    cfg = agent_configs(exp, tmp_path, 0)
    assert (cfg["s1n0"].tenant, cfg["s1n0"].dpu) == (1, True)
    assert (cfg["s4n0"].tenant, cfg["s4n0"].dpu) == (2, False)
    hc = cfg["s3n0"].host_cpu                        # fabric ns: the NIC dilates them
    assert hc.firewall_ns_per_packet == 300 and hc.crypto_ns_per_packet == 800
    assert hc.cores == 1 and cfg["s3n0"].dpu_cpu.crypto_ns_per_packet == 0
    wall = cpu_params(hc, cfg["s3n0"].dilation)     # x D = 1000 on the NIC's clock
    assert wall.firewall_ns_per_packet == 300_000 and wall.crypto_ns_per_packet == 800_000
    assert cfg["s2n0"].staging_rate_bps == 200e9 / 1000
    assert cfg["s2n0"].staging_latency_ns == 5_000 * 1000 and cfg["s2n0"].gpudirect is False


def test_rto_is_fabric_time_whatever_the_dilation(tmp_path):
    from emulator.schema.nic import DEFAULT_RTO_FABRIC_NS
    cfg = agent_configs(load(nic={"rto_us": 100}), tmp_path, 0)
    assert {c.rto_ns for c in cfg.values()} == {100 * 1000}              # fabric ns
    assert {nic_wall(c).rto_ns for c in cfg.values()} == {100 * 1000 * 1000}   # x D = 1000
    for d in (1, 1000, 20000):        # the default: 320 us of fabric time at any D
        cfg = agent_configs(load(dilation=d), tmp_path, 0)
        assert {(nic_wall(c).rto_ns / d, c.dilation) for c in cfg.values()} == \
            {(DEFAULT_RTO_FABRIC_NS, d)}
    with pytest.raises(ConfigError, match="nic.rto_us"):
        load(nic={"rto_us": 0})


def test_overrides_apply_in_order_key_by_key():
    exp = load(endpoints={"host_cpu": COSTS, "overrides": [
        {"tenants": ["red"], "host_cpu": {"cores": 4}},
        {"servers": ["server4"], "host_cpu": {"crypto_ns_per_packet": 50}},
        {"hosts": ["s4n0"], "host_cpu": {"cores": 2}, "gpudirect": True}]})
    p3, p4 = host_params(exp, "s3n0"), host_params(exp, "s4n0")
    assert (p3["host_cpu"].cores, p3["host_cpu"].crypto_ns_per_packet) == (4, 800)
    assert (p4["host_cpu"].cores, p4["host_cpu"].crypto_ns_per_packet) == (2, 50)
    assert p4["host_cpu"].firewall_ns_per_packet == 300 and p4["gpudirect"] is True
    assert host_params(exp, "s1n0")["host_cpu"].cores == 1 and p3["gpudirect"] is None


def test_a_flow_into_another_tenant_targets_a_real_qp_and_expects_nothing(tmp_path):
    exp = load()
    assert [flow_expect(exp, f) for f in exp.flows] == ["delivered", "delivered", "dropped"]
    cfg = agent_configs(exp, tmp_path, 0)
    foreign = exp.flows[2]
    assert cfg["s1n0"].expect == []                  # the receiver expects nothing of it
    assert [e.flow_id for e in cfg["s2n0"].expect] == [0]
    assert foreign.dst_qpn in [q.qpn for q in cfg["s1n0"].qps]
    send = next(s for s in cfg["s3n0"].send if s.flow_id == foreign.flow_id)
    assert send.remote_addr == 0 and send.rkey == cfg["s1n0"].mr_rkey
    # without tenancy the same pair is an ordinary flow again
    plain = load(endpoints={"tenancy": False}, traffic=exp_data()["traffic"][:2]
                 + [{"src": "s3n0", "dst": "s1n0", "size_bytes": 2048}])
    assert flow_expect(plain, plain.flows[2]) == "delivered"
    assert agent_configs(plain, tmp_path, 0)["s1n0"].tenant is None


@pytest.mark.parametrize("over, field, words", [
    ({"endpoints": {"host_cpu": {"cores": 0}}}, "endpoints.host_cpu.cores", ">= 1"),
    ({"endpoints": {"host_cpu": {"crypto_ns_per_packet": -1}}},
     "endpoints.host_cpu.crypto_ns_per_packet", ">= 0"),
    ({"endpoints": {"host_cpu": {"bogus": 1}}}, "endpoints.host_cpu.bogus", "unknown field"),
    ({"endpoints": {"dpu": True}}, "endpoints.dpu", "unknown field"),
    ({"endpoints": {"overrides": [{"servers": ["server1"], "tenants": ["red"]}]}},
     "endpoints.overrides[0]", "exactly one"),
    ({"endpoints": {"overrides": [{"servers": ["server9"]}]}},
     "endpoints.overrides[0].servers[0]", "not a server"),
    ({"endpoints": {"overrides": [{"tenants": ["green"]}]}},
     "endpoints.overrides[0].tenants[0]", "not a tenant"),
    ({"traffic": [{"src": "s1n0", "dst": "s3n0", "size_bytes": 1}]}, "traffic[0].expect",
     "crosses tenants"),
    ({"traffic": [{"src": "s1n0", "dst": "s2n0", "size_bytes": 1, "expect": "dropped"}]},
     "traffic[0].expect", "would be delivered"),
    ({"traffic": [{"pattern": "all-to-all", "size_bytes": 1, "expect": "dropped"}]},
     "traffic[0].expect", "pattern"),
    ({"traffic": [{"src": "s1n0", "dst": "s2n0", "size_bytes": 1, "expect": "lost"}]},
     "traffic[0].expect", "delivered or dropped"),
])
def test_bad_endpoints_and_expectations_are_one_line_errors(over, field, words):
    with pytest.raises(ConfigError) as e:
        load(**over)
    assert e.value.field == field and words in e.value.reason, str(e.value)
    assert str(e.value).startswith(f"{FILE}: {field}: ") and "\n" not in str(e.value)


def test_expect_dropped_needs_tenancy():
    with pytest.raises(ConfigError, match="would be delivered"):
        experiment_from_dict({**exp_data(), "endpoints": None}, FILE)


def test_a_tenant_talking_to_a_tenantless_storage_server_is_refused():
    data = exp_data(topology="../topologies/rail-4x2-dpu.yaml",      # relative to FILE
                    traffic=[{"src": "s1dpu", "dst": "st1n0", "size_bytes": 1}])
    with pytest.raises(ConfigError, match="other in none"):
        experiment_from_dict(data, FILE)


def _results(exp, *, foreign_tx=5, drops_at_s1n0=5, foreign_acked=0):
    """Agent result files as host.py writes them (only the keys used)."""
    ok = {"complete": True, "post_unix_ns": 1_000, "complete_unix_ns": 41_000, "acked_bytes": 4096}
    res = {h.name: {"start_at_unix_ns": 1_000, "send": [], "expect": [],
                    "nic": {"tx_bytes": 0, "rx_bytes": 0},
                    "endpoint": {"tenant_drops": 0, "cpu_rx_drops": 0,
                                 "host_cpu": {"cores": 1, "busy_ns": 0, "busy_fraction": 0.0},
                                 "dpu_cpu": None}} for h in exp.fabric.hosts()}
    for f in exp.flows[:2]:
        res[f.src]["send"].append({"flow_id": f.flow_id, "bytes": 4096, "tx_packets": 4, **ok})
        res[f.dst]["expect"].append({"flow_id": f.flow_id, "bytes": 4096, "delivered_bytes": 4096,
                                     "intact": True, "complete": True, "complete_unix_ns": 40_000})
    res["s3n0"]["endpoint"]["host_cpu"] = {"cores": 1, "busy_ns": 39_000, "busy_fraction": 0.5}
    res["s3n0"]["send"].append({"flow_id": 2, "bytes": 2048, "complete": False, "tx_packets": foreign_tx,
                                "acked_bytes": foreign_acked, "post_unix_ns": 1_000})
    res["s1n0"]["endpoint"]["tenant_drops"] = drops_at_s1n0
    return res


def _summary(exp, res):
    flows = []
    for f in exp.flows:
        r = next((e for x in res.values() for e in x["expect"] if e["flow_id"] == f.flow_id), {})
        flows.append({"flow_id": f.flow_id, "src": f.src, "dst": f.dst, "bytes": f.size_bytes,
                      "delivered_bytes": r.get("delivered_bytes", 0), "complete": bool(r),
                      "fct_ns": 40 if r else None})
    return run_summary(complete=all(x["complete"] for x in flows), flows=flows)


def test_summary_counts_foreign_packets_against_tenant_drops(tmp_path):
    exp = load()
    summary = _summary(exp, res := _results(exp))
    add_endpoint_results(exp, res, summary)
    s = summary.as_dict()
    assert s["complete"] is True                     # the dropped flow does not fail the run
    assert s["isolation"] == {"foreign_flows": 1, "foreign_tx_packets": 5, "tenant_drops": 5,
                              "foreign_acked_bytes": 0, "isolated": True}
    h = {x["host"]: x for x in s["hosts"]}
    assert h["s1n0"]["foreign_tx_packets_to_host"] == 5 and h["s1n0"]["dpu"] is True
    assert h["s3n0"]["host_cpu_busy_active"] == pytest.approx(39_000 / 40_000)
    assert h["s1n0"]["goodput_gbps"] == pytest.approx(4096 * 8 / 40)   # D = 1000: 40 ns fabric
    assert s["tenants"]["blue"]["dpu"] and not s["tenants"]["red"]["dpu"]
    assert [f["expect"] for f in s["flows"]] == ["delivered", "delivered", "dropped"]
    from emulator.rundir import RunDir
    written = write_hosts_csv(RunDir(tmp_path), summary)
    rows = (tmp_path / "hosts.csv").read_text() if written else ""
    assert rows.splitlines()[0].startswith("host,server,tenant,dpu,tx_bytes,rx_bytes,tenant_drops")
    assert len(rows.splitlines()) == 1 + len(exp.fabric.hosts())


@pytest.mark.parametrize("kw", [{"drops_at_s1n0": 4},          # one foreign packet got through
                                {"drops_at_s1n0": 6},          # one of the tenant's own dropped
                                {"foreign_acked": 1024}])      # the foreign flow was acked
def test_summary_says_not_isolated_when_anything_leaks(kw):
    exp = load()
    s = _summary(exp, res := _results(exp, **kw))
    add_endpoint_results(exp, res, s)
    assert s.isolation["isolated"] is False and s.complete is False


def test_summary_without_endpoints_is_unchanged():
    exp = load_experiment(REPO / "experiments" / "demo.yaml")
    s = run_summary()
    add_endpoint_results(exp, {}, s)
    assert s.as_dict() == run_summary().as_dict()
