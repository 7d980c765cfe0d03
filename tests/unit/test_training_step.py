"""Parallelism-shaped training steps (issue 38): Megatron-LM's rank layout,
collectives over groups of ranks, the step's schedules in the in-memory
simulator (every piece's data exact), its phase times on the engine over
real RoceNics, the workload file's refusals and the results' files."""
from __future__ import annotations

import csv

import pytest

from emulator.collectives import algorithms, bench, report, simulate, step, training
from emulator.collectives.data import count_wrong
from emulator.collectives.groups import group_schedules, layout, ring_order
from emulator.collectives.schedule import COMPUTE, NVLINK, RDMA, RECV, SEND
from emulator.collectives.workload import validate_for
from emulator.errors import ConfigError
from emulator.schema.workload import parse_workload
from tests.unit.test_collectives import two_servers  # noqa: F401 (fixture)


def test_layout_is_megatrons_tp_innermost_then_dp_then_pp():
    g = layout(tp=2, pp=2, dp=4, ep=2)
    rank = lambda t, d, p: t + 2 * (d + 4 * p)     # noqa: E731  (order "tp-cp-ep-dp-pp")
    assert g["tp"][0] == [0, 1] and g["dp"][0] == [rank(0, d, 0) for d in range(4)] == [0, 2, 4, 6]
    assert g["pp"][0] == [0, 8]
    # expert groups: consecutive data-parallel ranks of one stage (the ep index inner)
    assert [0, 2] in g["ep"] and [4, 6] in g["ep"] and [9, 11] in g["ep"]
    for kind, size in (("tp", 2), ("pp", 2), ("dp", 4), ("ep", 2)):
        ranks = sorted(r for grp in g[kind] for r in grp)
        assert ranks == list(range(16)) and all(len(grp) == size for grp in g[kind])
    with pytest.raises(ValueError, match="ep 3 does not divide dp 4"):
        layout(2, 2, 4, 3)


def test_a_group_ring_snakes_over_servers_on_one_rail():
    assert ring_order([0, 2, 4, 6], 4) == [0, 2, 6, 4]      # 2 -> 6 and 4 -> 0: GPU to same GPU
    sch = group_schedules("all_reduce", [1, 5, 9, 13], 4, 4096, 1024)
    assert sorted(sch) == [1, 5, 9, 13]
    for r, s in sch.items():
        for op in s.ops:
            if op.kind in (SEND, RECV):
                assert op.peer in sch and op.peer % 4 == r % 4 and op.link == RDMA
    tp = group_schedules("all_reduce", [4, 5], 4, 4096, 1024)
    assert {op.link for s in tp.values() for op in s.ops if op.kind == SEND} == {NVLINK}


def test_existing_schedules_are_what_they_were():
    """A group schedule is built by ``algorithms.build`` untouched: the
    all-rank one is the same ops as before (peers, links, buffers, deps)."""
    a = algorithms.build("all_reduce", "ring", 2, 4, 8192, 1024)
    b = group_schedules("all_reduce", list(range(8)), 4, 8192, 1024)
    for r in range(8):
        assert [repr(o) for o in a[r].ops] == [repr(o) for o in b[r].ops]


SHAPES = [
    step.Shape(2, 2, 2, 2, 4096, 2048, 8192, 4096, microbatches=2, layers=2),
    step.Shape(2, 2, 2, 1, 4096, 2048, 8192, microbatches=2, layers=2, dp_overlap=True,
               dp_collective="reduce_scatter"),
    step.Shape(1, 1, 8, 4, dp_bytes=32768, ep_bytes=32768, layers=2, dp_overlap=True),
    step.Shape(4, 2, 1, 1, 4096, 2048, microbatches=3),
    step.Shape(1, 8, 1, 1, pp_bytes=3000, microbatches=2, dtype="bfloat16", op="max"),
    step.Shape(2, 1, 4, 2, 2048, 0, 16384, 2048, dtype="float16", dp_collective="reduce_scatter"),
]


def _simulated(st: step.Step, it: int, seed: int = 0):
    return simulate.run(st.schedules, {}, slots=2, seed=seed,
                        init=lambda r, bufs: step.fill_inputs(st, r, bufs, it))


