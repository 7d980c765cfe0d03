"""Figures of a run: PNGs that open, None when there is nothing to draw."""
from __future__ import annotations

import pytest
from matplotlib.image import imread

from emulator.experiment.plots import (
    pause_intervals,
    plot_fct_cdf,
    plot_pause_timeline,
    plot_queue_depth,
    plot_throughput,
    write_plots,
)
from emulator.experiment.results_io import write_csv
from emulator.experiment.timeseries import write_results
from tests.unit.test_results import T0, make_experiment, make_run


def assert_png(path):
    assert path is not None and path.exists()
    img = imread(path)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    assert img.std() > 0.01                         # not a blank canvas


@pytest.fixture
def results_dir(tmp_path):
    exp = make_experiment()
    out = tmp_path / "out"
    write_results(exp, make_run(tmp_path / "run"), out, T0)
    return exp, out


def test_each_plot_is_a_readable_png(results_dir):
    exp, out = results_dir
    assert_png(plot_queue_depth(out))
    assert_png(plot_throughput(out))
    assert_png(plot_pause_timeline(out, fabric=exp.fabric))
    summary = {"flows": [
        {"complete": True, "fct_ns": 5000 * (i + 1), "standalone_fct_ns": 4000, "fct_slowdown": 1.25 * (i + 1)}
        for i in range(20)] + [{"complete": False, "fct_ns": None}]}
    assert_png(plot_fct_cdf(out, summary))


def test_no_data_no_png(tmp_path):
    exp = make_experiment()
    (tmp_path / "run").mkdir()
    write_results(exp, tmp_path / "run", tmp_path, T0)
    assert plot_queue_depth(tmp_path) is None
    assert plot_throughput(tmp_path) is None
    assert plot_pause_timeline(tmp_path) is None
    assert plot_fct_cdf(tmp_path, {"flows": [{"complete": False, "fct_ns": None}]}) is None
    assert write_plots(tmp_path, {"flows": []}) == {}
    assert not list(tmp_path.glob("*.png"))


def test_queue_depth_only_non_empty_and_top_n(tmp_path):
    rows = [{"time_ns": t, "node": "leaf1", "port": p, "priority": 3, "depth_bytes": d}
            for p in range(1, 16) for t, d in ((100, 1000 * p), (900, 0))]
    rows += [{"time_ns": 100, "node": "leaf2", "port": 1, "priority": 0, "depth_bytes": 0}]
    write_csv(tmp_path / "queue_depth.csv", ("time_ns", "node", "port", "priority", "depth_bytes"),
              rows)
    path = plot_queue_depth(tmp_path, top_n=5)
    assert_png(path)
    # never-empty queue only: nothing to draw
    write_csv(tmp_path / "queue_depth.csv", ("time_ns", "node", "port", "priority", "depth_bytes"),
              rows[-1:])
    assert plot_queue_depth(tmp_path, out_path=tmp_path / "q2.png") is None


def test_pause_intervals_resume_expiry_and_tx_side():
    exp = make_experiment()
    # 100 Gbps: 0xFFFF quanta x 512 bit = 335.5 µs; 1000 quanta = 5120 ns
    ev = [
        {"time_ns": 100, "node": "spine1", "port": 2, "peer": "leaf2", "priority": 3,
         "event": "pause_rx", "quanta": 65535},
        {"time_ns": 800, "node": "spine1", "port": 2, "peer": "leaf2", "priority": 3,
         "event": "resume_rx", "quanta": 0},
        {"time_ns": 1000, "node": "h3", "port": 0, "peer": "leaf2", "priority": 3,
         "event": "pause_rx", "quanta": 1000},            # expires at 6120, no resume
        {"time_ns": 20000, "node": "h3", "port": 0, "peer": "leaf2", "priority": 3,
         "event": "pause_rx", "quanta": 1000},            # expiry cut by the end of the run
        # sent by leaf1 out of port 3 (to spine1): spine1's port 1 is paused
        {"time_ns": 50, "node": "leaf1", "port": 3, "peer": "spine1", "priority": 3,
         "event": "pause_tx", "quanta": 65535},
        {"time_ns": 70, "node": "leaf1", "port": 3, "peer": "spine1", "priority": 3,
         "event": "resume_tx", "quanta": 0},
        # tx side of a direction that has rx events is ignored
        {"time_ns": 90, "node": "leaf2", "port": 3, "peer": "spine1", "priority": 3,
         "event": "pause_tx", "quanta": 65535},
    ]
    iv = pause_intervals(ev, exp.fabric, end_ns=22000)
    assert iv == {
        ("spine1", 2, "leaf2", 3): [(100, 800)],
        ("h3", 0, "leaf2", 3): [(1000, 6120), (20000, 22000)],
        ("spine1", 1, "leaf1", 3): [(50, 70)],
    }


