"""The report's data shaping (``emulator.report``), without a browser: the
fabric rebuilt from a run directory, the slider's frames against the CSVs,
decimation, and the page written whole and self-contained."""
from __future__ import annotations

import csv
import json
import random
import re
import shutil
import subprocess
import sys

import pytest
from plotly.offline import get_plotlyjs

from emulator.errors import OutputError
from emulator.experiment.outdir import output_dir, read_marker
from emulator.report import NotARunDir, prepare_report, write_report
from emulator.report import build as report_build
from emulator.report.dist_fig import (NCCL_COLUMNS, collectives_figures, fct_cdf, fct_points,
                                      queue_percentiles, slowdown_figure)
from emulator.report.fabric_fig import TRACE_NAMES, fabric_figure
from emulator.report.flows_fig import flow_timeline, rate_figure
from emulator.report.page import template
from emulator.report.rundata import RunData
from emulator.report.series import counts_between, decimate, depth_at, frame_times, paused_at
from emulator.rundir import RunDir
from emulator.topo import load_fabric
from tests.conftest import REPO, run_cli
from tests.summaries import run_summary

END_NS = 10_000
QUEUE_ROWS = [  # time_ns, node, port, priority, depth_bytes
    (1000, "leaf1", 4, 3, 1082), (2000, "leaf1", 4, 3, 2164), (2000, "leaf1", 4, 0, 500),
    (4000, "leaf1", 4, 3, 0), (3500, "spine1", 2, 3, 3000), (9000, "spine1", 2, 3, 100)]
PFC_ROWS = [  # time_ns, node, port, peer, priority, event, quanta
    (2500, "leaf2", 3, "spine1", 3, "pause_tx", 65535),
    (2600, "spine1", 2, "leaf2", 3, "pause_rx", 65535),
    (6000, "spine1", 2, "leaf2", 3, "resume_rx", 0)]


def _ports(fabric):
    """summary.json's ports of a run on ``fabric``: every switch port and its peer."""
    return [{"node": sw.name, "role": sw.role, "port": p.port_no, "ifname": p.ifname,
             "peer": p.peer, "tx_packets": 10, "tx_bytes": 10_000 * p.port_no, "rx_bytes": 5_000,
             "rx_packets": 5, "drops": 0, "pipeline_drops": 0}
            for sw in fabric.switches() for p in fabric.ports(sw.name)]


