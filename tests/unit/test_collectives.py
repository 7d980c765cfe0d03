"""Collective schedules, NVLink model, report and workload file; the engine
over real RoceNics joined by AF_UNIX socket pairs (no root needed)."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from tests.rail_nics import rail_nic_pairs
from emulator.clock import ManualClock
from emulator.collectives import algorithms, arith, bench, data, dtypes, report, simulate
from emulator.collectives.engine import CollectiveEngine, drive, quiescent
from emulator.collectives.nvlink import NvlinkSwitch
from emulator.collectives.schedule import NVLINK, RDMA, SEND, Op, RankSchedule, chunk_bytes, finalize
from emulator.collectives.workload import validate_for
from emulator.errors import ConfigError
from emulator.schema.workload import parse_workload


def test_an_input_is_its_formula_read_only():
    rng = np.random.default_rng(5)
    for _ in range(50):
        rank, it, count = (int(v) for v in rng.integers((0, 0, 1), (4096, 1000, 5000)))
        i = np.arange(count, dtype=np.int64)
        want = (((i * 7 + rank * 131 + it * 17) % 251) - 125).astype(np.float32)
        got = data.input_elems(rank, it, count)
        assert got.dtype == np.float32 and np.array_equal(got, want)
    with pytest.raises(ValueError):          # a slice of the one shared array: never written
        data.input_elems(1, 2, 10)[0] = 7


def test_a_reduction_expected_is_the_sum_of_the_inputs():
    """``expected`` sums one period and repeats it: the same as summing every
    rank's whole input."""
    rng = np.random.default_rng(11)
    for _ in range(40):
        n, it = int(rng.integers(1, 40)), int(rng.integers(0, 100))
        count = n * int(rng.integers(1, 3000))
        full = sum(data.input_elems(r, it, count) for r in range(n))
        got = data.expected("all_reduce", 0, n, it, count * 4)
        assert got.dtype == np.float32 and np.array_equal(got, full)
        rank = int(rng.integers(0, n))
        (o, b) = [(o // 4, b // 4) for o, b in chunk_bytes(count, n)][rank]
        assert np.array_equal(data.expected("reduce_scatter", rank, n, it, count * 4),
                              full[o:o + b])


def test_a_check_in_pieces_counts_what_count_wrong_counts():
    rng = np.random.default_rng(3)
    want = data.expected("all_reduce", 0, 8, 2, 4 * (3 * data.CHECK_PIECE_ELEMS + 17))
    for bad in ([], [0], [data.CHECK_PIECE_ELEMS - 1, data.CHECK_PIECE_ELEMS], [want.size - 1],
                list(rng.choice(want.size, 100, replace=False))):
        got = want.copy()
        got[bad] += 1
        into = {}
        pieces = sum(1 for _ in data.count_wrong_pieces(got, lambda: want, into))
        assert into["wrong"] == data.count_wrong(got, want) == len(bad)
        assert pieces == 1 + 4              # want(), then 4 pieces of the comparison
    into = {}
    list(data.count_wrong_pieces(want[:10], lambda: want, into))
    assert into["wrong"] == want.size


def simulate_wrong(coll, alg, S, G, size, slice_bytes, slots, seed, params=algorithms.Params()):
    """Wrong elements over every rank's output; a reduce's non-root must
    keep its (zeroed) output as it was."""
    n, dtype = S * G, params.dtype
    elem = dtypes.elem_bytes(dtype)
    sch = algorithms.build(coll, alg, S, G, size, slice_bytes, params)
    ins = {r: data.input_elems(r, 3, data.input_bytes(coll, n, size, r, params) // elem, dtype, n)
           for r in range(n)}
    out = simulate.run(sch, ins, slots=slots, seed=seed)
    wants = {r: data.expected(coll, r, n, 3, size, params) for r in range(n)}
    return sum(data.count_wrong(out[r]["out"], np.zeros(size // elem, arith.storage(dtype))
                                if w is None else w) for r, w in wants.items())


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize("coll", algorithms.COLLECTIVES)
def test_flat_schedules_compute_the_collective(coll, n):
    # uneven chunks and slices (size not a multiple of n x slice) on purpose
    size = 4 * n * 37
    for seed in range(3):
        assert simulate_wrong(coll, "ring", 1, n, size, 24, slots=1 + seed, seed=seed) == 0


@pytest.mark.parametrize("coll,alg,S,G", [
    *((c, "ring", S, G) for c in ("all_reduce", "all_gather", "reduce_scatter")
      for S, G in ((1, 3), (2, 4))),
    ("all_reduce", "hierarchical", 2, 2), ("all_reduce", "hierarchical", 3, 2)])
def test_in_place_schedules_compute_the_collective_in_one_buffer(coll, alg, S, G):
    """nccl-tests' in-place run: the input where NCCL puts it, the result read
    from the same buffer, every execution order the dependencies allow."""
    n, size = S * G, 4 * S * G * 37
    for seed in range(3):
        sch = algorithms.in_place(algorithms.build(coll, alg, S, G, size, 24), coll, n, size)
        assert all(len(s.buffers) == len(algorithms.build(coll, alg, S, G, size, 24)[0].buffers) - 1
                   for s in sch.values())                  # one buffer fewer: they are one
        views = {r: algorithms.in_place_views(coll, n, r, size) for r in range(n)}
        ins = {r: data.input_elems(r, 3, data.input_bytes(coll, n, size) // 4) for r in range(n)}
        out = simulate.run(sch, ins, slots=1 + seed, seed=seed,
                           input_at={r: v[0][:2] for r, v in views.items()})
        for r, (_, (buf, first, count)) in views.items():
            got = out[r][buf][first:first + count]
            assert data.count_wrong(got, data.expected(coll, r, n, 3, size)) == 0, (r, seed)


@pytest.mark.parametrize("S,G", [(2, 2), (2, 4), (3, 2), (4, 1), (1, 4), (3, 3)])
def test_hierarchical_all_reduce(S, G):
    assert simulate_wrong("all_reduce", "hierarchical", S, G, 4 * 1001, 40, 2, S + G) == 0
    sch = algorithms.build("all_reduce", "hierarchical", S, G, 4 * 1001, 40)
    for a, b, link in algorithms.connections(sch):
        same_server = a // G == b // G
        assert link == (NVLINK if same_server else RDMA)
        assert same_server or a % G == b % G        # RDMA only along a rail


def test_ring_bytes_per_rank_and_rails():
    """Ring all-reduce: each rank sends 2(n-1)/n of the buffer; snake order
    keeps server-to-server hops on one rail."""
    S, G, size = 2, 4, 4 * 8 * 1000
    sch = algorithms.build("all_reduce", "ring", S, G, size, 1 << 20)
    for s in sch.values():
        assert sum(o.nbytes for o in s.ops if o.kind == SEND) == size * 2 * 7 // 8
    for a, b, link in algorithms.connections(sch):
        assert link == NVLINK or a % G == b % G


def test_missing_dependency_is_caught_by_the_simulator():
    """finalize orders a receive that overwrites data after the send reading
    it; without that dependency a random order sends the wrong bytes."""
    def sched(r):
        s = RankSchedule(r, {"in": 8, "out": 8})
        s.ops = [Op("copy", -1, "local", "out", 0, 8, src_buf="in"),
                 Op(SEND, 1 - r, NVLINK, "out", 0, 4), Op("recv", 1 - r, NVLINK, "out", 0, 4)]
        return s
    sch = {r: finalize(sched(r)) for r in (0, 1)}
    assert sch[0].ops[2].deps == (0, 1)                  # WAW on copy, WAR on the send
    ins = {0: np.array([1, 2], np.float32), 1: np.array([5, 6], np.float32)}
    for seed in range(10):
        out = simulate.run(sch, ins, seed=seed)
        assert list(out[0]["out"]) == [5, 2] and list(out[1]["out"]) == [1, 6]


def test_busbw_factors():
    assert report.busbw_factor("all_reduce", 8) == pytest.approx(1.75)
    assert report.busbw_factor("all_gather", 4) == pytest.approx(0.75)
    assert report.busbw_factor("reduce_scatter", 2) == pytest.approx(0.5)
    assert report.busbw_factor("all_to_all", 8) == pytest.approx(0.875)
    assert report.busbw_factor("all_reduce", 1) == 0


def _records(coll, size, n, time_ns, dilation, wrong=0, in_place=False):
    return [{"rank": r, "collective": coll, "algorithm": "ring", "size_bytes": size,
             "nranks": n, "iters": 4, "warmup_iters": 2, "in_place": in_place, "start_ns": 1000,
             "end_ns": 1000 + 4 * time_ns * dilation, "wrong": wrong} for r in range(n)]


def test_report_rows_table_and_files(tmp_path):
    D = 100
    # 1 MiB all-reduce in 100 us (fabric) on 4 ranks: algbw 10.49 GB/s, busbw x 1.5;
    # in place in 80 us
    rows = report.collective_rows(_records("all_reduce", 1 << 20, 4, 100_000, D)
                                  + _records("all_reduce", 1 << 20, 4, 80_000, D, in_place=True)
                                  + _records("all_gather", 1 << 20, 4, 50_000, D, None), D)
    ar, ag = rows
    assert ar["time_us"] == pytest.approx(100.0) and ar["count"] == 262144
    assert ar["algbw_GBps"] == pytest.approx(10.48576)
    assert ar["busbw_GBps"] == pytest.approx(10.48576 * 1.5)
    assert ar["inplace_time_us"] == pytest.approx(80.0) and ar["inplace_wrong"] == 0
    assert ag["busbw_GBps"] == pytest.approx(2 * 10.48576 * 0.75) and ag["wrong"] is None
    assert ag["redop"] == "none" and ag["inplace_time_us"] is None
    text = report.format_table(rows)
    rows_txt = [x for x in text.splitlines() if not x.startswith("#")]
    # nccl-tests' layout: 13 fields, column 8 ($8) the out-of-place busbw, 12 the in-place
    assert rows_txt[0].split() == ["1048576", "262144", "float", "sum", "-1",
                                   "100.00", "10.49", "15.73", "0", "80.00", "13.11", "19.66", "0"]
    assert rows_txt[0] == ("     1048576        262144     float     sum      -1"
                           "   100.00   10.49   15.73       0    80.00   13.11   19.66       0")
    assert rows_txt[1].split()[5:] == ["50.00", "20.97", "15.73", "N/A"]     # no in-place half
    # src/util.cu's header format, applied as C's printf would
    assert "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n" % (
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
        "time", "algbw", "busbw", "#wrong") in text
    assert "# Out of bounds values : 0 OK" in text
    assert f"# Avg bus bandwidth    : {(15.728640 + 19.660800) / 2:g} " in text
    paths = report.write(tmp_path, rows, {"steps": 1})
    got = list(csv.DictReader(open(paths["csv"])))
    assert got[0]["busbw_GBps"] == "15.7286" and got[1]["wrong"] == "N/A"
    assert got[0]["inplace_busbw_GBps"] == "19.6608"
    j = json.loads(paths["json"].read_text())            # nccl-tests' -J shape
    assert set(j) >= {"version", "config", "results", "out_of_bounds", "average_bus_bandwidth"}
    r0 = j["results"][0]
    assert (r0["size"], r0["count"], r0["type"], r0["redop"], r0["root"].strip()) == (
        1 << 20, 262144, "float", "sum", "-1")
    assert r0["out_of_place"]["bus_bw"] == pytest.approx(15.72864) and r0["in_place"]["nwrong"] == 0
    assert j["results"][1]["in_place"] is None and j["results"][1]["out_of_place"]["nwrong"] is None
    assert r0["experiment_name"] == "all_reduce_perf ring" and j["out_of_bounds"]["okay"]
    assert json.loads(paths["training"].read_text()) == {"steps": 1}
    with pytest.raises(ValueError, match="records of 3 ranks"):
        report.collective_rows(_records("all_reduce", 64, 4, 10, 1)[:3], 1)


def test_nccl_tests_float_format_fits_its_width():
    assert report._float(100.0, 7) == " 100.00" and report._float(12345.678, 7) == "12345.7"
    assert report._float(1234567.0, 7) == "1234567" and report._float(123456789.0, 7) == "1.2e+08"


@pytest.mark.parametrize("data_,field,reason", [
    ({"tests": [{"collective": "all_reduce", "sizes": [1024], "iterz": 1}]},
     "workload.tests[0].iterz", "unknown field"),
    ({"tests": [{"collective": "gather", "sizes": [64]}]}, "workload.tests[0].collective", ""),
    ({"tests": [{"collective": "broadcast", "sizes": [64]}]}, "workload.tests[0].root",
     "broadcast needs a root rank"),
    ({"tests": [{"collective": "reduce", "sizes": [64]}]}, "workload.tests[0].root",
     "reduce needs a root rank"),
    ({"tests": [{"collective": "all_reduce", "sizes": [64], "root": 0}]},
     "workload.tests[0].root", "is for broadcast and reduce only, not all_reduce"),
    ({"tests": [{"collective": "reduce", "sizes": [64], "root": 0, "spread": 0.5}]},
     "workload.tests[0].spread", "is for all_to_allv only, not reduce"),
    ({"tests": [{"collective": "all_to_allv", "sizes": [64], "spread": 1.5}]},
     "workload.tests[0].spread", "must be <= 1"),
    ({"tests": [{"collective": "send_recv", "sizes": [64], "shift": 0}]},
     "workload.tests[0].shift", "must be >= 1"),
    ({"training": {"steps": 1, "size_bytes": 64, "collective": "broadcast"}},
     "workload.training.collective", ""),
    ({"tests": [{"collective": "all_reduce", "sizes": {"min_bytes": 8, "max_bytes": 4}}]},
     "workload.tests[0].sizes", "max_bytes must be >= min_bytes"),
    ({"tests": [{"collective": "all_reduce", "sizes": [64], "iters": 0}]},
     "workload.tests[0].iters", ">= 1"),
    ({"training": {"steps": 2, "size_bytes": 64, "compute_us": -1}},
     "workload.training.compute_us", ""),
    ({}, "workload", "give 'tests' or 'training'"),
    ({"slots": "8", "training": {"steps": 1, "size_bytes": 4}}, "workload.slots", "integer"),
])
def test_workload_errors_are_one_line(data_, field, reason):
    with pytest.raises(ConfigError) as e:
        parse_workload(data_, "exp.yaml")
    assert e.value.field == field and reason in e.value.reason
    assert str(e.value).startswith(f"exp.yaml: {field}: ") and "\n" not in str(e.value)


def test_workload_sizes_and_fabric_checks():
    w = parse_workload({"tests": [{"collective": "all_gather",
                                   "sizes": {"min_bytes": 64, "max_bytes": 1000, "factor": 4}},
                                  {"collective": "all_reduce", "sizes": [4, 12]}]}, "e.yaml")
    assert w.tests[0].size_list() == [64, 256] and w.pairs()[1] == ("all_reduce", "ring")
    validate_for(w, "e.yaml", 2, 2)
    with pytest.raises(ConfigError, match=r"workload.tests\[0\].sizes: 64 B is not a multiple of "
                                          r"4 B x 32 ranks = 128 B"):
        validate_for(w, "e.yaml", 4, 8)
    h = parse_workload({"algorithm": "hierarchical",
                        "tests": [{"collective": "all_to_all", "sizes": [64]}]}, "e.yaml")
    with pytest.raises(ConfigError, match=r"tests\[0\].algorithm: hierarchical is all_reduce"):
        validate_for(h, "e.yaml", 2, 2)


def test_nvlink_serializes_per_port_and_shares_a_downlink():
    clock = ManualClock()
    sw = NvlinkSwitch(3, rate_bps=8e9, delay_ns=100, clock=clock)   # 1 byte/ns
    got = []
    t1 = sw.transfer(0, 2, 1000, got.append, "a")     # 0 -> 2: 1000 ns + 100
    t2 = sw.transfer(1, 2, 1000, got.append, "b")     # 1 -> 2 waits for 2's downlink
    t3 = sw.transfer(0, 1, 500, got.append, "c")      # waits for 0's uplink
    assert (t1, t2, t3) == (1100, 2100, 1600)
    clock.set(1599)
    assert sw.poll() == 1 and got == ["a"]
    clock.set(2100)
    sw.poll()
    assert got == ["a", "c", "b"] and sw.idle()


def test_nvlink_arrives_exactly_after_serialization_and_delay():
    """An arrival runs at now + bytes x 8e9 / rate + delay, not a ns earlier;
    a transfer asked later starts later; a credit (``after``) is latency only."""
    clock = ManualClock(10_000)
    sw = NvlinkSwitch(2, rate_bps=4e9, delay_ns=300, clock=clock)   # 2 ns per byte
    got = []
    assert sw.transfer(0, 1, 500, got.append, "x") == 10_000 + 1000 + 300
    clock.advance(5000)                                # links idle again: starts now
    assert sw.transfer(1, 0, 250, got.append, "y") == 15_000 + 500 + 300
    sw.after(300, got.append, "credit")
    assert sw.next_event_ns() == 11_300
    assert sw.poll() == 1 and got == ["x"]             # now 15_000: x is long due
    clock.set(15_299)
    assert sw.poll() == 0
    clock.set(15_300)
    assert sw.poll() == 1 and got == ["x", "credit"]
    assert sw.next_event_ns() == 15_800
    clock.set(15_799)
    assert sw.poll() == 0
    clock.set(15_800)
    assert sw.poll() == 1 and got == ["x", "credit", "y"] and sw.idle()
    assert (sw.tx_bytes, sw.rx_bytes) == ([500, 250], [250, 500])


@pytest.fixture
def two_servers():
    """2 servers x 2 GPUs; NIC g of server 0 <-> NIC g of server 1 by a socket
    pair; one manual clock."""
    S, G, rate = 2, 2, 400_000_000
    clock = ManualClock()
    nics, ips = rail_nic_pairs(G, rate, clock)
    engines = [CollectiveEngine(server=s, servers=S, nics=[nics[(s, g)] for g in range(G)],
                                rank_ips=ips, nvlink_rate_bps=4 * rate, nvlink_delay_ns=2000,
                                slice_bytes=16384, slots=2, clock=clock) for s in range(S)]
    yield engines, rate
    for nic in nics.values():
        nic.close()


def test_engine_over_roce_nics(two_servers):
    engines, rate = two_servers
    pairs = [("all_reduce", "ring"), ("all_reduce", "hierarchical"), ("reduce_scatter", "ring")]
    for e in engines:
        e.connect(bench.connections_for(2, 2, pairs))
    recs = []
    for coll, alg in pairs:
        for in_place in (False, True):
            recs += bench.measure(engines, coll, alg, 64 << 10, iters=3, warmup_iters=1,
                                  in_place=in_place)
    rows = {(r["collective"], r["algorithm"]): r for r in report.collective_rows(recs, 1.0)}
    assert all(r["wrong"] == 0 and r["inplace_wrong"] == 0 for r in rows.values())
    link_GBps = rate / 8e9
    assert rows[("all_reduce", "ring")]["busbw_GBps"] <= link_GBps
    tr = bench.train(engines, "all_reduce", "hierarchical", 32 << 10, steps=2, warmup_steps=0,
                     compute_ns=3_000_000)
    summary = report.training_summary(tr, 1.0)
    assert summary["wrong"] == 0 and summary["step_time_us"]["max"] >= 3000
    # every slot's data moved and every credit comes back
    drive(engines, [], 5.0, until=lambda: quiescent(engines))
    for e in engines:
        for r, conns in e.conns.items():
            for c in conns.values():
                assert c.sent == c.freed and not c.arrived


def test_results_are_checked_in_the_loops_idle_time_and_schedules_built_once(two_servers):
    """A server agent leaves each row's check to the event loop's idle time
    (``background_check``): nothing is counted when ``measure`` returns, the
    next row's loop counts it, ``finish_checks`` the rest; a row's schedules
    are built once (``prepare`` builds them before the start)."""
    engines, _ = two_servers
    for e in engines:
        e.connect(bench.connections_for(2, 2, [("all_reduce", "ring")]))
    # the manual clock's 400 Mbps NICs have a frame due every 21 us
    engines[0].background_min_idle_ns = 10_000
    bench.prepare(engines, [("all_reduce", "ring", 64 << 10, False)])
    built = dict(engines[0].schedules)
    assert len(built) == 2                                  # the row's and its barrier's
    first = bench.measure(engines, "all_reduce", "ring", 64 << 10, iters=1, warmup_iters=0,
                          background_check=True)
    assert engines[0].schedules == built                    # nothing built again
    assert all(r["wrong"] is None for r in first)
    assert sum(len(e.background) for e in engines) == 4     # one check per rank
    second = bench.measure(engines, "all_reduce", "ring", 64 << 10, iters=1, warmup_iters=0,
                           background_check=True)
    assert all(r["wrong"] == 0 for r in first)              # counted while the second ran
    bench.finish_checks(engines)
    assert all(r["wrong"] == 0 for r in second)
    assert not any(e.background for e in engines)


def test_a_doorbell_serializes_a_post_at_once():
    """``RoceNic.doorbell``: what a post made sendable is serialized now, with
    no receive first (``drive`` rings every NIC after its ranks posted)."""
    clock = ManualClock(5_000_000)
    nics, ips = rail_nic_pairs(1, 400_000_000, clock)
    try:
        a, b = nics[(0, 0)], nics[(1, 0)]
        qp = a.create_qp(0x10, ips[1], 0x11, 50000)
        b.create_qp(0x11, ips[0], 0x10, 50000)
        a.post_send(qp, 1, b"credit", signaled=False)
        assert a.transmitter.stats.tx_lag_frames == 0
        a.doorbell()
        assert a.transmitter.stats.tx_lag_frames == 1          # serialized at its post
        assert a.transmitter.slot_free_ns > clock.now_ns()     # on the wire from now on
    finally:
        for nic in nics.values():
            nic.close()


def test_a_one_gpu_server_has_no_nvlink_to_cross():
    # NvlinkConfig gives a 1-GPU server rate 0: its engine has nothing to send over NVLink
    assert NvlinkSwitch(1, rate_bps=0, delay_ns=0).tx_bytes == [0]
    with pytest.raises(ValueError, match="rate_bps > 0"):
        NvlinkSwitch(2, rate_bps=0, delay_ns=0)


def test_a_failed_qp_is_reported_in_collectives_failures():
    """A server whose QP failed: its failure (rank, peer, WC status, fabric
    time) in ``failures``, its error in ``errors``, the block incomplete."""
    from pathlib import Path
    from emulator.experiment.model import load_experiment
    from emulator.experiment.servers import collectives_block
    exp = load_experiment(Path(__file__).parents[2] / "experiments" / "link-flap-allreduce.yaml")
    failure = {"rank": 0, "peer": 4, "qpn": 2052, "opcode": "SEND", "status": "RETRY_EXC_ERR",
               "at_ns": 781_000}
    results = {"server1": {"error": "rank 0 -> 4: QP 2052 SEND failed: RETRY_EXC_ERR",
                           "failure": failure, "records": [], "training": []},
               "server2": {"error": None, "complete": True, "records": [], "training": []}}
    block = collectives_block(exp, results)
    assert block["failures"] == [{"server": "server1", **failure}] and not block["complete"]
    assert block["errors"] == ["server1: rank 0 -> 4: QP 2052 SEND failed: RETRY_EXC_ERR"]
