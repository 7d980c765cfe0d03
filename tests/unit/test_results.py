"""Raw logs (docs/lossless.md formats) -> result CSVs in fabric time and units."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from emulator.experiment.model import experiment_from_dict
from emulator.experiment.results import build_run_summary, write_run_results
from emulator.experiment.results_io import read_raw_csv, read_result_csv, stats_by_port_priority
from emulator.experiment.timeseries import RESULT_COLUMNS, load_results, write_results
from emulator.link import Wire
from emulator.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
D = 1000                      # dilation of the synthetic run
T0 = 5_000_000_000            # monotonic ns of the agents' common start
US = 1000 * D                 # one fabric µs in wall (dilated) ns


def wall(fabric_ns: float) -> int:
    """The raw (monotonic, dilated) stamp of a fabric time."""
    return int(T0 + fabric_ns * D)


def make_experiment(**extra):
    """clos-2x2 (leaf1: h1 h2 on ports 1-2, spine1/2 on 3-4; leaf2: h3 h4), two flows to h3."""
    data = {
        "name": "unit", "topology": "../topologies/clos-2x2.yaml", "dilation": D,
        "traffic": [{"src": "h1", "dst": "h3", "op": "write", "size_bytes": 40960},
                    {"src": "h2", "dst": "h3", "op": "write", "size_bytes": 20480, "start_us": 1}],
        **extra,
    }
    return experiment_from_dict(data, REPO / "experiments" / "unit.yaml")


def lateness(late_wall_ns: list[int]) -> dict:
    """A port's lateness stats (stats.json) for frames released this late (wall ns)."""
    w = Wire(0)
    for late in late_wall_ns:
        w.put(10**12 - late, b"x")
    w.release(10**12, lambda f: None)
    return w.lateness_stats()


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