@pytest.mark.parametrize("sh", SHAPES, ids=lambda s: f"tp{s.tp}pp{s.pp}dp{s.dp}ep{s.ep}")
def test_every_piece_of_a_step_computes_its_data(sh):
    st = step.build(sh, 2, 4, 1024)
    for seed in (0, 1):
        out = _simulated(st, 3, seed)
        checked = [(g, w) for r in out for g, w in step.checks(st, r, out[r], 3)]
        assert checked and sum(count_wrong(g, w()) for g, w in checked) == 0
    phases = {p.phase for ps in st.pieces.values() for p in ps}
    want = {"compute"} | {k for k in ("tp", "pp", "dp", "ep") if getattr(sh, k) > 1}
    assert phases == want


def test_a_message_of_another_group_or_step_is_caught():
    """Each piece has data of its own (its key: kind, microbatch, layer,
    group; and the step), so a message that reaches the wrong group or step
    cannot pass the check."""
    st = step.build(SHAPES[0], 2, 4, 1024)
    out = _simulated(st, 3)
    assert sum(count_wrong(g, w()) for g, w in step.checks(st, 1, out[1], 4)) > 0
    tp0, tp2 = (next(p for p in st.pieces[r] if p.phase == "tp") for r in (0, 2))
    assert tp0.group == (0, 1) and tp2.group == (2, 3)

    def init(r, bufs):              # rank 0's TP input is (the same rank of) group {2,3}'s
        step.fill_inputs(st, r, bufs, 3)
        if r == 0:
            other = {tp2.prefix + "in": bufs[tp0.prefix + "in"]}
            step.fill_inputs(step.Step(st.shape, st.schedules, {2: [tp2]}), 2, other, 3)
    out = simulate.run(st.schedules, {}, slots=2, init=init)
    assert sum(count_wrong(g, w()) for g, w in step.checks(st, 1, out[1], 3)) > 0


def test_the_chain_orders_a_ranks_pieces_and_overlap_leaves_buckets_off_it():
    sh = SHAPES[0]
    st = step.build(sh, 2, 4, 1024)
    # stage 0 (rank 0): per microbatch 2 layers forward, then the send to stage 1
    assert st.chain_phases(0)[:7] == ["compute", "tp", "ep", "compute", "tp", "ep", "pp"]
    assert st.chain_phases(4)[0] == "pp"                       # stage 1 waits for activations
    assert st.chain_phases(0)[-1] == "dp"                      # no overlap: the chain's last
    ov = step.build(step.Shape(**{**sh.__dict__, "dp_overlap": True}), 2, 4, 1024)
    assert "dp" not in ov.chain_phases(0)
    buckets = [p for p in ov.pieces[0] if p.phase == "dp"]
    assert len(buckets) == sh.layers and all(p.mark is None for p in buckets)
    s = ov.schedules[0]
    computes = [i for i, o in enumerate(s.ops) if o.kind == COMPUTE and o.compute_ns == 0]
    # a bucket waits for the last microbatch's backward compute of its layer, not the chain's end
    first = s.ops[buckets[0].first]
    assert first.deps and max(first.deps) < len(s.ops) - 1 and computes


def test_phase_times_sum_to_the_step():
    t = step.phase_times(["compute", "tp", "pp", "compute"], 100, [150, 160, 200, 260], 300)
    assert t == {"compute": 110, "tp": 10, "ep": 0, "pp": 40, "dp": 40}
    assert sum(t.values()) == 200


def _connect(engines, st):
    for e in engines:
        e.connect(algorithms.channel_connections(st.schedules)
                  | bench.connections_for(2, 2, [("all_reduce", "ring")]))


