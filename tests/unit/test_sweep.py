"""Parameter sweeps: expansion into experiments, sweep.csv, sweep.png."""
from __future__ import annotations

import csv

import pytest
import yaml
from matplotlib.image import imread

from emulator.errors import ConfigError
from emulator.experiment.sweep import (
    SWEEP_COLUMNS,
    has_sweep,
    path_tokens,
    run_summary_paths,
    run_sweep,
    set_path,
    summary_metrics,
)
from tests.unit.test_results import REPO

TOPO = str(REPO / "topologies" / "clos-2x2.yaml")


def write_exp(tmp_path, sweep, **extra):
    data = {"name": "sw", "topology": TOPO, "dilation": 1000,
            "traffic": [{"src": "h1", "dst": "h3", "size_bytes": 100000},
                        {"src": "h2", "dst": "h3", "size_bytes": 100000}],
            "sweep": sweep, **extra}
    path = tmp_path / "sw.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def canned_summary(k: int) -> dict:
    """A summary whose metrics grow with k."""
    return {
        "complete": k < 3, "fell_behind": False, "fabric_ns": 100_000 * k,
        "flows": [
            {"complete": True, "fct_ns": 10_000 * k, "fct_slowdown": 1.0 * k},
            {"complete": True, "fct_ns": 30_000 * k, "fct_slowdown": 3.0 * k},
            {"complete": k < 3, "fct_ns": 20_000 * k if k < 3 else None,
             "fct_slowdown": 2.0 * k if k < 3 else None},
        ],
        "ports": [
            {"drops": k, "priorities": [
                {"priority": 3, "ecn_marks": 10 * k, "pause_tx": k, "paused_ns": 500 * k,
                 "headroom_drops": 0, "max_depth_bytes": 1000 * k},
                {"priority": 6, "ecn_marks": 0, "pause_tx": 0, "paused_ns": 0,
                 "headroom_drops": 0, "max_depth_bytes": 100}]},
            {"drops": 0, "priorities": [
                {"priority": 3, "ecn_marks": 1, "pause_tx": 0, "paused_ns": 0,
                 "headroom_drops": 0, "max_depth_bytes": 500}]},
        ],
    }


def test_path_tokens_and_set_path():
    assert path_tokens("qos.ecn.kmax_bytes") == ["qos", "ecn", "kmax_bytes"]
    assert path_tokens("traffic[1].size_bytes") == ["traffic", 1, "size_bytes"]
    assert path_tokens("traffic.1.size_bytes") == ["traffic", 1, "size_bytes"]
    data = {"traffic": [{"size_bytes": 1}, {"size_bytes": 2}]}
    out = set_path(data, "traffic[1].size_bytes", 7)
    assert out == {"traffic": [{"size_bytes": 1}, {"size_bytes": 7}]}
    assert data["traffic"][1]["size_bytes"] == 2                  # the input is not modified
    assert set_path({}, "qos.ecn.kmax_bytes", 5) == {"qos": {"ecn": {"kmax_bytes": 5}}}
    with pytest.raises(KeyError):
        set_path(data, "traffic[5].size_bytes", 1)


def test_sweep_expands_and_runs_each_value(tmp_path):
    path = write_exp(tmp_path, {"parameter": "qos.ecn.kmax_bytes", "values": [20000, 60000, 200000]})
    assert has_sweep(path)
    seen = []

    def run_one(exp, out):
        seen.append((exp.spec.qos.ecn.kmax_bytes, out.name, exp.spec.sweep))
        return canned_summary(len(seen))

    rows = run_sweep(path, tmp_path / "out", run_one)
    assert seen == [(20000, "qos.ecn.kmax_bytes=20000", None),
                    (60000, "qos.ecn.kmax_bytes=60000", None),
                    (200000, "qos.ecn.kmax_bytes=200000", None)]
    assert [r["value"] for r in rows] == [20000, 60000, 200000]

    with (tmp_path / "out" / "sweep.csv").open() as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames) == SWEEP_COLUMNS
        table = list(reader)
    assert len(table) == 3
    r1, r3 = table[0], table[2]
    assert r1["value"] == "20000" and r1["run_dir"] == "qos.ecn.kmax_bytes=20000"
    assert (r1["flows"], r1["completed_flows"], r1["complete"]) == ("3", "3", "true")
    assert float(r1["fct_mean_us"]) == 20.0                    # (10 + 20 + 30) / 3 µs
    assert float(r1["fct_p50_us"]) == 20.0 and float(r1["fct_p99_us"]) == 30.0
    assert float(r1["slowdown_mean"]) == 2.0
    assert r1["ecn_marks"] == "11" and r1["pauses"] == "1" and r1["drops"] == "1"
    assert float(r1["paused_us"]) == 0.5 and r1["max_queue_bytes"] == "1000"
    assert float(r1["fabric_us"]) == 100.0
    # third run: one flow incomplete, stats over the 2 completed
    assert (r3["completed_flows"], r3["complete"]) == ("2", "false")
    assert float(r3["fct_mean_us"]) == 60.0 and float(r3["fct_p50_us"]) == 30.0
    assert float(r3["fct_p99_us"]) == 90.0 and r3["max_queue_bytes"] == "3000"

    img = imread(tmp_path / "out" / "sweep.png")
    assert img.shape[0] > 300 and img.std() > 0.01