def test_write_plots(results_dir):
    exp, out = results_dir
    files = write_plots(out, {"flows": [{"complete": True, "fct_ns": 9000, "fct_slowdown": 1.5}]},
                        fabric=exp.fabric)
    assert set(files) == {"queue_depth.png", "throughput.png", "pause_timeline.png", "fct_cdf.png"}
    for p in files.values():
        assert_png(p)


def test_busbw_plot_is_a_png_and_needs_rows(tmp_path):
    from emulator.experiment.plots import plot_busbw
    rows = [{"collective": "all_reduce", "algorithm": "ring", "size_bytes": s, "busbw_GBps": b}
            for s, b in ((65536, 8.6), (262144, 11.6), (1048576, 12.0))]
    rows.append({"collective": "all_gather", "algorithm": "ring", "size_bytes": 65536, "busbw_GBps": 9.0})
    out = plot_busbw(rows, tmp_path / "collectives.png", 12.5)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    assert plot_busbw([], tmp_path / "none.png") is None and not (tmp_path / "none.png").exists()


def test_up_to_forty_series_get_forty_distinct_colours():
    from emulator.experiment.plots import MAX_DISTINCT, colours
    cs = colours(MAX_DISTINCT)
    assert len(cs) == MAX_DISTINCT and len(set(cs)) == MAX_DISTINCT


def test_beyond_forty_flows_the_goodput_is_summed_per_receiver():
    from emulator.experiment.plots import FlowRates
    from emulator.experiment.plots.throughput import _receiver_lines
    series = {}
    for f in range(45):
        series[f] = FlowRates(f"h{f}", f"d{f % 3}")
        for t in (1000, 2000):
            series[f].add(t, 1.0 + f % 2)
    lines = {label: r for label, _, r in _receiver_lines(series)}
    assert set(lines) == {"→d0 (15 flows)", "→d1 (15 flows)", "→d2 (15 flows)"}
    # d0 gets flows 0, 3, ..., 42: 8 even (1 Gbps) + 7 odd (2 Gbps) = 22 Gbps at each instant
    assert lines["→d0 (15 flows)"][1:] == [22.0, 22.0]


def test_cdf_title_quotes_only_the_percentiles_its_flows_support():
    from emulator.experiment.plots import cdf_title
    assert cdf_title([1.5]).endswith("1 flow: max 1.50")
    assert cdf_title([1.0, 2.0, 3.0]).endswith("3 flows: p50 2.00, max 3.00")
    ten = [float(i) for i in range(1, 11)]
    assert cdf_title(ten).endswith("p50 5.00, p90 9.00, max 10.00")
    hundred = [float(i) for i in range(1, 101)]
    assert "p99 99.00" in cdf_title(hundred)


def test_flow_rates_are_streamed_per_flow_in_time_order(tmp_path):
    from emulator.experiment.plots import read_flow_rates
    (tmp_path / "flow_rate.csv").write_text(
        "time_ns,flow_id,src,dst,rate_gbps\n"
        "2000,1,h1,h2,5\n1000,0,h3,h4,1.5\n1000,1,h1,h2,4\n3000,0,h3,h4,2\n")
    s = read_flow_rates(tmp_path / "flow_rate.csv")
    assert sorted(s) == [0, 1]
    assert (s[1].src, s[1].dst, list(s[1].time_ns), list(s[1].rate_gbps)) == \
        ("h1", "h2", [1000.0, 2000.0], [4.0, 5.0])
    assert list(s[0].time_ns) == [1000.0, 3000.0] and list(s[0].rate_gbps) == [1.5, 2.0]
    assert read_flow_rates(tmp_path / "missing.csv") == {}