def _write(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


@pytest.fixture
def run_dir(tmp_path):
    """A run directory of the 2x2 Clos as ``fabric-emu run`` leaves it (the files the report reads)."""
    fabric = load_fabric(REPO / "topologies" / "clos-2x2.yaml")
    flows = [{"flow_id": i, "src": "h1", "dst": h, "bytes": 100_000, "delivered_bytes": 100_000,
              "complete": True, "fct_ns": 3000 + 1000 * i, "start_ns": 100 * i,
              "retransmitted_packets": i % 2, "timeouts": 0} for i, h in enumerate(("h2", "h3"))]
    with output_dir(tmp_path / "run-dir") as odir:     # closed with its manifest, as a run's
        rd = RunDir(odir.path)
        _write_run(rd, fabric, flows)
    return rd, fabric


def _write_run(rd, fabric, flows):
    rd.raw.path.mkdir(parents=True)
    run_summary(topology="clos-2x2", fabric_ns=END_NS, ports=_ports(fabric), flows=flows).write(rd)
    for sw in fabric.switches():
        rd.raw.switch_config(sw.name).write_text(json.dumps({"ports": [
            {"port_no": p.port_no, "rate_bps": 100_000_000_000, "delay_ns": 1000}
            for p in fabric.ports(sw.name)]}))
    _write(rd.file(rd.QUEUE_DEPTH_CSV), ("time_ns", "node", "port", "priority", "depth_bytes"),
           QUEUE_ROWS)
    _write(rd.file(rd.PFC_EVENTS_CSV), ("time_ns", "node", "port", "peer", "priority", "event",
                                        "quanta"), PFC_ROWS)
    _write(rd.file(rd.ECN_MARKS_CSV), ("time_ns", "node", "port", "priority", "depth_bytes"),
           [(1000, "leaf1", 4, 3, 1082), (1500, "leaf1", 4, 3, 1082), (9999, "spine1", 2, 3, 1)])
    _write(rd.file(rd.FLOW_RATE_CSV), ("time_ns", "flow_id", "src", "dst", "rate_gbps"),
           [(t, 0, "h1", "h2", t / 100) for t in range(0, END_NS, 10)])


def test_the_fabric_is_the_topologys(run_dir):
    rd, fabric = run_dir
    drawn = RunData.load(rd).fabric
    assert sorted((n.name, n.role) for n in drawn.nodes) == sorted((n.name, n.role)
                                                                    for n in fabric.nodes)
    ends = lambda f: sorted(((l.a, l.a_port), (l.b, l.b_port)) for l in f.links)  # noqa: E731
    assert ends(drawn) == ends(fabric)
    assert {l.rate_bps for l in drawn.links} == {100_000_000_000}


def _csv_depth(node, port, t):
    """The port's depth at t, straight from the rows: per priority, the last at or before t."""
    last = {}
    for row in sorted(QUEUE_ROWS):
        if row[1] == node and row[2] == port and row[0] <= t:
            last[row[3]] = row[4]
    return sum(last.values())


def test_slider_frames_show_the_csv_depths_at_their_instant(run_dir):
    rd, _ = run_dir
    fig, ff = fabric_figure(RunData.load(rd), frames=11)
    assert [f["name"] for f in fig["frames"]] == [f"{t:.0f}" for t in range(0, END_NS + 1, 1000)]
    names = [t["name"] for t in fig["data"]]
    queues = names.index("queues")
    assert names[queues:queues + 3] == list(TRACE_NAMES)
    seen = set()
    for frame in fig["frames"]:
        t = float(frame["name"])
        (shown,) = [d for d in frame["data"] if d["name"] == "queues"]
        for node, port, depth, *_ in shown["customdata"]:
            assert depth == _csv_depth(node, port, t), (node, port, t)
            seen.add(depth)
    assert {1082 + 0, 2164 + 500, 500, 3000, 100} <= seen     # priorities add up per port


def test_pauses_and_marks_per_instant(run_dir):
    rd, _ = run_dir
    fig, ff = fabric_figure(RunData.load(rd), frames=11)
    # spine1:2 paused toward leaf2 (its pause_rx) from 2.6 to 6 µs: the frames at 3, 4, 5, 6 µs
    paused = [i for i, p in enumerate(ff.paused) if ("spine1", 2, "leaf2", 3) in p]
    assert paused == [3, 4, 5, 6]
    assert ff.ecn[("leaf1", 4)][1:3] == [1, 1] and ff.ecn[("spine1", 2)][10] == 1
    pfc = [d for d in fig["frames"][4]["data"] if d["name"] == "pfc"][0]
    assert "PAUSED by leaf2" in pfc["hovertext"][0]


def test_depth_at_and_counts_between():
    times = frame_times(4000, 5)
    assert times == [0, 1000, 2000, 3000, 4000]
    rows = [(2500, "s", 1, 0, 7), (1000, "s", 1, 0, 3)]           # any order
    assert depth_at(rows, times) == {("s", 1, 0): [0, 3, 3, 7, 7]}
    assert counts_between([(0, "a"), (1, "a"), (1000, "a"), (5000, "a")], times) == \
        {"a": [1, 2, 0, 0, 1]}


def test_decimate_keeps_short_series_and_averages_long_ones():
    ts, ys, k = decimate([1, 2, 3], [4, 5, 6], max_points=3)
    assert (ts, ys, k) == ([1, 2, 3], [4, 5, 6], 1)
    ts, ys, k = decimate(list(range(10)), [float(i) for i in range(10)], max_points=4)
    assert k == 3 and ts == [2, 5, 8, 9] and ys == [1.0, 4.0, 7.0, 9.0]
    xs, fr = fct_points(list(range(1000)), max_points=10)
    assert len(xs) == 10 and xs[0] == 0 and xs[-1] == 999 / 1000 and fr[-1] == 1.0


def test_many_flows_are_drawn_without_markers_and_it_says_so(run_dir):
    rd, _ = run_dir
    data = RunData.load(rd)
    notes = []
    fig = flow_timeline(data, notes)
    assert {t["name"] for t in fig["data"]} >= {"start", "completion", "retransmissions / timeouts"}
    assert notes == []
    data.summary["flows"] = [dict(data.summary["flows"][0], flow_id=i) for i in range(500)]
    fig = flow_timeline(data, notes)
    assert "start" not in {t["name"] for t in fig["data"]} and "500 flows" in notes[0]


def test_report_is_one_self_contained_file(run_dir):
    rd, _ = run_dir
    path = write_report(rd)
    assert path == rd.report_html
    page = path.read_text()
    bundle = get_plotlyjs()
    assert page.count(bundle) == 1          # the library inlined once; the rest loads nothing
    ours = page.replace(bundle, "")
    assert "<script src" not in ours and "http" not in ours.replace("http://www.w3.org", "")
    assert page.count("Plotly.newPlot") >= 4 and page.rstrip().endswith("</html>")
    assert f'href="{RunDir.QUEUE_DEPTH_CSV}"' in page and 'href="run/"' in page
    assert [p.name for p in rd.path.iterdir() if p.name.startswith(".")] == [RunDir.MARKER]  # no temp


def test_the_report_is_the_runs_and_never_overwrites_anothers(run_dir, tmp_path):
    rd, _ = run_dir
    write_report(rd)
    assert RunDir.REPORT_HTML in read_marker(rd.path)["entries"]   # cleared with the run
    write_report(rd)                                                # rebuilt: still the run's
    other = RunDir(tmp_path / "copy")
    shutil.copytree(rd.path, other.path)
    (other.path / RunDir.MARKER).unlink()         # no marker: report.html is nobody's we know
    other.report_html.write_text("mine")
    with pytest.raises(OutputError, match="not the run's"):
        write_report(other)
    assert other.report_html.read_text() == "mine"


def test_bad_dir_is_one_line(tmp_path):
    with pytest.raises(NotARunDir, match="not a directory"):
        RunData.load(tmp_path / "nothing")
    r = run_cli("report", tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "summary.json" in r.stderr, r.stderr
    assert not (tmp_path / RunDir.REPORT_HTML).exists()


def test_paused_at_is_the_span_holding_each_instant():
    """Against the definition, spans touching included: an instant is in the
    earliest span (a <= t <= b) holding it."""
    rng = random.Random(7)
    for _ in range(200):
        spans, t = [], 0.0
        for _ in range(rng.randrange(0, 6)):
            a = t + rng.choice((0.0, rng.uniform(0, 300)))     # some spans touch the previous
            t = a + rng.uniform(0, 300)
            spans.append((a, t))
        times = sorted({*(rng.uniform(0, 2000) for _ in range(20)), *(x for s in spans for x in s)})
        want = []
        for i in times:
            hit = next(((a, b) for a, b in spans if a <= i <= b), None)
            want.append({} if hit is None else {"k": hit[0]})
        got = paused_at({"k": spans[::-1]}, times)      # any order
        assert [{k: p.since_ns for k, p in d.items()} for d in got] == want
        assert all(p.total_ns == pytest.approx(sum(b - a for a, b in spans))
                   for d in got for p in d.values())


def _every_figure(rd: RunDir) -> list[dict]:
    """Every figure a report draws, the run given what each needs to be drawn."""
    _write(rd.file(rd.QUEUE_DEPTH_DIST_CSV), ("node", "port", "peer", "p50_bytes", "p95_bytes",
                                              "p99_bytes", "max_bytes"),
           [("leaf1", 4, "spine1", 0, 1082, 2164, 2664), ("spine1", 2, "leaf2", 100, 100, 3000,
                                                            3000)])
    _write(rd.file(rd.COLLECTIVES_CSV), ("collective", "algorithm", "nranks",
                                         *(k for _, k in NCCL_COLUMNS)),
           [("all_reduce", algo, 4, size, size // 4, "float", "sum", 10.5, 1.2, 1.8, 0, 10.1,
             1.9) for algo in ("ring", "tree") for size in (1024, 65536)])
    data = RunData.load(rd)
    data.summary["fct_slowdown_buckets"] = {"buckets": [
        {"pct_from": 0, "pct_to": 50, "size_max_bytes": 100_000, "slowdown_p50": 1.5,
         "slowdown_p95": 2.0, "slowdown_p99": 2.1}]}
    notes: list[str] = []
    figs = [fabric_figure(data, 11)[0], flow_timeline(data, notes), rate_figure(data, notes),
            fct_cdf({"run": data}, notes), slowdown_figure({"run": data}),
            queue_percentiles(data, notes), *collectives_figures(data)]
    assert None not in figs and len(figs) == 8
    return figs


def test_figures_are_what_plotlys_own_validation_makes_of_them(run_dir):
    """The report serialises its figure dicts unvalidated (page.figure_html): each is a
    valid figure, and plotly's validation (graph_objects) would change nothing in it."""
    from plotly import graph_objects as go  # deferred: only this test validates figures
    rd, _ = run_dir
    for fig in _every_figure(rd):
        ours = dict(fig, layout={"template": template(), **fig["layout"]})
        assert go.Figure(fig).to_plotly_json() == json.loads(json.dumps(ours)), fig["layout"]


def test_the_report_constructs_no_graph_objects(run_dir):
    """A run's report loads none of plotly's figure classes nor their property validators
    (a fresh process: the test process may have loaded them). plotly.io itself imports the
    ``plotly.graph_objs`` package, whose classes load lazily, and the validators' base module."""
    rd, _ = run_dir
    code = ("import sys; from emulator.report import write_report; write_report(sys.argv[1]); "
            "print(sorted(m for m in sys.modules if m == 'plotly.graph_objects' or "
            "m.startswith(('plotly.graph_objs.', 'plotly.validators'))))")
    r = subprocess.run([sys.executable, "-c", code, str(rd.path)], capture_output=True,
                       text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
    assert "Plotly.addFrames('fabric'" in rd.report_html.read_text()


def test_rates_are_the_shown_flows_rows_and_no_others(run_dir):
    """rate_figure reads flow_rate.csv for its flows only: flow 1's goodput is its own rows,
    not flow 10's or 11's (ids that begin with its text)."""
    rd, _ = run_dir
    rows = [(t, fid, "h1", "h3", fid + t / 1000) for t in range(0, END_NS, 100)
            for fid in (0, 1, 10, 11)]
    _write(rd.file(rd.FLOW_RATE_CSV), ("time_ns", "flow_id", "src", "dst", "rate_gbps"), rows)
    fig = rate_figure(RunData.load(rd), [])
    goodput = {t["name"]: t for t in fig["data"] if t["name"].endswith("goodput")}
    assert set(goodput) == {"flow 0 h1→h2 goodput", "flow 1 h1→h3 goodput"}
    for fid, label in ((0, "flow 0 h1→h2 goodput"), (1, "flow 1 h1→h3 goodput")):
        mine = [(t / 1000, r) for t, f, *_, r in rows if f == fid]
        assert list(zip(goodput[label]["x"], goodput[label]["y"])) == mine


def _page(rd) -> str:
    """report.html as written (in place of none), but the time it took to build."""
    rd.report_html.unlink(missing_ok=True)
    return re.sub(r"report built in [0-9.]+ s", "", write_report(rd).read_text())


def test_a_report_prepared_while_the_figures_draw_is_the_one_built_after(run_dir, monkeypatch):
    """Its figure sections built from the summary about to be written are
    those write_report would build, also once summary.json gains how D was
    chosen (dilation._record rewrites it after the results)."""
    rd, _ = run_dir
    text = rd.summary.read_text()
    later = {**json.loads(text), "dilation_chosen_by": "virtual", "dilation_reruns": []}
    rd.summary.write_text(json.dumps(later, indent=1))
    whole = _page(rd)
    prepare_report(rd.path, text)
    with monkeypatch.context() as m:        # taken as prepared, not built again
        m.setattr(report_build, "run_sections", lambda *a, **k: pytest.fail("built again"))
        assert _page(rd) == whole
    assert "virtual" in whole and _page(rd) == whole      # and without one prepared


def test_a_report_prepared_from_another_summary_is_built_again(run_dir):
    rd, _ = run_dir
    text = rd.summary.read_text()
    prepare_report(rd.path, text)
    changed = json.loads(text)
    changed["flows"] = changed["flows"][:1]
    rd.summary.write_text(json.dumps(changed, indent=1))
    page = _page(rd)
    assert page == _page(rd), "the page of the summary on disk"
    prepare_report(rd.path, "{not json")        # a failure keeps nothing, raises nothing
    assert _page(rd) == page
