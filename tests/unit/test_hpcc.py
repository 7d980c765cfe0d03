"""HPCC ns-3 simulator formats (fct.txt, pfc.txt, qlen.txt, ...) and standalone FCTs."""
from __future__ import annotations

import random
import re
import shutil
import subprocess

import pytest

from emulator.experiment.hpcc import fct_lines, ip_hex, node_ids, qlen_lines, write_hpcc
from emulator.experiment.ideal_fct import (
    FabricPaths,
    frame_sizes,
    standalone_fct_ns,
    tandem_completion_ns,
)
from emulator.experiment.model import experiment_from_dict
from emulator.experiment.summary import build_summary
from emulator.experiment.timeseries import load_results
from tests.unit.test_results import REPO, T0, make_experiment, make_run

FCT_LINE = re.compile(r"^[0-9a-f]{8} [0-9a-f]{8} \d+ \d+ \d+ \d+ \d+ \d+$")


def brute_force_tandem(sizes: list[int], rates_bps: list[int], delays_ns: list[int]) -> float:
    """Store-and-forward through links: frame j leaves link i at
    max(its arrival from link i-1, link i free) + serialization."""
    arrive = [0.0] * len(sizes)            # back to back at the source
    for rate, delay in zip(rates_bps, delays_ns):
        free, out = 0.0, []
        for size, a in zip(sizes, arrive):
            free = max(free, a) + size * 8e9 / rate
            out.append(free + delay)
        arrive = out
    return arrive[-1]


def test_node_numbering_hosts_then_switches():
    exp = make_experiment()
    assert node_ids(exp.fabric) == {"h1": 0, "h2": 1, "h3": 2, "h4": 3,
                                    "leaf1": 4, "leaf2": 5, "spine1": 6, "spine2": 7}
    assert ip_hex("10.0.1.2") == "0a000102" and ip_hex("10.0.2.1") == "0a000201"


def test_frame_sizes():
    # 10000 B WRITE, MTU 1024: 9 full packets + 784; headers 54, RETH 16 on the
    # first, ICRC 4, wire overhead 24
    assert frame_sizes(10000, 1024, "write") == (10, 54 + 16 + 1024 + 4 + 24,
                                                 54 + 1024 + 4 + 24, 54 + 784 + 4 + 24)
    assert frame_sizes(10000, 1024, "send")[1] == 54 + 1024 + 4 + 24
    assert frame_sizes(1001, 1024, "write") == (1, 1102, 1102, 1102)   # 54+16+1004 (padded)+4+24


@pytest.mark.parametrize("seed", range(6))
def test_tandem_completion_matches_store_and_forward(seed):
    rnd = random.Random(seed)
    for _ in range(20):
        n = rnd.choice([1, 2, 3, 4, 7, 30])
        hops = rnd.randint(1, 5)
        first, middle, last = rnd.randint(60, 1200), rnd.randint(60, 1200), rnd.randint(60, 1200)
        if n == 1:
            middle = last = first
        sizes = [first] + [middle] * (n - 2) + ([last] if n > 1 else [])
        rates = [rnd.choice([25, 50, 100, 200, 400]) * 10**9 for _ in range(hops)]
        delays = [rnd.randint(0, 5000) for _ in range(hops)]
        assert tandem_completion_ns(n, first, middle, last, rates, delays) == \
            pytest.approx(brute_force_tandem(sizes, rates, delays), rel=1e-12)


def test_standalone_fct_same_leaf_by_hand():
    exp = make_experiment(traffic=[{"src": "h1", "dst": "h2", "size_bytes": 4096}])
    f = exp.flows[0]
    assert [(h.node, h.port_no, h.peer) for h in FabricPaths(exp.fabric).flow_path(f)] == \
        [("h1", 0, "leaf1"), ("leaf1", 2, "h2")]
    # 4 frames: 1122 (RETH) + 3 x 1106 wire bytes; 2 equal 100 Gbps hops: all frames
    # at 100 Gbps plus the first frame's store-and-forward at the second hop:
    # (4440 + 1122) B x 0.08 ns/B = 444.96 ns, + 2 x 1 µs propagation.
    # ACK back: 62 + 24 B at 2 hops = 13.76 ns + 2 µs.
    assert standalone_fct_ns(exp, f) == round(444.96 + 2000 + 13.76 + 2000)


