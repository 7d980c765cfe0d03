"""NCCL's double binary tree all_reduce and PXN (issue 38): the trees' shape
against NCCL's trees.cc, results in the in-memory simulator (every execution
order the dependencies allow, every type and op), rail alignment, the
workload file's refusals, and the engine over rail-only RoceNics."""
from __future__ import annotations

import pytest

from emulator.collectives import algorithms, bench, data, pxn, report, simulate, tree
from emulator.collectives.algorithms import Params
from emulator.collectives.schedule import NVLINK, RDMA, RECV, SEND
from emulator.collectives.workload import params_of, training_params, validate_for
from emulator.errors import ConfigError
from emulator.schema.workload import parse_workload
from tests.unit.test_collectives import simulate_wrong, two_servers  # noqa: F401 (fixture)


def test_btree_is_nccls_figure():
    """trees.cc's illustration of 14 ranks: 0-8, 8-(4, 12), 4-(2, 6),
    12-(10, 13), 2-(1, 3), 6-(5, 7), 10-(9, 11)."""
    down = {r: tree.btree(14, r)[1] for r in range(14)}
    assert down == {0: [8], 8: [4, 12], 4: [2, 6], 12: [10, 13], 2: [1, 3], 6: [5, 7],
                    10: [9, 11], **{r: [] for r in (1, 3, 5, 7, 9, 11, 13)}}
    for r in range(14):
        up = tree.btree(14, r)[0]
        assert (up == -1) == (r == 0) and (up < 0 or r in down[up])


@pytest.mark.parametrize("n", range(1, 20))
def test_dtree_is_two_trees_mirrored_or_shifted(n):
    """Both trees span every rank once; the second is rooted at n-1 (even n,
    the mirror) or 1 (odd n, shifted by one: ncclGetDtreeRoots); and no rank
    but (for odd n) one is an inner node of both (the point of two trees:
    an inner node's bandwidth is used twice in one tree, once in the other)."""
    trees = [[tree.dtree(n, r)[t] for r in range(n)] for t in (0, 1)]
    for t, nodes in enumerate(trees):
        roots = [r for r, (up, _) in enumerate(nodes) if up < 0]
        assert roots == [0 if t == 0 or n == 1 else (n - 1 if n % 2 == 0 else 1)]
        assert sorted(c for _, down in nodes for c in down) == sorted(set(range(n)) - set(roots))
        for r, (up, _) in enumerate(nodes):
            assert up < 0 or r in nodes[up][1]
    if n % 2 == 0:
        inner_both = [r for r in range(n) if trees[0][r][1] and trees[1][r][1]]
        assert inner_both == []


@pytest.mark.parametrize("S,G", [(1, 1), (1, 4), (2, 1), (2, 4), (3, 3), (5, 2), (7, 1)])
@pytest.mark.parametrize("channels", [1, 3])
def test_tree_all_reduce_computes_the_sum(S, G, channels):
    """Uneven slices and parts, every execution order the dependencies
    allow (and 1 slot per connection)."""
    n = S * G
    for seed in range(3):
        assert simulate_wrong("all_reduce", "tree", S, G, 4 * n * 37 + 8, 24, 1 + seed, seed,
                              Params(channels=channels)) == 0


@pytest.mark.parametrize("dtype,op", [("float16", "sum"), ("bfloat16", "max"), ("int32", "min"),
                                      ("float32", "max")])
def test_tree_all_reduce_every_type_and_op(dtype, op):
    assert simulate_wrong("all_reduce", "tree", 3, 2, 4 * 6 * 50, 32, 2, 1,
                          Params(dtype=dtype, op=op)) == 0


def test_a_dropped_reduction_in_the_tree_is_caught():
    sch = algorithms.build("all_reduce", "tree", 2, 2, 4 * 400, 64)
    for op in sch[2].ops:
        op.reduce = False            # server 1's head overwrites with what its children send
    ins = {r: data.input_elems(r, 3, 400) for r in range(4)}
    out = simulate.run(sch, ins)
    assert data.count_wrong(out[0]["out"], data.expected("all_reduce", 0, 4, 3, 4 * 400)) > 0