def test_sweep_over_a_list_item_and_non_numeric_values(tmp_path):
    path = write_exp(tmp_path, {"parameter": "traffic[0].op", "values": ["write", "send"]})
    ops = []
    rows = run_sweep(path, tmp_path / "out",
                     lambda exp, out: ops.append((exp.flows[0].op, exp.flows[1].op, out.name))
                     or canned_summary(1))
    assert ops == [("write", "write", "traffic[0].op=write"), ("send", "write", "traffic[0].op=send")]
    assert len(rows) == 2 and (tmp_path / "out" / "sweep.png").exists()


def test_every_value_is_validated_before_the_first_run(tmp_path):
    path = write_exp(tmp_path, {"parameter": "switch.buffer_bytes", "values": [100000, -5]})
    calls = []
    with pytest.raises(ConfigError) as e:
        run_sweep(path, tmp_path / "out", lambda exp, out: calls.append(1) or canned_summary(1))
    assert calls == [] and e.value.field == "sweep.values[1]"
    assert "switch.buffer_bytes=-5" in e.value.reason


@pytest.mark.parametrize("sweep,field", [
    ({"parameter": "qos.ecn.kmax_bytes", "values": []}, "sweep.values"),
    ({"parameter": "", "values": [1]}, "sweep.parameter"),
    ({"parameter": "name", "values": ["a"]}, "sweep.parameter"),
    ({"parameter": "traffic[9].size_bytes", "values": [1]}, "sweep.parameter"),
    ({"parameter": "qos.ecn.kmax_bytes", "values": [1], "extra": 1}, "sweep.extra"),
    ({"parameter": "qos.nonsense", "values": [1]}, "sweep.parameter"),        # no such parameter
    ({"parameter": "qos.ecn.nonsense", "values": [1]}, "sweep.parameter"),
    ({"parameter": "qos.ecn.kmax_bytes", "values": [20000, "lots"]}, "sweep.values[1]"),
])
def test_bad_sweeps(tmp_path, sweep, field):
    path = write_exp(tmp_path, sweep)
    with pytest.raises(ConfigError) as e:
        run_sweep(path, tmp_path / "out", lambda exp, out: canned_summary(1))
    assert e.value.field == field


def test_a_failing_run_keeps_the_rows_so_far(tmp_path):
    path = write_exp(tmp_path, {"parameter": "dilation", "values": [1000, 2000, 3000]})
    n = []

    def run_one(exp, out):
        n.append(exp.dilation)
        if len(n) == 2:
            raise RuntimeError("boom")
        return canned_summary(1)

    with pytest.raises(RuntimeError):
        run_sweep(path, tmp_path / "out", run_one)
    rows = list(csv.DictReader((tmp_path / "out" / "sweep.csv").open()))
    assert [r["value"] for r in rows] == ["1000"]


def test_metrics_without_per_priority_counters():
    m = summary_metrics({"flows": [], "ports": [{"drops": 2}], "fabric_ns": 0})
    assert m["completed_flows"] == 0 and m["fct_mean_us"] is None
    assert m["ecn_marks"] is None and m["max_queue_bytes"] is None and m["drops"] == 2


def test_the_summaries_a_run_kept_are_its_own_or_its_points_in_the_order_run(tmp_path):
    # values out of name order: the points' summaries come in the order run
    path = write_exp(tmp_path, {"parameter": "dilation", "values": [3000, 1000, 2000]})
    out = tmp_path / "out"

    def run_one(exp, run_dir):
        run_dir.mkdir(parents=True)
        (run_dir / "summary.json").write_text("{}")
        # a calibration and a run set aside lie beside the kept one
        for aside in ("calibration/D=500", "fell-behind-D500"):
            (run_dir / aside).mkdir(parents=True)
            (run_dir / aside / "summary.json").write_text("{}")
        return canned_summary(1)

    run_sweep(path, out, run_one)
    assert [p.parent.name for p in run_summary_paths(out)] == \
        ["dilation=3000", "dilation=1000", "dilation=2000"]
    (out / "dilation=1000" / "summary.json").unlink()             # a point that left none
    assert len(run_summary_paths(out)) == 2
    one = out / "dilation=2000"
    assert run_summary_paths(one) == [one / "summary.json"]
    assert run_summary_paths(tmp_path / "nothing") == []