def test_standalone_fct_across_a_slow_path():
    exp = experiment_from_dict({
        "name": "x", "topology": "../topologies/explicit-3leaf.yaml",
        "traffic": [{"src": "h1", "dst": "h4", "size_bytes": 1000}]},
        REPO / "experiments" / "x.yaml")
    f = exp.flows[0]
    paths = FabricPaths(exp.fabric)
    hops = paths.flow_path(f)
    # leaf3 hangs off spine1 only: h1 -100G-> leaf1 -400G-> spine1 -100G-> leaf3 -50G-> h4
    assert [(h.node, h.peer, h.rate_bps // 10**9, h.delay_ns) for h in hops] == [
        ("h1", "leaf1", 100, 1000), ("leaf1", "spine1", 400, 1000),
        ("spine1", "leaf3", 100, 5000), ("leaf3", "h4", 50, 2000)]
    assert [h.node for h in paths.ack_path(f)] == ["h4", "leaf3", "spine1", "leaf1"]
    # one 1098-byte frame: 8784 bits x (1/100 + 1/400 + 1/100 + 1/50) ns = 373.32 ns
    # + 9 µs; ACK 688 bits x the same = 29.24 ns + 9 µs
    assert standalone_fct_ns(exp, f) == round(373.32 + 9000 + 29.24 + 9000)


def test_ecmp_path_uses_the_pipeline_hash():
    from emulator.p4.ecmp import ecmp_hash
    exp = make_experiment()
    f = exp.flows[0]                                   # h1 -> h3 across the spines
    hops = FabricPaths(exp.fabric).flow_path(f)
    assert [h.node for h in hops][:2] == ["h1", "leaf1"] and hops[-1].peer == "h3"
    h = ecmp_hash(0x0A000101, 0x0A000201, 17, f.udp_sport, 4791)
    assert hops[1].peer == ("spine1", "spine2")[h % 2]   # leaf1's uplinks: ports 3, 4


def summary_with_fcts(exp, run_dir, fcts: dict[int, int]):
    s = build_summary(exp, "embedded", {}, {}, run_dir, wall_s=1.0).as_dict()
    for f in s["flows"]:
        if f["flow_id"] in fcts:
            f.update(complete=True, fct_ns=fcts[f["flow_id"]])
            f["fct_slowdown"] = f["fct_ns"] / f["standalone_fct_ns"]
    return s


def test_fct_txt_layout(tmp_path):
    exp = make_experiment()
    s = summary_with_fcts(exp, make_run(tmp_path / "run"), {0: 30_000, 1: 5_000})
    files = write_hpcc(exp, tmp_path / "out", load_results(exp, tmp_path / "run", T0), s["flows"])
    lines = files["fct.txt"].read_text().splitlines()
    assert all(FCT_LINE.match(line) for line in lines)
    # completion order: flow 1 (start 1 µs + 5 µs) before flow 0 (30 µs)
    f1, f0 = (line.split() for line in lines)
    ideal0 = s["flows"][0]["standalone_fct_ns"]
    assert f0 == ["0a000101", "0a000201", str(exp.flows[0].udp_sport), "4791", "40960", "0",
                  "30000", str(ideal0)]
    assert f1[:2] == ["0a000102", "0a000201"] and f1[4:7] == ["20480", "1000", "5000"]


def test_fct_analysis_awk_reads_it(tmp_path):
    """The selection fct_analysis.py runs on fct.txt (its -t 0, with dport 100)."""
    awk = shutil.which("awk")
    if awk is None:
        pytest.skip("no awk")
    exp = make_experiment()
    s = summary_with_fcts(exp, make_run(tmp_path / "run"), {0: 30_000, 1: 5_000})
    path = tmp_path / "fct.txt"
    path.write_text("".join(x + "\n" for x in fct_lines(exp, s["flows"], dport=100)))
    prog = "{if ($4==100 && $6+$7<3000000000) {slow=$7/$8;print slow<1?1:slow, $5}}"
    out = subprocess.run([awk, prog, str(path)], capture_output=True, text=True, check=True)
    got = sorted((float(a), int(b)) for a, b in (l.split() for l in out.stdout.splitlines()))
    want = sorted((max(1.0, f["fct_ns"] / f["standalone_fct_ns"]), f["bytes"])
                  for f in s["flows"])
    assert [b for _, b in got] == [b for _, b in want]
    assert [a for a, _ in got] == pytest.approx([a for a, _ in want], rel=1e-5)


def test_pfc_txt(tmp_path):
    exp = make_experiment()
    files = write_hpcc(exp, tmp_path / "out", load_results(exp, make_run(tmp_path / "run"), T0))
    # received pause frames only: spine1 (id 6, switch) port 2; h3 (id 2, host) ifindex 1
    assert files["pfc.txt"].read_text().splitlines() == [
        "1110 6 1 2 1", "1700 2 0 1 1", "1750 2 0 1 0", "1810 6 1 2 0"]
    assert files["fct.txt"].read_text() == ""


def test_qlen_txt_histogram(tmp_path):
    exp = make_experiment()
    files = write_hpcc(exp, tmp_path / "out", load_results(exp, make_run(tmp_path / "run"), T0),
                       qlen_interval_ns=100)
    lines = files["qlen.txt"].read_text().splitlines()
    assert lines[0] == "time: 2500"                 # one dump, at the end of the run
    rows = {tuple(map(int, l.split()[:2])): list(map(int, l.split()[2:])) for l in lines[1:]}
    # every switch port, HPCC (node id, ifindex) order
    assert list(rows) == sorted(rows) and len(rows) == 4 + 4 + 2 + 2
    # samples at 0, 100, ..., 2500 ns (26); leaf2 (id 5) port 1: 2500 + 600 B in
    # [1000, 2000) -> 10 samples in the 3 KB bucket
    assert rows[(5, 1)] == [16, 0, 0, 10]
    # port 3: 1200 B in [1500, 2500) -> bucket 1
    assert rows[(5, 3)] == [16, 10]
    assert rows[(4, 1)] == [26]


def test_qlen_dumps_are_cumulative():
    exp = make_experiment()
    depth = [{"time_ns": 0, "node": "leaf1", "port": 1, "priority": 3, "depth_bytes": 5000},
             {"time_ns": 500, "node": "leaf1", "port": 1, "priority": 3, "depth_bytes": 0}]
    lines = qlen_lines(exp.fabric, depth, 1000, interval_ns=100, dump_interval_ns=400)
    dumps = [i for i, l in enumerate(lines) if l.startswith("time:")]
    assert [lines[i] for i in dumps] == ["time: 400", "time: 800", "time: 1000"]
    leaf1_1 = [lines[i + 1] for i in dumps]
    assert leaf1_1 == ["4 1 0 0 0 0 0 5", "4 1 4 0 0 0 0 5", "4 1 6 0 0 0 0 5"]


def test_topology_and_flow_txt(tmp_path):
    exp = make_experiment()
    files = write_hpcc(exp, tmp_path / "out", load_results(exp, make_run(tmp_path / "run"), T0))
    topo = files["topology.txt"].read_text().splitlines()
    assert topo[0] == "8 4 8" and topo[1] == "4 5 6 7"
    assert topo[2] == "0 4 100Gbps 0.001ms 0"           # h1 - leaf1, first link
    assert topo[-1] == "5 7 100Gbps 0.001ms 0"          # leaf2 - spine2
    flows = files["flow.txt"].read_text().splitlines()
    assert flows == ["2", "0 2 3 4791 40960 0.000000000", "1 2 3 4791 20480 0.000001000"]
