"""The comparison of runs (``emulator/experiment/compare.py``) on summaries
shaped as runs write them: a RoCE run held by PFC pauses, an InfiniBand
run held by credit stalls, the same flows."""
from __future__ import annotations

import csv
import json
from pathlib import Path

from emulator.atomic import atomic_write_text
from emulator.experiment.compare import percentile, row, victims, write_comparison
from emulator.topo import load_fabric
from tests.conftest import REPO


def flow(i, src, dst, fct_ns, ideal_ns, retx=0):
    return {"flow_id": i, "src": src, "dst": dst, "bytes": 1 << 20, "fct_ns": fct_ns,
            "standalone_fct_ns": ideal_ns, "fct_slowdown": round(fct_ns / ideal_ns, 4),
            "complete": True, "retransmitted_packets": retx}


def roce_run():
    return {"experiment": "hol-victim", "link_layer": "roce", "dilation": 8000,
            "complete": True, "fell_behind": False, "fabric_ns": 1_000_000,
            "flows": [flow(0, "h2", "h1", 900_000, 300_000), flow(1, "h4", "h1", 800_000, 300_000),
                      flow(2, "h6", "h3", 600_000, 200_000)],
            "ports": [{"node": "leaf1", "port": 1, "peer": "h1", "tx_bytes": 2_500_000, "drops": 0,
                       "priorities": [{"priority": 3, "paused_ns": 0, "max_depth_bytes": 90_000}]},
                      {"node": "spine1", "port": 1, "peer": "leaf1", "tx_bytes": 1_000_000,
                       "drops": 0, "priorities": [{"priority": 3, "paused_ns": 70_000},
                                                  {"priority": 6, "paused_ns": None}]}]}


def ib_run():
    return {"experiment": "hol-victim-ib", "link_layer": "infiniband", "dilation": 8000,
            "complete": True, "fell_behind": False, "fabric_ns": 900_000,
            "flows": [flow(0, "h2", "h1", 850_000, 280_000), flow(1, "h4", "h1", 760_000, 280_000),
                      flow(2, "h6", "h3", 500_000, 190_000)],
            "ports": [{"node": "leaf1", "port": 1, "peer": "h1", "tx_bytes": 2_400_000, "drops": 0,
                       "credit_stalled_ns": 10_000, "priorities": [],
                       "vls": [{"vl": 0, "max_depth_bytes": 31_500}]},
                      {"node": "spine1", "port": 1, "peer": "leaf1", "tx_bytes": 900_000,
                       "drops": 0, "credit_stalled_ns": 55_000, "priorities": []}]}


def test_percentile_is_nearest_rank():
    v = list(range(1, 101))
    assert percentile(v, 50) == 50 and percentile(v, 99) == 99 and percentile(v, 100) == 100
    assert percentile([7.0], 99) == 7.0


def test_a_victim_is_a_flow_into_a_host_nobody_else_sends_to():
    assert [f["flow_id"] for f in victims(roce_run())] == [2]
    incast = roce_run()
    incast["flows"] = incast["flows"][:2]
    assert victims(incast) == []


def test_rows_measure_what_held_each_fabric_and_its_busiest_link():
    fabric = load_fabric(REPO / "topologies/clos-2x2-h3.yaml")       # 25 Gbit/s links
    r, i = row("roce", roce_run(), fabric), row("ib", ib_run(), fabric)
    assert (r["held_ns"], r["held_by"]) == (70_000, "PFC pauses")
    assert (i["held_ns"], i["held_by"]) == (65_000, "credit stalls")
    assert r["victim_slowdown_max"] == 3.0 and i["victim_slowdown_max"] == round(500 / 190, 3)
    assert r["fct_max_us"] == 900.0 and r["fct_p99_us"] is None        # 3 flows: no p99
    assert r["busiest_link"] == "leaf1:1->h1"
    # 2.5 MB in 1 ms of fabric time at 25 Gbit/s: 80 %
    assert r["busiest_link_utilisation"] == 0.8
    assert r["drops"] == 0 and r["retransmitted_packets"] == 0
    assert (r["max_queue_bytes"], i["max_queue_bytes"]) == (90_000, 31_500)


