"""The comparison of runs (``emulator/experiment/compare.py``) on summaries
shaped as runs write them: a RoCE run held by PFC pauses, an InfiniBand
run held by credit stalls, the same flows."""
from __future__ import annotations

import csv
import json

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