def test_a_step_on_the_engine_over_roce_nics(two_servers):  # noqa: F811
    """2 servers x 2 GPUs, tp 2 x dp 2 (ep 2): TP over NVLink, DP and MoE on
    the rails. Compute is exactly M x L x (forward + backward) per step, the
    phases tile each rank's step, every piece's data is right, and
    overlapping the buckets with the backward pass shortens the step."""
    engines, _ = two_servers
    out = {}
    for overlap in (False, True):
        sh = step.Shape(2, 1, 2, 2, 32768, 0, 65536, 16384, microbatches=2, layers=2,
                        forward_ns=100_000, backward_ns=200_000, dp_overlap=overlap)
        st = step.build(sh, 2, 2, 16384)
        _connect(engines, st)
        recs = training.train(engines, st, steps=2, warmup_steps=1)
        for r in recs:
            assert len(r["steps"]) == 2 and r["wrong"] == 0
            for s in r["steps"]:
                assert sum(s["phases_ns"].values()) == s["end_ns"] - s["start_ns"]
                assert s["phases_ns"]["compute"] == 2 * 2 * 300_000
        out[overlap] = report.training_summary(recs, 1.0)
    plain, over = out[False], out[True]
    for summ in (plain, over):
        assert summ["wrong"] == 0 and summ["phases"]["tp"]["time_us"] > 0
        assert sum(p["share"] for p in summ["phases"].values()) == pytest.approx(1.0)
    assert over["step_time_us"]["mean"] < plain["step_time_us"]["mean"]
    assert over["phases"]["dp"]["time_us"] < plain["phases"]["dp"]["time_us"]


def test_a_wrong_piece_counts_in_the_training_wrong(two_servers):  # noqa: F811
    engines, _ = two_servers
    sh = step.Shape(2, 1, 2, 1, 8192, 0, 8192)
    st = step.build(sh, 2, 2, 8192)
    _connect(engines, st)
    real = step.checks
    try:      # the check compares against another step's data: every piece is wrong
        step.checks = lambda st_, r, bufs, it: real(st_, r, bufs, it + 1)
        training.checks = step.checks
        recs = training.train(engines, st, steps=1, warmup_steps=0)
    finally:
        step.checks = training.checks = real
    assert all(r["wrong"] > 0 for r in recs)


WL = {"training": {"steps": 1, "tp": 2, "pp": 2, "dp": 2, "tp_bytes": 64, "pp_bytes": 64,
                   "dp_bytes": 64}}


def _wl(**training):
    return {"training": {**WL["training"], **training}}


@pytest.mark.parametrize("data_,field,reason", [
    (_wl(size_bytes=64), "workload.training.size_bytes", "is for a one-collective loop"),
    (_wl(collective="all_gather"), "workload.training.collective", "one-collective loop"),
    (_wl(tp_bytes=None), "workload.training.tp_bytes", "required with tp 2"),
    (_wl(ep=1, ep_bytes=64), "workload.training.ep_bytes", "ep is 1: there is no EP traffic"),
    (_wl(ep=4, ep_bytes=64), "workload.training.ep", "4 does not divide dp 2"),
    ({"training": {"steps": 1, "size_bytes": 64, "dp_overlap": True}},
     "workload.training.dp_overlap", "is for a step shaped by parallelism"),
    ({"training": {"steps": 1}}, "workload.training.size_bytes", "required"),
    (_wl(microbatches=17), "workload.training.microbatches", "<= 16"),
])
def test_training_shape_errors_are_one_line(data_, field, reason):
    with pytest.raises(ConfigError) as e:
        parse_workload(data_, "exp.yaml")
    assert e.value.field == field and reason in e.value.reason
    assert str(e.value).startswith(f"exp.yaml: {field}: ") and "\n" not in str(e.value)


