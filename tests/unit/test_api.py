"""The Python API without a fabric: loading and building experiments, a
Result's accessors on a summary, and a sweep's grid and CSV (runs replaced)."""
from __future__ import annotations

import csv

import pytest

import emulator as fe
from emulator import api
from emulator.errors import ConfigError
from tests.conftest import REPO

DEMO = REPO / "experiments" / "demo.yaml"


def test_names_load_on_first_use():
    assert {"load_experiment", "build_experiment", "run", "sweep", "Result", "Fabric"} <= set(fe.__all__)
    with pytest.raises(AttributeError):
        fe.nothing_here


def test_load_with_overrides_checked_like_the_file():
    exp = fe.load_experiment(DEMO, set={"nic.mtu_bytes": 4096, "traffic[0].size_bytes": 65536})
    assert exp.spec.nic.mtu_bytes == 4096 and {f.size_bytes for f in exp.flows} == {65536}
    assert fe.load_experiment(DEMO, set=["nic.mtu_bytes=2048"]).spec.nic.mtu_bytes == 2048
    with pytest.raises(ConfigError, match="nic.mtu_bytes: must be one of"):
        fe.load_experiment(DEMO, set={"nic.mtu_bytes": 1000})


def test_build_from_a_dict_with_a_topology_path_or_dict():
    exp = fe.build_experiment({"name": "mine", "topology": "topologies/clos-2x2.yaml",
                               "traffic": [{"src": "h1", "dst": "h4", "size_bytes": 4096}]},
                              base_dir=REPO)
    assert exp.name == "mine" and [(f.src, f.dst) for f in exp.flows] == [("h1", "h4")]
    link = {"rate_gbps": 100, "delay_us": 1}
    inline = fe.build_experiment({"name": "x", "topology": {"name": "t", "clos": {
        "spines": 1, "leaves": 2, "hosts_per_leaf": 1, "host_link": link, "fabric_link": link}},
        "traffic": [{"src": "h1", "dst": "h2", "size_bytes": 4096}]})
    assert len(inline.fabric.switches()) == 3
    with pytest.raises(ConfigError, match=r"traffic\[0\].dst"):
        fe.build_experiment({"name": "x", "topology": "topologies/clos-2x2.yaml",
                             "traffic": [{"src": "h1", "dst": "h9", "size_bytes": 1}]},
                            base_dir=REPO)


def _summary(fcts_ns=(100_000, 300_000, 200_000), drops3=0, pauses=(4, 1)):
    prio = lambda p, **kw: {"priority": p, "drops": 0, "pause_tx": 0, "ecn_marks": 0,  # noqa: E731
                            "max_depth_bytes": 0, **kw}
    return {
        "experiment": "e", "complete": True, "fell_behind": False, "dilation": 4000.0,
        "lossless_priorities": [3],
        "flows": [{"flow_id": i, "src": "h2", "dst": "h1", "bytes": 10, "delivered_bytes": 10,
                   "complete": True, "fct_ns": f, "retransmitted_packets": i, "timeouts": 0,
                   "naks": 0} for i, f in enumerate(fcts_ns)],
        "ports": [{"node": "leaf1", "priorities": [prio(3, drops=drops3, pause_tx=pauses[0],
                                                        max_depth_bytes=9000),
                                                   prio(0, drops=5, ecn_marks=2)]},
                  {"node": "spine1", "priorities": [prio(3, pause_tx=pauses[1])]}],
        "collectives": {"results": [{"collective": "all_reduce", "size_bytes": 1024, "busbw_GBps": 3.0},
                                    {"collective": "all_reduce", "size_bytes": 4096, "busbw_GBps": 9.5}]},
    }


def test_result_accessors():
    r = fe.Result(_summary(drops3=2))
    assert r.fct_us(50) == 200.0 and r.fct_us(100) == 300.0 and r.fct_us(1) == 100.0
    assert r.retransmissions() == 3 and r.timeouts() == 0
    assert r.lossless_drops() == 2 and r.drops() == 7 and r.drops(priority=0) == 5
    assert r.pauses() == 5 and r.pauses(node="leaf1") == 4 and r.ecn_marks() == 2
    assert r.max_queue_bytes() == 9000
    assert r.busbw_GBps() == 9.5 and r.busbw_GBps(size_bytes=1024) == 3.0
    assert r.busbw_GBps("all_gather") is None
    no_pfc = fe.Result({**_summary(drops3=2), "lossless_priorities": []})
    assert no_pfc.lossless_drops() == 0                    # nothing is lossless without PFC


def test_sweep_runs_the_product_and_writes_one_csv(tmp_path, monkeypatch):
    seen = []

    def fake_run(exp, out, **kw):
        seen.append((exp.spec.nic.mtu_bytes, exp.spec.qos.ecn.kmin_bytes, out.name))
        return fe.Result(_summary(fcts_ns=(exp.spec.nic.mtu_bytes * 1000,)), out)

    monkeypatch.setattr(api, "run", fake_run)
    rows = fe.sweep(fe.load_experiment(DEMO), {"nic.mtu_bytes": [1024, 4096],
                                                "qos.ecn.kmin_bytes": [5000, 20000]},
                    out=tmp_path)
    assert [s[:2] for s in seen] == [(1024, 5000), (1024, 20000), (4096, 5000), (4096, 20000)]
    assert seen[1][2] == "nic.mtu_bytes=1024,qos.ecn.kmin_bytes=20000"
    with open(tmp_path / "sweep.csv") as f:
        table = list(csv.DictReader(f))
    assert [(t["nic.mtu_bytes"], t["fct_p50_us"]) for t in table] == [
        ("1024", "1024.0"), ("1024", "1024.0"), ("4096", "4096.0"), ("4096", "4096.0")]
    assert isinstance(rows[0]["result"], fe.Result)


def test_sweep_refuses_a_directory_of_someone_elses_unless_forced(tmp_path, monkeypatch):
    from emulator.errors import OutputError
    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.setattr(api, "run", lambda exp, out, **kw: fe.Result(_summary(), out))
    grid = {"nic.mtu_bytes": [1024]}
    with pytest.raises(OutputError, match="notes.txt.*force=True"):
        fe.sweep(fe.load_experiment(DEMO), grid, out=tmp_path)
    rows = fe.sweep(fe.load_experiment(DEMO), grid, out=tmp_path, force=True)
    assert len(rows) == 1 and (tmp_path / "notes.txt").read_text() == "mine"
    assert (tmp_path / "sweep.csv").exists()


def test_a_live_fabric_refuses_an_out_of_someone_elses_before_anything_is_built(tmp_path,
                                                                               monkeypatch):
    import emulator.experiment.runner as runner
    from emulator.errors import OutputError
    (tmp_path / "notes.txt").write_text("mine")
    built = []
    monkeypatch.setattr(runner, "fabric_net", lambda *a, **k: built.append(a))
    with pytest.raises(OutputError, match="notes.txt.*force=True"):
        with fe.Fabric(DEMO, target="embedded", dilation=1000, out=tmp_path):
            pass
    assert built == [] and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
