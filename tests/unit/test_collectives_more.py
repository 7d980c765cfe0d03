"""broadcast, reduce, send_recv and all_to_allv (issue 38): their schedules
in the in-memory simulator, nccl-tests' sizes, bandwidth factors and table,
the workload file's refusals, and the engine over real RoceNics."""
from __future__ import annotations

import numpy as np
import pytest

from emulator.collectives import agent, algorithms, arith, bench, data, dtypes, report, simulate
from emulator.collectives.algorithms import Params
from emulator.collectives.engine import CollectiveEngine
from emulator.collectives.schedule import NVLINK, RDMA, SEND
from emulator.collectives.workload import params_of, runs, validate_for
from emulator.errors import ConfigError
from emulator.schema.workload import parse_workload
from tests.unit.test_collectives import simulate_wrong, two_servers  # noqa: F401 (fixture)


@pytest.mark.parametrize("S,G", [(1, 1), (1, 3), (2, 4), (3, 3)])
@pytest.mark.parametrize("coll,params", [
    ("broadcast", Params(root=0)), ("broadcast", Params(root=5)),
    ("reduce", Params(root=0)), ("reduce", Params(root=4)),
    ("send_recv", Params()), ("send_recv", Params(shift=3)),
    ("all_to_allv", Params()), ("all_to_allv", Params(spread=0.0)),
    ("all_to_allv", Params(spread=0.4))])
def test_new_collectives_compute_their_result(coll, params, S, G):
    """Every rank's output exactly (a reduce's non-roots: untouched), with
    uneven slices and every execution order the dependencies allow."""
    n = S * G
    p = Params(root=min(params.root, n - 1), shift=params.shift, spread=params.spread)
    for seed in range(3):
        assert simulate_wrong(coll, "ring", S, G, 4 * n * 37 + 8, 24, 1 + seed, seed, p) == 0