@pytest.mark.parametrize("training_,servers,G,field,reason", [
    ({}, 2, 2, "workload.training", "tp 2 x pp 2 x dp 2 = 8 ranks, the fabric has 4 "
                                     "(2 servers x 2 GPUs)"),
    ({"tp": 4, "pp": 1, "dp": 2, "pp_bytes": None}, 4, 2, "workload.training.tp",
     "4 ranks would span servers: a TP group is inside one NVLink domain, tp must divide the 2"),
    ({"dp": None}, 3, 2, "workload.training.tp", "tp 2 x pp 2 does not divide the 6 ranks"),
    ({"dp": None, "dp_bytes": None}, 4, 4, "workload.training.dp_bytes", "required with dp 4"),
    ({"dp_bytes": 88, "dp_overlap": True, "layers": 2, "dp_collective": "reduce_scatter"}, 2, 4,
     "workload.training.dp_bytes", "88 B is not a multiple of 4 B (float32) x 2 buckets "
                                   "(layers, dp_overlap) x dp 2 (reduce_scatter) = 16 B"),
    ({"ep": 2, "ep_bytes": 4}, 2, 4, "workload.training.ep_bytes",
     "4 B is not a multiple of 4 B (float32) x ep 2 = 8 B"),
])
def test_training_shape_fabric_errors(training_, servers, G, field, reason):
    w = parse_workload(_wl(**training_), "e.yaml")
    with pytest.raises(ConfigError) as e:
        validate_for(w, "e.yaml", servers, G)
    assert e.value.field == field and reason in e.value.reason, str(e.value)


def test_a_step_that_would_not_fit_in_memory_is_refused(monkeypatch):
    from emulator.collectives import workload
    w = parse_workload(_wl(microbatches=16, layers=16, tp_bytes=1 << 20), "e.yaml")
    validate_for(w, "e.yaml", 2, 4)
    monkeypatch.setattr(workload, "memory_budget_bytes", lambda: 64 << 20)
    with pytest.raises(ConfigError) as e:
        validate_for(w, "e.yaml", 2, 4)
    assert e.value.field == "workload.training" and "do not fit this machine's memory budget " \
        "(64.0 MiB)" in e.value.reason and "8 ranks" in e.value.reason
    # the bound holds the buffers a step builds
    for sh in SHAPES:
        st = step.build(sh, 2, 4, 1024)
        tr = parse_workload({"training": {"steps": 1, "tp": sh.tp, "pp": sh.pp, "dp": sh.dp,
                                          **{f"{k}_bytes": getattr(sh, f"{k}_bytes")
                                             for k in ("tp", "pp", "dp", "ep")
                                             if getattr(sh, k) > 1},
                                          "ep": sh.ep, "microbatches": sh.microbatches,
                                          "layers": sh.layers}}, "e.yaml").training
        assert max(sum(s.buffers.values()) for s in st.schedules.values()) \
            <= workload._step_buffer_bytes(tr)


def test_dp_defaults_to_the_ranks_left_and_shape_follows_the_file():
    w = parse_workload(_wl(dp=None, compute_us=10, dp_bytes=256), "e.yaml")
    validate_for(w, "e.yaml", 4, 4)
    sh = step.shape_of(w.training, 16, dilation=3.0)
    assert (sh.tp, sh.pp, sh.dp, sh.ep) == (2, 2, 4, 1)
    assert (sh.forward_ns, sh.backward_ns) == (30_000, 60_000)     # clock ns: x the dilation
    one = parse_workload({"training": {"steps": 1, "size_bytes": 64}}, "e.yaml")
    assert not one.training.parallel and one.pairs() == [("all_reduce", "ring")]


def test_training_files_give_each_phase_and_the_step(tmp_path):
    recs = [{"rank": r, "nranks": 2, "shape": step.Shape(2, 1, 1, tp_bytes=64).describe(),
             "steps": [{"step": 1, "start_ns": 0, "end_ns": 1000 * (r + 1) * 2,
                        "phases_ns": {"compute": 1000 * (r + 1), "tp": 1000 * (r + 1), "ep": 0,
                                      "pp": 0, "dp": 0}}],
             "wrong": 0, "lost_ns": 0} for r in range(2)]
    tr = report.training_summary(recs, 2.0)
    assert tr["step_time_us"]["mean"] == 1.5 and tr["phases"]["tp"]["time_us"] == 0.75
    assert tr["phases"]["tp"]["share"] == 0.5 and tr["phases"]["tp"]["time_max_us"] == 1.0
    paths = report.write(tmp_path, [], tr)
    rows = list(csv.DictReader(open(paths["training_csv"])))
    assert [r["phase"] for r in rows] == ["compute", "tp", "ep", "pp", "dp", "step"]
    assert sum(float(r["share"]) for r in rows[:-1]) == pytest.approx(1.0)
    assert paths["training"].exists()