def test_tree_shape_on_the_rails():
    """2 servers x 4 GPUs: a chain over NVLink from GPU c (channel c) on each
    server; the inter-server hops join the two heads (one rail); each of the
    two trees carries half the data; every rank sends (up) and receives
    (down) about the whole buffer once per tree edge."""
    S, G, size = 2, 4, 4 * 8 * 1024
    for channels in (1, 2):
        sch = algorithms.build("all_reduce", "tree", S, G, size, 4096, Params(channels=channels))
        rdma = {(a, b, c) for a, b, link, c in algorithms.channel_connections(sch) if link == RDMA}
        assert rdma == {(c % G, G + c % G, ch) for c in range(channels)
                        for ch in (c, c + channels)}
        for r, s in sch.items():
            sent = sum(o.nbytes for o in s.ops if o.kind == SEND)
            recv = sum(o.nbytes for o in s.ops if o.kind == RECV)
            assert sent == recv and size <= sent <= 3 * size, (r, sent)
    # the chain: GPU i's parent is GPU i-1 of its server, in both trees
    assert tree.neighbours(2, 4, 6, 0, 0) == (5, [7])
    assert tree.neighbours(2, 4, 4, 0, 0) == (0, [5])      # server 1's head, child of server 0
    assert tree.neighbours(2, 4, 4, 1, 0) == (-1, [5, 0])  # ... and the mirror tree's root


def test_tree_refuses_what_it_does_not_do():
    with pytest.raises(ValueError, match="tree is implemented for all_reduce only"):
        algorithms.build("broadcast", "tree", 2, 2, 64, 16, Params(root=0))
    w = parse_workload({"algorithm": "tree", "tests": [
        {"collective": "all_gather", "sizes": [64]}]}, "e.yaml")
    with pytest.raises(ConfigError) as e:
        validate_for(w, "e.yaml", 2, 2)
    assert str(e.value) == ("e.yaml: workload.tests[0].algorithm: tree is all_reduce only, "
                            "not all_gather")
    w = parse_workload({"tests": [{"collective": "all_reduce", "algorithm": "tree",
                                   "channels": 2, "sizes": [64]}]}, "e.yaml")
    validate_for(w, "e.yaml", 2, 2)
    assert params_of(w.tests[0], w).channels == 2
    w = parse_workload({"tests": [{"collective": "all_gather", "algorithm": "hierarchical",
                                   "channels": 2, "sizes": [64]}]}, "e.yaml")
    with pytest.raises(ConfigError, match=r"tests\[0\].channels: .*and tree all_reduce"):
        validate_for(w, "e.yaml", 2, 2)


def _cross_rail_bytes(sch, G):
    return sum(o.nbytes for r, s in sch.items() for o in s.ops
               if o.kind == SEND and o.link == RDMA and o.peer % G != r % G)


@pytest.mark.parametrize("coll,alg,S,G,params", [
    ("all_to_all", "ring", 2, 4, Params()), ("all_to_allv", "ring", 3, 2, Params(spread=0.5)),
    ("send_recv", "ring", 2, 4, Params(shift=3)), ("send_recv", "ring", 3, 3, Params(shift=1)),
    ("all_reduce", "ring", 3, 3, Params(channels=2)), ("all_reduce", "tree", 3, 2, Params()),
    ("broadcast", "ring", 3, 2, Params(root=3)), ("reduce_scatter", "ring", 3, 2, Params())])