@pytest.mark.parametrize("coll", ["broadcast", "reduce"])
def test_rooted_in_place_runs_in_one_buffer(coll):
    S, G, size, root = 2, 3, 4 * 1001, 4
    n, p = S * G, Params(root=root)
    sch = algorithms.in_place(algorithms.build(coll, "ring", S, G, size, 40, p), coll, n, size)
    assert all("in" not in s.buffers for s in sch.values())
    ins = {r: data.input_elems(r, 1, size // 4) for r in range(n)}
    for seed in range(3):
        out = simulate.run(sch, ins, slots=2, seed=seed, input_at={r: ("out", 0) for r in ins})
        for r in range(n):
            want = data.expected(coll, r, n, 1, size, p)
            want = ins[r] if want is None else want       # a non-root keeps its input
            assert data.count_wrong(out[r]["out"], want) == 0, (r, seed)


def test_a_wrong_root_or_a_lost_slice_is_caught():
    """The check is not vacuous: another root's input, or one dropped
    reduction, makes elements wrong."""
    S, G, size = 1, 4, 4 * 400
    assert simulate_wrong("broadcast", "ring", S, G, size, 64, 2, 0, Params(root=2)) == 0
    sch = algorithms.build("broadcast", "ring", S, G, size, 64, Params(root=2))
    ins = {r: data.input_elems(r, 3, size // 4) for r in range(4)}
    out = simulate.run(sch, ins)
    assert data.count_wrong(out[1]["out"], data.expected("broadcast", 1, 4, 3, size,
                                                         Params(root=1))) > 0
    sch = algorithms.build("reduce", "ring", S, G, size, 64, Params(root=0))
    for s in sch.values():
        for op in s.ops:
            op.reduce = False                  # overwrite instead of adding
    out = simulate.run(sch, ins)
    assert data.count_wrong(out[0]["out"], data.expected("reduce", 0, 4, 3, size)) > 0


def test_chain_bytes_follow_the_ring_and_its_rails():
    """broadcast: every rank but the chain's last sends the whole buffer
    once (the root's NIC carries S bytes: busbw factor 1); reduce likewise
    towards the root; both over the snake ring's rail-aligned hops."""
    S, G, size = 2, 4, 4 * 8 * 1000
    for coll in ("broadcast", "reduce"):
        sch = algorithms.build(coll, "ring", S, G, size, 1 << 14, Params(root=5))
        sent = {r: sum(o.nbytes for o in s.ops if o.kind == SEND) for r, s in sch.items()}
        assert sorted(sent.values()) == [0] + [size] * 7
        assert (sent[5] == size) == (coll == "broadcast")   # the root sends only a broadcast
        for a, b, link in algorithms.connections(sch):
            assert link == NVLINK or a % G == b % G


def test_send_recv_pairs_and_pipeline_stage_shift():
    S, G, size = 3, 4, 4096
    sch = algorithms.build("send_recv", "ring", S, G, size, 1024)      # nccl-tests: r -> r + 1
    assert {(a, b) for a, b, _ in algorithms.connections(sch)} == \
        {tuple(sorted((r, (r + 1) % 12))) for r in range(12)}
    sch = algorithms.build("send_recv", "ring", S, G, size, 1024, Params(shift=G))
    conns = algorithms.connections(sch)
    assert all(link == RDMA and a % G == b % G for a, b, link in conns)  # one rail per GPU
    for r, s in sch.items():
        assert sum(o.nbytes for o in s.ops if o.kind == SEND) == size
        assert {o.peer for o in s.ops if o.kind == SEND} == {(r + G) % 12}


def test_all_to_allv_sizes_are_nccl_tests_generated_pattern():
    """src/alltoallv.cu: distance-weighted, 16-byte aligned; spread 0 uniform."""
    m = algorithms.alltoallv_bytes(4, 4096, 1.0)
    # total 4096 B: peer at distance d gets d x 4096 / 6 B, rounded down to 16
    assert m[0] == [0, 672, 1360, 2048] and m[1] == [2048, 0, 672, 1360]
    assert algorithms.alltoallv_bytes(4, 4096, 0.0) == [[1024] * 4] * 4
    assert algorithms.alltoallv_bytes(1, 100, 1.0) == [[96]]
    assert algorithms.algbw_bytes("all_to_allv", 4, 4096, Params()) == 4080
    assert algorithms.algbw_bytes("broadcast", 4, 4096, Params()) == 4096
    sch = algorithms.build("all_to_allv", "ring", 1, 4, 4096, 512)
    assert sch[0].buffers == {"in": 4080, "out": 4080}
    assert data.input_bytes("all_to_allv", 4, 4096, 2) == 4080


def test_busbw_factors_are_nccl_tests():
    assert report.busbw_factor("broadcast", 8) == 1.0
    assert report.busbw_factor("reduce", 8) == 1.0
    assert report.busbw_factor("send_recv", 8) == 1.0
    assert report.busbw_factor("all_to_allv", 8) == pytest.approx(0.875)


def _records(coll, n, size, time_ns, **extra):
    return [{"rank": r, "collective": coll, "algorithm": "ring", "size_bytes": size,
             "nranks": n, "iters": 2, "warmup_iters": 1, "in_place": False, "start_ns": 0,
             "end_ns": 2 * time_ns, "wrong": 0, **extra} for r in range(n)]


def test_table_has_nccl_tests_programs_roots_and_redops():
    rows = report.collective_rows(
        _records("broadcast", 4, 1 << 20, 100_000, root=2)
        + _records("broadcast", 4, 1 << 20, 100_000, root=3)
        + _records("reduce", 4, 1 << 20, 100_000, root=1)
        + _records("send_recv", 4, 1 << 20, 100_000)
        + _records("all_to_allv", 4, 4096, 1_000, algbw_bytes=4080), 1.0)
    assert len(rows) == 5
    b2, b3, red, sr, av = rows
    assert (b2["root"], b3["root"], red["root"]) == (2, 3, 1) and "root" not in sr
    assert b2["busbw_GBps"] == b2["algbw_GBps"] == pytest.approx(10.48576)
    assert av["algbw_GBps"] == pytest.approx(4.08) and av["busbw_GBps"] == pytest.approx(3.06)
    text = report.format_table(rows)
    for prog in ("broadcast_perf", "reduce_perf", "sendrecv_perf", "alltoallv_perf"):
        assert f"# Collective test starting: {prog}\n" in text
    lines = [x.split() for x in text.splitlines() if not x.startswith("#")]
    assert [x[2:5] for x in lines] == [["float", "none", "2"], ["float", "none", "3"],
                                       ["float", "sum", "1"], ["float", "sum", "-1"],
                                       ["float", "none", "-1"]]
    j = report.nccl_tests_json(rows)
    assert [r["root"].strip() for r in j["results"]] == ["2", "3", "1", "-1", "-1"]
    assert j["results"][3]["experiment_name"] == "sendrecv_perf ring"


def test_workload_params_and_fabric_checks():
    w = parse_workload({"tests": [{"collective": "reduce", "sizes": [64], "root": 3},
                                  {"collective": "send_recv", "sizes": [64], "shift": 4},
                                  {"collective": "all_to_allv", "sizes": [64], "spread": 0.5},
                                  {"collective": "broadcast", "sizes": [6], "root": 0}]},
                       "e.yaml")
    assert [params_of(t, w) for t in w.tests] == [Params(root=3), Params(shift=4),
                                               Params(spread=0.5), Params()]
    assert runs(w)[0] == ("reduce", "ring", Params(root=3))
    with pytest.raises(ConfigError, match=r"^e.yaml: workload.tests\[3\].sizes\[0\]: 6 B is not "
                                          r"a multiple of 4 B \(float32\)$"):
        validate_for(w, "e.yaml", 2, 4)
    w.tests.pop()
    validate_for(w, "e.yaml", 2, 4)
    with pytest.raises(ConfigError, match=r"^e.yaml: workload.tests\[0\].root: 3 is not below "
                                          r"the 2 ranks$"):
        validate_for(w, "e.yaml", 1, 2)
    with pytest.raises(ConfigError, match=r"tests\[1\].shift: 4 is not below the 4 ranks"):
        validate_for(w, "e.yaml", 2, 2)


def test_new_collectives_on_the_engine_over_roce_nics(two_servers):  # noqa: F811
    """Real NICs, real transport: the new collectives out of place and in
    place, correct, the connections ``connections_for`` opened sufficing.
    (The fixture joins NICs rail to rail only: all_to_allv, which crosses
    rails, runs on the rail fabric, tests/integration.)"""
    engines, rate = two_servers
    todo = [("broadcast", Params(root=3)), ("reduce", Params(root=1)),
            ("send_recv", Params(shift=2))]
    for e in engines:
        e.connect(bench.connections_for(2, 2, [(c, "ring", p) for c, p in todo]))
    recs = []
    for coll, p in todo:
        for in_place in (False, True):
            recs += bench.measure(engines, coll, "ring", 48 << 10, iters=2, warmup_iters=1,
                                  in_place=in_place, params=p)
    rows = {r["collective"]: r for r in report.collective_rows(recs, 1.0)}
    assert set(rows) == {"broadcast", "reduce", "send_recv"}
    for coll, r in rows.items():
        assert r["wrong"] == 0, coll
        assert r["inplace_wrong"] == (None if coll in algorithms.OWN_BUFFERS else 0), coll
        # the slowest rank cannot beat the one RDMA hop's line rate (busbw = algbw,
        # factor 1; the mean over ranks can: a root is done once its slots are out)
        assert (48 << 10) / (r["time_max_us"] * 1e3) <= rate / 8e9 * 1.001, coll
    assert rows["reduce"]["root"] == 1 and rows["broadcast"]["root"] == 3


# -- data types and reduction ops ---------------------------------------------------------

TYPES = ("float32", "float16", "bfloat16", "int32")


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("coll,alg,S,G", [("all_reduce", "ring", 2, 4),
                                          ("all_reduce", "hierarchical", 3, 4),
                                          ("reduce_scatter", "ring", 3, 3),
                                          ("reduce", "ring", 4, 6)])
def test_types_and_ops_reduce_exactly(dtype, op, coll, alg, S, G):
    n = S * G
    p = Params(root=n - 1, dtype=dtype, op=op)
    size = dtypes.elem_bytes(dtype) * n * 41
    for seed in range(2):
        assert simulate_wrong(coll, alg, S, G, size, 36, 1 + seed, seed, p) == 0


@pytest.mark.parametrize("dtype", TYPES)
def test_moves_keep_every_type_bit_for_bit(dtype):
    n = 6
    for coll in ("all_gather", "broadcast", "all_to_allv", "send_recv"):
        p = Params(root=2, shift=1, dtype=dtype)
        assert simulate_wrong(coll, "ring", 2, 3, dtypes.elem_bytes(dtype) * n * 50, 20, 2, 1,
                              p) == 0


def test_a_sum_is_exact_in_any_order():
    """nccl-tests' principle (verifiable.cu): no partial sum leaves the
    integers the type holds, so every order gives the same bits. Shown on
    the worst order: all of one sign first."""
    for dtype, n in (("float16", 24), ("bfloat16", 24), ("bfloat16", 256), ("float16", 64)):
        amp = dtypes.amplitude(dtype, n)
        assert amp * n <= dtypes.exact_limit(dtype)
        x = np.stack([arith.to_f32(data.input_elems(r, 0, 502, dtype, n), dtype)
                      for r in range(n)])
        assert np.abs(x).max() == amp and np.array_equal(x, np.round(x))
        worst = np.sort(x, axis=0)                      # every negative first, per element
        assert np.abs(np.cumsum(worst, axis=0)).max() <= dtypes.exact_limit(dtype)
    assert dtypes.amplitude("float32", 8) == dtypes.amplitude("int32", 10 ** 6) == 125
    with pytest.raises(ValueError, match="at most 256 ranks"):
        dtypes.amplitude("bfloat16", 257)


def test_an_unscaled_float16_sum_would_depend_on_the_order():
    """Why the inputs shrink: 125 x 24 ranks passes 2048, where float16
    rounds, and two orders give two answers."""
    x = np.array([125.0] * 20 + [-125.0] * 4 + [1.0], np.float16)
    fwd = rev = np.float16(0)
    for v in x:
        fwd = np.float16(fwd + v)
    for v in x[::-1]:
        rev = np.float16(rev + v)
    assert fwd != rev


def test_bfloat16_rounds_to_nearest_even():
    f = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 256.0, -3.5, 1 + 2 ** -7], np.float32)
    back = arith.bf16_to_f32(arith.f32_to_bf16(f))
    assert list(back) == [1.0, 1.0, 1 + 2 ** -6, 256.0, -3.5, 1 + 2 ** -7]
    acc = arith.f32_to_bf16(np.array([100.0, 3.0], np.float32))
    arith.combiner("sum", "bfloat16")(acc, arith.f32_to_bf16(np.array([28.0, -5.0], np.float32)))
    assert list(arith.bf16_to_f32(acc)) == [128.0, -2.0]
    arith.combiner("max", "bfloat16")(acc, arith.f32_to_bf16(np.array([1.0, 7.0], np.float32)))
    assert list(arith.bf16_to_f32(acc)) == [128.0, 7.0]


def test_types_and_ops_in_the_table_and_the_file():
    rows = report.collective_rows(
        _records("all_reduce", 4, 1 << 20, 100_000, dtype="float16", op="max")
        + _records("all_reduce", 4, 1 << 20, 100_000, dtype="bfloat16", op="sum")
        + _records("all_gather", 4, 1 << 20, 100_000, dtype="int32", op="min")
        + _records("all_reduce", 4, 1 << 20, 100_000), 1.0)
    assert [(r["type"], r["redop"], r["count"]) for r in rows] == [
        ("half", "max", 1 << 19), ("bfloat16", "sum", 1 << 19), ("int32", "none", 1 << 18),
        ("float", "sum", 1 << 18)]
    assert not any("dtype" in r or "op" in r for r in rows)     # rows keep their keys
    text = report.format_table(rows)
    assert text.count("# Collective test starting: all_reduce_perf") == 3   # one per type/op
    w = parse_workload({"dtype": "bfloat16", "op": "min",
                        "tests": [{"collective": "all_reduce", "sizes": [64]},
                                  {"collective": "reduce", "root": 0, "sizes": [64],
                                   "dtype": "int32", "op": "max"}]}, "e.yaml")
    assert [params_of(t, w) for t in w.tests] == [Params(dtype="bfloat16", op="min"),
                                                  Params(dtype="int32", op="max")]


@pytest.mark.parametrize("data_,servers,field,reason", [
    ({"dtype": "bfloat16", "tests": [{"collective": "all_reduce", "sizes": [1024]}]}, 64,
     "workload.dtype", "bfloat16: a sum of 512 ranks' inputs is not exact in every order "
                       "(at most 256 ranks)"),
    ({"tests": [{"collective": "all_reduce", "sizes": [6], "dtype": "int32"}]}, 1,
     "workload.tests[0].sizes[0]", "6 B is not a multiple of 4 B (int32)"),
    ({"tests": [{"collective": "all_gather", "sizes": [36], "dtype": "float16"}]}, 1,
     "workload.tests[0].sizes[0]", "36 B is not a multiple of 2 B x 8 ranks = 16 B"),
])
def test_type_refusals_name_the_field(data_, servers, field, reason):
    w = parse_workload(data_, "e.yaml")
    with pytest.raises(ConfigError) as e:
        validate_for(w, "e.yaml", servers, 8)
    assert str(e.value) == f"e.yaml: {field}: {reason}"


@pytest.mark.parametrize("data_,field,reason", [
    ({"dtype": "bfloat", "tests": [{"collective": "all_reduce", "sizes": [64]}]},
     "workload.dtype", "float32"),
    ({"tests": [{"collective": "broadcast", "root": 0, "sizes": [64], "op": "max"}]},
     "workload.tests[0].op", "broadcast reduces nothing"),
    ({"op": "prod", "tests": [{"collective": "all_reduce", "sizes": [64]}]}, "workload.op", ""),
])
def test_type_and_op_file_errors_are_one_line(data_, field, reason):
    with pytest.raises(ConfigError) as e:
        parse_workload(data_, "e.yaml")
    assert e.value.field == field and reason in e.value.reason and "\n" not in str(e.value)


def test_types_and_ops_on_the_engine_over_roce_nics(two_servers):  # noqa: F811
    """The transport moves bytes; the engine reduces in each type."""
    engines, _ = two_servers
    todo = [("all_reduce", "ring", Params(dtype="float16", op="max")),
            ("all_reduce", "hierarchical", Params(dtype="bfloat16")),
            ("reduce_scatter", "ring", Params(dtype="int32", op="min")),
            ("reduce", "ring", Params(root=2, dtype="bfloat16", op="sum"))]
    for e in engines:
        e.connect(bench.connections_for(2, 2, todo))
    recs = []
    for coll, alg, p in todo:
        for in_place in (False, True):
            recs += bench.measure(engines, coll, alg, 24 << 10, iters=2, warmup_iters=1,
                                  in_place=in_place, params=p)
    rows = report.collective_rows(recs, 1.0)
    assert [(r["type"], r["redop"]) for r in rows] == [("half", "max"), ("bfloat16", "sum"),
                                                        ("int32", "min"), ("bfloat16", "sum")]
    assert all(r["wrong"] == 0 and r["inplace_wrong"] == 0 for r in rows)


# -- channels -----------------------------------------------------------------------------

CHANNEL_COLLS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")


@pytest.mark.parametrize("coll", CHANNEL_COLLS)
@pytest.mark.parametrize("channels,S,G", [(2, 2, 4), (4, 2, 4), (3, 3, 2), (5, 1, 3)])
def test_channels_split_the_data_and_compute_the_collective(coll, channels, S, G):
    n = S * G
    p = Params(root=n - 1, channels=channels, dtype="float16", op="max" if coll == "reduce"
               else "sum")
    for seed in range(2):
        assert simulate_wrong(coll, "ring", S, G, 2 * n * 61, 24, 1 + seed, seed, p) == 0


def test_channel_rings_spread_the_server_hops_over_every_rail():
    """Ring c rotates every server's GPUs by c: its server-to-server hops
    stay on a rail (c-1 one way, c the other), G channels use every rail,
    each channel has connections (QPs) of its own, and each rank still
    sends 2(n-1)/n of the buffer in all."""
    S, G, size = 2, 4, 2 * 4 * 8 * 4 * 100
    assert algorithms.ring_order(S, G, 0) == algorithms.snake_order(S, G)
    assert algorithms.ring_order(S, G, 1) == [1, 2, 3, 0, 4, 7, 6, 5]
    sch = algorithms.build("all_reduce", "ring", S, G, size, 1 << 20, Params(channels=G))
    conns = algorithms.channel_connections(sch)
    rdma = {(a, b, c) for a, b, link, c in conns if link == RDMA}
    assert all(a % G == b % G for a, b, _ in rdma)
    assert {a % G for a, _, _ in rdma} == set(range(G))                 # every rail
    assert {c for _, _, c in rdma} == set(range(G)) and len(rdma) == 2 * G
    for s in sch.values():
        assert sum(o.nbytes for o in s.ops if o.kind == SEND) == size * 2 * 7 // 8


def test_one_channel_is_the_ring_it_was():
    """channels: 1 builds the very schedule of before (the shipped files'
    results are unchanged)."""
    for coll in CHANNEL_COLLS:
        a = algorithms.build(coll, "ring", 2, 4, 4 * 8 * 300, 96, Params(root=3))
        b = algorithms.build(coll, "ring", 2, 4, 4 * 8 * 300, 96, Params(root=3, channels=1))
        assert all(repr(a[r].ops) == repr(b[r].ops) for r in a)
        assert all(o.chan == 0 for s in a.values() for o in s.ops)


def test_channels_refused_where_nothing_runs_rings():
    with pytest.raises(ValueError, match="runs one channel"):
        algorithms.build("all_to_all", "ring", 1, 4, 4096, 512, Params(channels=2))
    with pytest.raises(ValueError, match="runs one channel"):
        algorithms.build("all_reduce", "hierarchical", 2, 2, 4096, 512, Params(channels=2))
    w = parse_workload({"channels": 4, "tests": [
        {"collective": "all_reduce", "sizes": [64]},
        {"collective": "all_to_all", "sizes": [64]},
        {"collective": "all_reduce", "sizes": [64], "algorithm": "hierarchical"},
        {"collective": "broadcast", "root": 0, "sizes": [64], "channels": 2}]}, "e.yaml")
    assert [params_of(t, w).channels for t in w.tests] == [4, 1, 1, 2]    # workload's: rings only
    validate_for(w, "e.yaml", 2, 2)
    bad = parse_workload({"tests": [{"collective": "send_recv", "sizes": [64], "channels": 2}]},
                         "e.yaml")
    with pytest.raises(ConfigError) as e:
        validate_for(bad, "e.yaml", 2, 2)
    assert str(e.value).startswith("e.yaml: workload.tests[0].channels: send_recv (ring) runs "
                                   "one channel")
    with pytest.raises(ConfigError, match=r"workload.channels: must be <= 32"):
        parse_workload({"channels": 33, "tests": [{"collective": "all_reduce", "sizes": [64]}]},
                       "e.yaml")


def test_two_channels_use_both_rails_both_ways(two_servers):  # noqa: F811
    """On real NICs: one ring sends server 0 -> 1 on one rail and back on
    the other; two channels use both rails both ways, so the all-reduce
    runs near twice as fast (the NVLink domain is 4x a NIC)."""
    engines, rate = two_servers
    todo = [("all_reduce", "ring", Params()), ("all_reduce", "ring", Params(channels=2))]
    for e in engines:
        e.connect(bench.connections_for(2, 2, todo))
    recs = []
    for coll, alg, p in todo:
        recs += bench.measure(engines, coll, alg, 256 << 10, iters=2, warmup_iters=1, params=p)
    one, two = report.collective_rows(recs, 1.0)
    assert "channels" not in one and two["channels"] == 2
    assert one["wrong"] == two["wrong"] == 0
    link_GBps = rate / 8e9
    assert one["busbw_GBps"] <= link_GBps * 1.03
    assert two["busbw_GBps"] > 1.6 * one["busbw_GBps"]
    assert two["busbw_GBps"] <= 2 * link_GBps * 1.03
    assert "all_reduce (ring, 2 channels), 4 ranks" in report.format_table([one, two])


def test_a_server_agent_builds_every_schedule_before_the_start():
    """Tests and training, in their type, op and channels: none is left to
    be built between two phases, where nobody serves the NICs."""
    spec = parse_workload({"dtype": "float16", "channels": 2,
                           "tests": [{"collective": "reduce", "root": 1, "sizes": [512]}],
                           "training": {"steps": 1, "size_bytes": 256}}, "e.yaml")
    eng = CollectiveEngine(server=0, servers=2, nics=[None, None], rank_ips={},
                           nvlink_rate_bps=1e9, nvlink_delay_ns=0, slice_bytes=128)
    agent._prepare(spec, eng)
    built = {(k[0], k[2], k[4], k[5]) for k in eng.schedules}
    f16 = dict(dtype="float16", channels=2)
    assert {("reduce", 512, False, Params(root=1, **f16)),
            ("reduce", 512, True, Params(root=1, **f16)),
            ("all_reduce", 256, False, Params(**f16))} <= built