def test_the_comparison_is_a_csv_a_json_and_a_figure(tmp_path):
    rows = write_comparison(tmp_path, {"roce": roce_run(), "ib": ib_run()})
    with open(tmp_path / "comparison.csv") as f:
        got = list(csv.DictReader(f))
    assert [g["run"] for g in got] == ["roce", "ib"] and got[1]["link_layer"] == "infiniband"
    data = json.loads((tmp_path / "comparison.json").read_text())
    assert data["runs"] == json.loads(json.dumps(rows))
    assert [f["fct_ns"] for f in data["flows"]["ib"]] == [850_000, 760_000, 500_000]
    png = (tmp_path / "comparison.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_compare_needs_two_valid_experiments_and_says_so_in_one_line(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from emulator.cli import main
    monkeypatch.chdir(REPO)
    runner = CliRunner()
    one = runner.invoke(main, ["compare", "experiments/incast-ib.yaml"])
    assert one.exit_code == 2 and "two experiments" in one.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntopology: ../topologies/clos-2x2-h3-ib.yaml\n"
                   "ib_cc: {enabled: true, marking_rate: -1}\ntraffic: [{pattern: all-to-all}]\n")
    res = runner.invoke(main, ["compare", "experiments/incast-pfc.yaml", str(bad)])
    assert res.exit_code == 2
    assert "ib_cc.marking_rate" in res.output and len(res.output.strip().splitlines()) == 1


def test_a_collective_workload_is_compared_by_its_busbw(tmp_path):
    def run(link_layer, busbw):
        return {"experiment": "ar", "link_layer": link_layer, "dilation": 20000,
                "complete": True, "fell_behind": False, "fabric_ns": 0, "flows": [],
                "ports": [], "collectives": {"results": [
                    {"size_bytes": 65536, "busbw_GBps": busbw / 2},
                    {"size_bytes": 1048576, "busbw_GBps": busbw}]}}
    rows = write_comparison(tmp_path, {"roce": run("roce", 12.048), "ib": run("infiniband", 12.7)})
    assert [(r["busbw_GBps"], r["busbw_size_bytes"]) for r in rows] == \
        [(12.05, 1048576), (12.7, 1048576)]
    assert rows[0]["fct_mean_us"] is None and rows[0]["busiest_link"] == ""
    assert (tmp_path / "comparison.png").stat().st_size > 10_000


# ----------------------------------------------- slowdown buckets, queue depth

def workload_run(name, slowdown_of, queue):
    """A run of 40 flows of sizes 1..40 kB, slowdown ``slowdown_of(size)``, and
    its sampled queue-depth percentiles."""
    flows = [{"flow_id": i, "src": "h1", "dst": "h2", "bytes": 1000 * (i + 1),
              "fct_ns": 1000, "standalone_fct_ns": 1000, "complete": True,
              "fct_slowdown": slowdown_of(1000 * (i + 1))} for i in range(40)]
    return {"experiment": name, "link_layer": "roce", "dilation": 3000, "complete": True,
            "fell_behind": False, "fabric_ns": 2_000_000, "flows": flows, "ports": [],
            "queue_depth_dist": {"interval_ns": 1000, "window_ns": 2_000_000, "ports": 16,
                                 "samples": 32016, "mean_bytes": 900.0, "p50_bytes": queue[0],
                                 "p95_bytes": queue[1], "p99_bytes": queue[2],
                                 "max_bytes": queue[3]}}


def test_rows_have_slowdown_and_queue_depth_percentiles():
    r = row("dcqcn", workload_run("ws", lambda s: s / 1000, (0, 5000, 20000, 90000)))
    # slowdowns 1..40: nearest rank
    assert (r["slowdown_p50"], r["slowdown_p95"], r["slowdown_p99"]) == (20, 38, 40)
    assert (r["queue_p50_bytes"], r["queue_p95_bytes"], r["queue_p99_bytes"],
            r["queue_max_sampled_bytes"]) == (0, 5000, 20000, 90000)
    old = row("roce", roce_run())                   # 3 flows, no queue_depth_dist (an older run)
    assert old["slowdown_p50"] == 3.0 and old["slowdown_p95"] is None
    assert old["queue_p99_bytes"] is None and old["queue_max_sampled_bytes"] is None