def test_pxn_keeps_the_result_and_every_rdma_byte_on_its_rail(coll, alg, S, G, params):
    """With PXN no RDMA send crosses rails and as many bytes still cross
    servers; the results stay exact in every order (1 slot: the relay's
    hand-over is a dependency of its own)."""
    p = Params(**{**params.__dict__, "pxn": True})
    n = S * G
    size = 4 * n * 41
    for seed in range(3):
        assert simulate_wrong(coll, alg, S, G, size, 28, 1 + seed, seed, p) == 0
    plain = algorithms.build(coll, alg, S, G, size, 28, params)
    routed = algorithms.build(coll, alg, S, G, size, 28, p)
    assert _cross_rail_bytes(routed, G) == 0
    crossing = [sum(o.nbytes for r, s in sch.items() for o in s.ops
                    if o.kind == SEND and o.link == RDMA) for sch in (plain, routed)]
    assert crossing[0] == crossing[1] > 0
    if _cross_rail_bytes(plain, G):
        assert any(pxn.RELAY_BUF in s.buffers for s in routed.values())


def test_pxn_relay_channels_and_their_limit():
    assert pxn.relay_channel(0, 0, 2) == 2 and pxn.relay_channel(1, 7, 2) == 17
    pxn.check_fits(8, 2 * 14)
    with pytest.raises(ValueError, match="more QPs than a NIC numbers"):
        pxn.check_fits(8, 2 * 15)
    w = parse_workload({"pxn": True, "channels": 15, "tests": [
        {"collective": "all_reduce", "sizes": [4096]}]}, "e.yaml")
    with pytest.raises(ConfigError, match=r"^e.yaml: workload.pxn: pxn with 30 channels x 8 GPUs"):
        validate_for(w, "e.yaml", 2, 8)
    assert params_of(w.tests[0], w).pxn
    w = parse_workload({"pxn": True, "algorithm": "tree", "training": {
        "steps": 1, "size_bytes": 4096}}, "e.yaml")
    assert training_params(w).pxn and w.pairs() == [("all_reduce", "tree")]


@pytest.mark.parametrize("alg", ["tree", "hierarchical"])
def test_pxn_leaves_rail_aligned_all_reduces_as_they_are(alg):
    """tree and hierarchical never send across rails: PXN relays nothing."""
    plain = algorithms.build("all_reduce", alg, 3, 4, 4 * 12 * 50, 64)
    routed = algorithms.build("all_reduce", alg, 3, 4, 4 * 12 * 50, 64, Params(pxn=True))
    assert all(repr(plain[r].ops) == repr(routed[r].ops) and pxn.RELAY_BUF not in routed[r].buffers
               for r in plain)


def test_pxn_all_to_all_on_rail_only_wires(two_servers):
    """The fixture joins NIC g of one server to NIC g of the other only: an
    all_to_all runs there with PXN (everything on its rail), exactly; and
    the tree all_reduce, whose inter-server hops are rail-aligned anyway."""
    engines, _rate = two_servers
    runs = [("all_to_all", "ring", Params(pxn=True)), ("all_reduce", "tree", Params()),
            ("all_reduce", "tree", Params(pxn=True, channels=2))]
    for e in engines:
        e.connect(bench.connections_for(2, 2, runs))
    assert all(a % 2 == b % 2 for a, b, link, _ in bench.connections_for(2, 2, runs)
               if link == RDMA)
    recs = []
    for coll, alg, p in runs:
        for in_place in (False, True):
            recs += bench.measure(engines, coll, alg, 48 << 10, iters=2, warmup_iters=1,
                                  in_place=in_place, params=p)
    rows = report.collective_rows(recs, 1.0)
    assert len(rows) == 3
    assert all(r["wrong"] == 0 and r["inplace_wrong"] in (0, None) for r in rows)
    assert [r.get("pxn", False) for r in rows] == [True, False, True]
    assert "all_to_all (ring, pxn)" in report.format_table(rows)
    assert "all_reduce (tree, 2 channels, pxn)" in report.format_table(rows)
    assert all(link == NVLINK or a % 2 == b % 2
               for a, b, link in algorithms.connections(
                   algorithms.build("all_to_all", "ring", 2, 2, 64, 16, Params(pxn=True))))
