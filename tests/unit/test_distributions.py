"""FCT slowdown by flow-size bucket (HPCC's fct_analysis.py) and the egress
queue-depth distribution: hand-computed values, and the files a run gets."""
from __future__ import annotations

import json
import random

import pytest

from emulator.experiment.distributions import (
    BUCKET_COLUMNS, QUEUE_COLUMNS, bucket_summary, queue_depth_distribution, slowdown_buckets,
)
from emulator.experiment.results import build_run_summary, write_run_results
from emulator.experiment.results_io import read_result_csv
from emulator.experiment.summary import render_slowdown_buckets, render_summary
from emulator.rundir import RunDir
from tests.unit.test_results import T0, make_experiment, make_run


def flow(size, slowdown, complete=True):
    return {"bytes": size, "fct_slowdown": slowdown, "complete": complete}


TEN = [flow(100, 1.2), flow(200, 0.9), flow(300, 3.0), flow(400, 1.5), flow(500, 2.0),
       flow(1000, 4.0), flow(2000, 1.1), flow(3000, 8.0), flow(4000, 2.5), flow(5000, 1.3),
       flow(50, None, complete=False)]


def test_two_halves_by_hand():
    rows = slowdown_buckets(TEN, step=50)
    assert [tuple(r) for r in rows] == [BUCKET_COLUMNS] * 2
    # the five smallest: 1.2, 0.9 (clamped to 1, as fct_analysis.py), 3, 1.5, 2
    # sorted 1, 1.2, 1.5, 2, 3: p50 = [int(5 x .5)] = [2], p95 = p99 = [4]
    assert rows[0] == {"bucket": 0, "pct_from": 0, "pct_to": 50, "flows": 5, "size_min_bytes": 100,
                       "size_max_bytes": 500, "slowdown_p50": 1.5, "slowdown_p95": 3.0,
                       "slowdown_p99": 3.0, "slowdown_mean": 1.74, "slowdown_max": 3.0}
    # 1.1, 1.3, 2.5, 4, 8
    assert rows[1] == {"bucket": 1, "pct_from": 50, "pct_to": 100, "flows": 5,
                       "size_min_bytes": 1000, "size_max_bytes": 5000, "slowdown_p50": 2.5,
                       "slowdown_p95": 8.0, "slowdown_p99": 8.0, "slowdown_mean": 3.38,
                       "slowdown_max": 8.0}
    assert bucket_summary(TEN, 50)["flows"] == 10 and bucket_summary(TEN, 50)["excluded_flows"] == 1


def test_pairs_take_the_upper_element_as_their_median():
    rows = slowdown_buckets(TEN, step=20)
    assert [(r["size_min_bytes"], r["size_max_bytes"]) for r in rows] == \
        [(100, 200), (300, 400), (500, 1000), (2000, 3000), (4000, 5000)]
    # sorted pairs: [1, 1.2], [1.5, 3], [2, 4], [1.1, 8], [1.3, 2.5]: element int(2 x .5) = 1
    assert [r["slowdown_p50"] for r in rows] == [1.2, 3.0, 4.0, 8.0, 2.5]


def test_few_flows_leave_most_5_percent_buckets_empty():
    flows = [flow(s, 1.0 + s / 10) for s in range(1, 8)]
    rows = slowdown_buckets(flows)
    # flow j is group [i 7 // 100, (i + 5) 7 // 100) for the i where that is [j, j + 1)
    assert [r["pct_from"] for r in rows] == [10, 25, 40, 55, 70, 85, 95]
    assert [r["flows"] for r in rows] == [1] * 7 and [r["bucket"] for r in rows] == [2, 5, 8, 11, 14, 17, 19]


def test_ties_in_size_sort_by_slowdown():
    rows = slowdown_buckets([flow(10, 5.0), flow(10, 2.0), flow(10, 3.0), flow(10, 4.0)], step=50)
    assert [(r["slowdown_p50"], r["slowdown_max"]) for r in rows] == [(3.0, 3.0), (5.0, 5.0)]