def test_slowdown_by_size_bucket_side_by_side(tmp_path):
    runs = {"dcqcn": workload_run("ws", lambda s: 1 + s / 10_000, (0, 4000, 9000, 30000)),
            "none": workload_run("ws-none", lambda s: 2 + s / 1000, (1000, 80000, 150000, 300000))}
    rows = write_comparison(tmp_path, runs)
    assert [r["queue_p95_bytes"] for r in rows] == [4000, 80000]
    with open(tmp_path / "comparison_fct_slowdown.csv") as f:
        reader = csv.DictReader(f)
        table = list(reader)
    assert reader.fieldnames == ["bucket", "pct_from", "pct_to"] + [
        f"{run}_{c}" for run in ("dcqcn", "none")
        for c in ("flows", "size_max_bytes", "slowdown_p50", "slowdown_p95", "slowdown_p99")]
    # 40 flows in 5 % buckets: 2 each; bucket 0 holds 1 kB and 2 kB, its p50 the 2 kB flow's
    assert len(table) == 20
    assert table[0] == {"bucket": "0", "pct_from": "0", "pct_to": "5",
                        "dcqcn_flows": "2", "dcqcn_size_max_bytes": "2000", "dcqcn_slowdown_p50": "1.2",
                        "dcqcn_slowdown_p95": "1.2", "dcqcn_slowdown_p99": "1.2",
                        "none_flows": "2", "none_size_max_bytes": "2000", "none_slowdown_p50": "4.0",
                        "none_slowdown_p95": "4.0", "none_slowdown_p99": "4.0"}
    assert table[-1]["none_slowdown_p95"] == "42.0" and table[-1]["dcqcn_size_max_bytes"] == "40000"
    data = json.loads((tmp_path / "comparison.json").read_text())
    assert [b["slowdown_p50"] for b in data["fct_slowdown_buckets"]["dcqcn"]][:2] == [1.2, 1.4]
    assert data["queue_depth_dist"]["none"]["max_bytes"] == 300000
    for png in ("comparison.png", "comparison_fct_slowdown.png"):   # > MAX_FLOW_BARS: by bucket
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png


def test_no_bucket_table_without_flows(tmp_path):
    run = {"experiment": "ar", "link_layer": "roce", "dilation": 20000, "complete": True,
           "fell_behind": False, "fabric_ns": 0, "flows": [], "ports": [],
           "collectives": {"results": [{"size_bytes": 65536, "busbw_GBps": 5.0}]}}
    write_comparison(tmp_path, {"a": run, "b": dict(run)})
    assert not (tmp_path / "comparison_fct_slowdown.csv").exists()
    assert json.loads((tmp_path / "comparison.json").read_text())["fct_slowdown_buckets"] == \
        {"a": [], "b": []}


def test_compare_prints_the_bucket_table(monkeypatch, tmp_path):
    """``fabric-emu compare``'s tables, the runs stubbed (no fabric is built)."""
    import contextlib

    from click.testing import CliRunner

    import emulator.experiment.dilation as dilation
    import emulator.net.environment as environment
    import emulator.net.runlock as runlock
    from emulator.cli import main
    runs = iter([workload_run("websearch-dcqcn", lambda s: 1 + s / 10_000, (0, 4000, 9000, 30000)),
                 workload_run("fairness", lambda s: 3.0, (0, 1, 2, 3))])
    monkeypatch.setattr(dilation, "run_with_dilation", lambda *a, **k: next(runs))
    import emulator.report as report
    reports = []

    def fake_report(out, runs=None):        # the stubbed runs left no run directory to draw
        reports.append((Path(out), runs))
        (Path(out) / "report.html").parent.mkdir(parents=True, exist_ok=True)
        return Path(atomic_write_text(Path(out) / "report.html", "<html></html>"))
    monkeypatch.setattr(report, "write_report", fake_report)
    monkeypatch.setattr(report, "write_compare_report", fake_report)
    monkeypatch.setattr(environment, "check_environment", lambda: None)
    monkeypatch.setattr(runlock.RunLock, "acquire",
                        classmethod(lambda cls, *a, **k: contextlib.nullcontext()))
    monkeypatch.chdir(REPO)
    res = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["compare", "experiments/websearch-dcqcn.yaml",
                                    "experiments/fairness.yaml", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "queue_p99_bytes" in res.output and "by flow-size bucket" in res.output
    assert "1.20 / 1.20 / 1.20" in res.output and "3.00 / 3.00 / 3.00" in res.output
    assert (tmp_path / "comparison_fct_slowdown.csv").exists()
    # each run's report, then the comparison's with every run
    points = {n: tmp_path / n for n in ("websearch-dcqcn", "fairness")}
    assert reports == [(points["websearch-dcqcn"], None), (points["fairness"], None),
                       (tmp_path, points)]