def make_run(run_dir: Path) -> Path:
    """Synthetic raw logs of a run of make_experiment() (flow 0: h1 QP 256 -> h3 QP 256,
    flow 1: h2 QP 256 -> h3 QP 257)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    # leaf2 port 1 faces h3: the incast queue. Port 3 faces spine1.
    write_lines(run_dir / "leaf2.qdepth.csv", [
        "t_ns,port,priority,depth_bytes",
        f"{wall(1000)},1,3,2500",
        f"{wall(1000)},1,6,600",
        f"{wall(2000)},1,3,0",
        f"{wall(2000)},1,6,0",
        f"{wall(1500)},3,3,1200",
        f"{wall(2500)},3,3,0",
        f"{wall(2600)},3,3,9",          # a line cut short when the process was killed
    ][:-1] + [f"{wall(2600)},3"])
    write_lines(run_dir / "leaf2.events.csv", [
        "t_ns,port,priority,event,value",
        f"{wall(1100)},3,3,pause_tx,65535",
        f"{wall(1800)},3,3,resume_tx,0",
        f"{wall(1200)},1,3,ecn_mark,2500",
        f"{wall(1300)},1,0,drop,1078",
    ])
    write_lines(run_dir / "spine1.events.csv", [            # no header: documented order
        f"{wall(1110)},2,3,pause_rx,65535",
        f"{wall(1810)},2,3,resume_rx,0",
    ])
    json_stats = {
        "name": "leaf2", "rx_frames": 100,
        "ports": [{"port": 1, **lateness([10_000] * 60 + [3 * US] * 2),
                   "priorities": [
                       {"priority": 3, "tx_packets": 60, "tx_bytes": 66000, "drops": 0,
                        "headroom_drops": 0, "ecn_marks": 1, "pause_tx": 0, "pause_rx": 0,
                        "paused_ns": 0, "max_depth_bytes": 2500},
                       {"priority": 6, "tx_packets": 2, "tx_bytes": 150, "drops": 0,
                        "headroom_drops": 0, "ecn_marks": 0, "pause_tx": 0, "pause_rx": 0,
                        "paused_ns": 0, "max_depth_bytes": 600}]},
                  {"port": 3, **lateness([10_000] * 6),
                   "priorities": {"3": {"tx_packets": 5, "tx_bytes": 400, "drops": 0,
                                        "headroom_drops": 0, "ecn_marks": 0, "pause_tx": 2,
                                        "pause_rx": 0, "paused_ns": 0, "max_depth_bytes": 1200},
                                  "0": {"tx_packets": 1, "tx_bytes": 64, "drops": 1,
                                        "headroom_drops": 0, "ecn_marks": 0, "pause_tx": 0,
                                        "pause_rx": 0, "paused_ns": 0, "max_depth_bytes": 64}}}],
    }
    (run_dir / "leaf2.stats.json").write_text(json.dumps(json_stats))
    (run_dir / "spine1.stats.json").write_text(json.dumps({"ports": [
        {"port": 2, **lateness([10_000] * 40),
         "priorities": [{"priority": 3, "tx_packets": 40, "tx_bytes": 44000, "pause_rx": 2,
                         "paused_ns": 700 * D}]}]}))
    write_lines(run_dir / "h1.qp.csv", [
        "t_ns,qpn,rate_bps,alpha,event",
        f"{wall(0)},256,100000000,1.0,init",          # 100 Mbit/s dilated = 100 Gbps fabric
        f"{wall(1400)},256,50000000,0.9375,cnp",
    ])
    write_lines(run_dir / "h1.flows.csv", [
        "t_ns,flow_id,acked_bytes",
        f"{wall(0)},0,0",
        f"{wall(1000)},0,12500",                       # 12500 B in 1 fabric µs: 100 Gbps
        f"{wall(2000)},0,18750",                       # 6250 B: 50 Gbps
    ])
    write_lines(run_dir / "h1.cnp.csv", [
        "t_ns,local_qpn,remote_qpn,direction",
        f"{wall(1390)},256,256,rx",
    ])
    write_lines(run_dir / "h3.cnp.csv", [
        "t_ns,local_qpn,remote_qpn,direction",
        f"{wall(1250)},256,256,tx",
        f"{wall(1260)},257,256,tx",
    ])
    write_lines(run_dir / "h3.pfc.csv", [
        "t_ns,priority,quanta",
        f"{wall(1700)},3,65535",
        f"{wall(1750)},3,0",
    ])
    return run_dir


def read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with path.open(newline="") as fh:
        r = csv.DictReader(fh)
        return list(r.fieldnames or []), list(r)


@pytest.fixture
def run(tmp_path):
    exp = make_experiment()
    run_dir = make_run(tmp_path / "run")
    return exp, run_dir, tmp_path / "out"


def test_every_csv_written_with_its_columns(run):
    exp, run_dir, out = run
    files = write_results(exp, run_dir, out, T0)
    assert set(files) == set(RESULT_COLUMNS)
    for name, cols in RESULT_COLUMNS.items():
        header, _ = read_csv(out / name)
        assert tuple(header) == cols, name


def test_time_is_fabric_ns_from_t0(run):
    exp, run_dir, out = run
    write_results(exp, run_dir, out, T0)
    _, rows = read_csv(out / "queue_depth.csv")
    assert [(r["time_ns"], r["node"], r["port"], r["priority"], r["depth_bytes"]) for r in rows] == [
        ("1000", "leaf2", "1", "3", "2500"), ("1000", "leaf2", "1", "6", "600"),
        ("1500", "leaf2", "3", "3", "1200"),
        ("2000", "leaf2", "1", "3", "0"), ("2000", "leaf2", "1", "6", "0"),
        ("2500", "leaf2", "3", "3", "0"),   # the truncated last line is skipped
    ]


def test_sub_ns_fabric_times_keep_a_decimal(tmp_path):
    exp = make_experiment()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_lines(run_dir / "leaf1.qdepth.csv", [f"{T0 + 1500},1,3,100"])   # 1.5 fabric ns
    write_results(exp, run_dir, tmp_path / "out", T0)
    _, rows = read_csv(tmp_path / "out" / "queue_depth.csv")
    assert rows[0]["time_ns"] == "1.5"


def test_dcqcn_rates_are_undilated_gbps_and_mapped_to_flows(run):
    exp, run_dir, out = run
    write_results(exp, run_dir, out, T0)
    _, rows = read_csv(out / "dcqcn_rate.csv")
    assert [(r["time_ns"], r["host"], r["qpn"], r["flow_id"], float(r["rate_gbps"]),
             float(r["alpha"]), r["event"]) for r in rows] == [
        ("0", "h1", "256", "0", 100.0, 1.0, "init"),
        ("1400", "h1", "256", "0", 50.0, 0.9375, "cnp")]


def test_flow_rate_from_acked_bytes(run):
    exp, run_dir, out = run
    write_results(exp, run_dir, out, T0)
    _, rows = read_csv(out / "flow_rate.csv")
    assert [(r["time_ns"], r["flow_id"], r["src"], r["dst"], float(r["rate_gbps"]))
            for r in rows] == [("1000", "0", "h1", "h3", 100.0),
                               # both samples lie within RATE_WINDOW_NS: averaged from t=0
                               ("2000", "0", "h1", "h3", 75.0)]


def test_pfc_events_of_switches_and_hosts(run):
    exp, run_dir, out = run
    write_results(exp, run_dir, out, T0)
    _, rows = read_csv(out / "pfc_events.csv")
    got = [(r["time_ns"], r["node"], r["port"], r["peer"], r["priority"], r["event"], r["quanta"])
           for r in rows]
    assert got == [
        ("1100", "leaf2", "3", "spine1", "3", "pause_tx", "65535"),
        ("1110", "spine1", "2", "leaf2", "3", "pause_rx", "65535"),
        ("1700", "h3", "0", "leaf2", "3", "pause_rx", "65535"),
        ("1750", "h3", "0", "leaf2", "3", "resume_rx", "0"),
        ("1800", "leaf2", "3", "spine1", "3", "resume_tx", "0"),
        ("1810", "spine1", "2", "leaf2", "3", "resume_rx", "0"),
    ]


def test_ecn_cnp_and_drops(run):
    exp, run_dir, out = run
    write_results(exp, run_dir, out, T0)
    _, ecn = read_csv(out / "ecn_marks.csv")
    assert [tuple(r.values()) for r in ecn] == [("1200", "leaf2", "1", "3", "2500")]
    _, cnp = read_csv(out / "cnp.csv")
    assert [tuple(r.values()) for r in cnp] == [
        ("1250", "h3", "256", "0", "tx"),     # h3's QP 256 is flow 0's responder
        ("1260", "h3", "257", "1", "tx"),
        ("1390", "h1", "256", "0", "rx")]
    _, drops = read_csv(out / "drops.csv")
    assert [tuple(r.values()) for r in drops] == [("1300", "leaf2", "1", "0", "1078", "queue")]


def test_drops_of_link_faults_and_corrupted_frames_carry_their_reason(tmp_path):
    """A switch's fault drops (its events drop_<reason>) and a host's (its
    drops log) join the traffic manager's in drops.csv, each with its reason;
    a frame dropped before it was classified has no priority."""
    exp = make_experiment()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_lines(run_dir / "leaf1.events.csv", [
        "t_ns,port,priority,event,value", f"{T0 + 100 * D},3,3,drop_link_down,1078",
        f"{T0 + 200 * D},3,8,drop_random_loss,64", f"{T0 + 300 * D},1,-1,drop_fcs_error,1078",
        f"{T0 + 400 * D},1,3,drop,1078"])
    write_lines(run_dir / "h3.drops.csv", [
        "t_ns,priority,reason,bytes", f"{T0 + 150 * D},-1,icrc_error,1078",
        f"{T0 + 250 * D},3,link_down,1078"])
    write_results(exp, run_dir, tmp_path / "out", T0)
    header, drops = read_csv(tmp_path / "out" / "drops.csv")
    assert header == ["time_ns", "node", "port", "priority", "bytes", "reason"]
    assert [tuple(r.values()) for r in drops] == [
        ("100", "leaf1", "3", "3", "1078", "link_down"),
        ("150", "h3", "0", "", "1078", "icrc_error"),
        ("200", "leaf1", "3", "pfc", "64", "random_loss"),
        ("250", "h3", "0", "3", "1078", "link_down"),
        ("300", "leaf1", "1", "", "1078", "fcs_error"),
        ("400", "leaf1", "1", "3", "1078", "queue")]


def test_missing_logs_give_header_only_files(tmp_path):
    exp = make_experiment()
    (tmp_path / "run").mkdir()
    files = write_results(exp, tmp_path / "run", tmp_path / "out", T0)
    for name, path in files.items():
        assert path.read_text().strip() == ",".join(RESULT_COLUMNS[name])
    res = load_results(exp, tmp_path / "nonexistent", T0)
    assert res.end_ns == 0 and not any(res.tables().values())


def test_raw_csv_header_may_reorder_columns(tmp_path):
    p = tmp_path / "x.csv"
    write_lines(p, ["port,priority,depth_bytes,t_ns", "2,3,100,7", "garbage", "3,0,5,8"])
    assert read_raw_csv(p, "qdepth") == [
        {"t_ns": 7, "port": 2, "priority": 3, "depth_bytes": 100},
        {"t_ns": 8, "port": 3, "priority": 0, "depth_bytes": 5}]


def test_stats_layouts():
    c = {"tx_packets": 1}
    want = {(1, 3): {"tx_packets": 1}}
    assert stats_by_port_priority({"ports": [{"port": 1, "priorities": [{"priority": 3, **c}]}]}) == want
    assert stats_by_port_priority({"ports": [{"port": 1, "priorities": {"3": c}}]}) == want
    assert stats_by_port_priority({"ports": [{"port": 1, "priority": 3, **c}]}) == want
    assert stats_by_port_priority({"queues": [{"port": 1, "priority": 3, **c}]}) == want
    assert stats_by_port_priority({"ports": [{"port": 1, "released_frames": 0}]}) == {}


def test_end_ns_and_read_back(run):
    exp, run_dir, out = run
    res = load_results(exp, run_dir, T0)
    assert res.end_ns == 2500          # the truncated line (t=2600) is not a sample
    write_results(exp, run_dir, out, T0, results=res)
    rows = read_result_csv(out / "flow_rate.csv")
    assert rows[0] == {"time_ns": 1000, "flow_id": 0, "src": "h1", "dst": "h3", "rate_gbps": 100}


def test_write_run_results_writes_csvs_hpcc_plots_and_summary(tmp_path):
    exp, rd = make_experiment(), RunDir(tmp_path / "out")
    make_run(rd.raw.path)
    summary = build_run_summary(exp, "embedded", {}, {}, rd, wall_s=1.0)
    files = write_run_results(exp, rd, T0, summary)
    assert files["summary.json"] == rd.summary
    assert json.loads(rd.summary.read_text()) == summary.as_dict()
    assert "hosts.csv" not in files          # no endpoints: section
    for name in (*RESULT_COLUMNS, "fct.txt", "pfc.txt", "qlen.txt", "queue_depth.png",
                 "throughput.png", "pause_timeline.png"):
        assert name in files and files[name].exists(), name
    assert "fct_cdf.png" not in files       # no flow completed in this summary


def test_a_result_csv_reads_back_the_numbers_it_was_written_with(tmp_path):
    """write_csv then read_result_csv: ints stay ints, floats floats, text text."""
    from emulator.experiment.results_io import write_csv
    rows = [{"time_ns": 12.5, "flow_id": 3, "rate_gbps": 31.25, "port": "leaf1-eth2", "delta": -7},
            {"time_ns": 100, "flow_id": -1, "rate_gbps": 1e-9, "port": "s1", "delta": 2.5e12}]
    path = write_csv(tmp_path / "x.csv", rows[0].keys(), rows)
    got = read_result_csv(path)
    assert got == rows
    assert [type(v) for v in got[0].values()] == [float, int, float, str, int]
    assert type(got[1]["time_ns"]) is int and type(got[1]["delta"]) is float


def test_result_columns_where_keeps_the_rows_of_the_texts_asked(tmp_path):
    """read_result_columns' ``where`` selects rows by a column's text before parsing: the
    same rows, in order, as filtering every parsed row."""
    from emulator.experiment.results_io import read_result_columns, write_csv
    rows = [{"time_ns": t, "flow_id": t % 5, "hop": t % 2, "rate_gbps": t / 3} for t in range(40)]
    path = write_csv(tmp_path / "x.csv", rows[0].keys(), rows)
    cols = ("time_ns", "flow_id", "rate_gbps")
    every = list(read_result_columns(path, cols))
    assert len(every) == 40
    got = list(read_result_columns(path, cols, where={"flow_id": {"1", "3"}, "hop": ["1"]}))
    want = [r for r, row in zip(every, rows) if r[1] in (1, 3) and row["hop"] == 1]
    assert got == want and {r[1] for r in got} == {1, 3} and len(got) == 8
    assert list(read_result_columns(path, cols, where={"flow_id": set()})) == []
    assert list(read_result_columns(tmp_path / "missing.csv", cols, where={"flow_id": {"1"}})) == []


def test_while_figures_draw_hands_the_summary_to_be_written_while_the_plotter_draws(tmp_path):
    """The hook runs with the results files written but summary.json not yet
    (the figures are still drawing), and is given summary.json's very text."""
    from emulator.experiment.plotter import Plotter
    from emulator.experiment.results import while_figures_draw
    exp, rd = make_experiment(), RunDir(tmp_path / "out")
    make_run(rd.raw.path)
    summary = build_run_summary(exp, "embedded", {}, {}, rd, wall_s=1.0)
    seen = []

    def hook(results_dir, text):
        seen.append((results_dir, text, rd.summary.exists(), rd.file("queue_depth.csv").exists()))
    plotter = Plotter.start(rd.path, exp.fabric, idle=False)
    with while_figures_draw(hook):
        write_run_results(exp, rd, T0, summary, plotter=plotter)
    assert seen == [(rd.path, rd.summary.read_text(), False, True)]
    write_run_results(exp, rd, T0, summary, plots=False)
    assert len(seen) == 1, "outside the block, or without figures, no call"


def test_import_ahead_imports_what_the_results_phase_and_its_hooks_will():
    """``import_ahead`` (the runner's, during a small fabric's bring-up)
    imports NumPy and the modules a ``while_figures_draw`` hook names, on a
    thread; a hook's modules only while its block is entered. In a fresh
    interpreter: nothing imported them before."""
    from tests.conftest import python_c
    code = ("import sys\n"
            "from emulator.experiment import results\n"
            "before = [m in sys.modules for m in ('numpy', 'tests.forkserver_probe')]\n"
            "with results.while_figures_draw(print, imports=('tests.forkserver_probe',)):\n"
            "    results.import_ahead().join(timeout=60)\n"
            "after = [m in sys.modules for m in ('numpy', 'tests.forkserver_probe')]\n"
            "print(before, after, results._IMPORTED_LATE)\n")
    out = python_c(code, timeout=120)
    assert out.stdout.strip() == "[False, False] [True, True] ['numpy']", out.stderr