def test_the_same_as_a_transcription_of_fct_analysis_py():
    """fct_analysis.py's loop (Python 3, without its dropping the last line) on random flows."""
    rng = random.Random(3)
    flows = [flow(size, rng.lognormvariate(0.5, 1)) for size in rng.sample(range(1, 10**6), 333)]
    lines = sorted((f["bytes"], max(1.0, f["fct_slowdown"])) for f in flows)    # sort -n
    n, step = len(lines), 5
    expected = []
    for i in range(0, 100, step):
        d = lines[i * n // 100:(i + step) * n // 100]
        fct = sorted(s for _, s in d)
        expected.append((d[-1][0], fct[int(len(fct) * 0.5)], fct[int(len(fct) * 0.95)],
                         fct[int(len(fct) * 0.99)]))
    got = [(r["size_max_bytes"], r["slowdown_p50"], r["slowdown_p95"], r["slowdown_p99"])
           for r in slowdown_buckets(flows, step)]
    assert got == [(s, round(a, 4), round(b, 4), round(c, 4)) for s, a, b, c in expected]


def test_no_completed_flow_no_bucket():
    assert slowdown_buckets([]) == [] and slowdown_buckets([flow(1, None, False)]) == []
    with pytest.raises(ValueError):
        slowdown_buckets(TEN, step=0)


# ------------------------------------------------------------- queue depth

def test_queue_depth_percentiles_by_hand():
    exp = make_experiment()          # clos-2x2: 12 switch ports
    rows = [{"time_ns": 1000, "node": "leaf2", "port": 1, "priority": 3, "depth_bytes": 2500},
            {"time_ns": 1000, "node": "leaf2", "port": 1, "priority": 6, "depth_bytes": 600},
            {"time_ns": 2000, "node": "leaf2", "port": 1, "priority": 3, "depth_bytes": 0},
            {"time_ns": 2000, "node": "leaf2", "port": 1, "priority": 6, "depth_bytes": 0},
            {"time_ns": 1500, "node": "leaf2", "port": 3, "priority": 3, "depth_bytes": 1200},
            {"time_ns": 2500, "node": "leaf2", "port": 3, "priority": 3, "depth_bytes": 0}]
    dist = queue_depth_distribution(exp.fabric, rows, end_ns=4000, interval_ns=1000)
    assert [tuple(r) for r in dist] == [QUEUE_COLUMNS] * 13
    every, ports = dist[0], {(r["node"], r["port"]): r for r in dist[1:]}
    # samples at 0, 1, 2, 3, 4 us: port 1 holds 2500 + 600 at 1 us; port 3 1200 at 2 us
    assert ports[("leaf2", 1)] == {"node": "leaf2", "port": 1, "peer": "h3", "samples": 5,
                                   "mean_bytes": 620.0, "p50_bytes": 0, "p95_bytes": 3100,
                                   "p99_bytes": 3100, "max_bytes": 3100}
    assert ports[("leaf2", 3)]["max_bytes"] == 1200 and ports[("leaf1", 1)]["max_bytes"] == 0
    # 60 samples pooled, two of them non-zero: p95 is the 57th (0), p99 the 60th
    assert every == {"node": "all", "port": "", "peer": "", "samples": 60,
                     "mean_bytes": round(4300 / 60, 1), "p50_bytes": 0, "p95_bytes": 0,
                     "p99_bytes": 3100, "max_bytes": 3100}
    finer = queue_depth_distribution(exp.fabric, rows, end_ns=4000, interval_ns=250)
    assert finer[0]["samples"] == 12 * 17
    assert {(r["node"], r["port"]): r["samples"] for r in finer[1:]}[("leaf2", 1)] == 17


def test_a_run_writes_the_buckets_the_queue_distribution_and_the_figure(tmp_path):
    exp, rd = make_experiment(), RunDir(tmp_path / "out")
    make_run(rd.raw.path)
    summary = build_run_summary(exp, "embedded", {}, {}, rd, wall_s=1.0)
    for f, (fct, slow) in zip(summary.flows, ((4000, 2.0), (2500, 1.25))):
        f.update(complete=True, fct_ns=fct, fct_slowdown=slow)
    files = write_run_results(exp, rd, T0, summary)
    for name in ("fct_slowdown.csv", "queue_depth_dist.csv", "fct_slowdown.png"):
        assert name in files and files[name].exists(), name
    rows = read_result_csv(files["fct_slowdown.csv"])
    # flows of 20480 B (slowdown 1.25) and 40960 B (2.0): alone in their 5 % buckets
    assert [(r["pct_from"], r["size_max_bytes"], r["slowdown_p50"]) for r in rows] == \
        [(45, 20480, 1.25), (95, 40960, 2.0)]
    written = json.loads(files["summary.json"].read_text())
    assert written["fct_slowdown_buckets"]["buckets"] == rows
    # flow 0 starts at 0 and ends at 4 us: samples every 1 us (switch.sample_interval_us)
    q = written["queue_depth_dist"]
    assert (q["interval_ns"], q["window_ns"], q["ports"], q["samples"]) == (1000, 4000, 12, 60)
    assert (q["p50_bytes"], q["p99_bytes"], q["max_bytes"]) == (0, 3100, 3100)
    assert read_result_csv(files["queue_depth_dist.csv"])[0]["samples"] == 60
    render_summary(written)
    assert render_slowdown_buckets(written) is not None


def test_no_queue_distribution_where_the_switches_sample_none(tmp_path):
    exp, rd = make_experiment(), RunDir(tmp_path / "out")
    make_run(rd.raw.path)
    summary = build_run_summary(exp, "bmv2", {}, {}, rd, wall_s=1.0)
    files = write_run_results(exp, rd, T0, summary, plots=False)
    # written as null: the switches sample no depth (not a key the run forgot)
    assert json.loads(rd.summary.read_text())["queue_depth_dist"] is None
    assert "queue_depth_dist.csv" not in files
    # incomplete flows: a header alone, no figure
    assert summary.fct_slowdown_buckets == {"step_percent": 5, "flows": 0, "excluded_flows": 2,
                                               "buckets": []}
    assert read_result_csv(files["fct_slowdown.csv"]) == []
