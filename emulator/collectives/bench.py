"""nccl-tests-style measurement and a training-step loop on engines.

``measure``: per (collective, size): ``warmup_iters`` untimed iterations, a
barrier, ``iters`` timed iterations back to back, then a check of the last
iteration's output (outside the timed loop, like nccl-tests ``-c 1``).
Like nccl-tests (default ``-a 1``), each rank times its own loop from the
moment it leaves the barrier to the end of its last iteration, divided by
``iters``; the report averages the ranks (and keeps the slowest). The barrier
is a real collective over the same connections (an all-reduce of one float
per rank), so no rank starts timing before every rank has entered.

``train``: ``steps`` iterations of compute (``compute_ns`` wall, during which
the step's gradients are written: the input of step k is the deterministic
input of iteration k) then the collective; the step time is the time from
the start of compute to the end of the collective.

Every function takes a list of engines: one in a server agent (one process
per server), several in single-process tests. All return raw per-rank
records with wall stamps of the engines' clock; ``report`` converts.
"""
from __future__ import annotations

import numpy as np

from . import algorithms
from .dtypes import elem_bytes
from .data import count_wrong_pieces, expected, input_bytes, input_elems
from .engine import CollectiveEngine, RankRun, drive, run_background

BARRIER_SLICE_BYTES = 4


def schedules(engines, collective: str, algorithm: str, size_bytes: int,
              in_place: bool = False, slice_bytes: int | None = None,
              params: algorithms.Params = algorithms.Params()) -> dict:
    """Every rank's schedule (``algorithms.build``, ``in_place``), built once
    per engine set: building one took 0.5-0.9 ms, in the gap between two
    phases where nobody serves the NICs. ``prepare`` builds them all before
    the start."""
    e0 = engines[0]
    slice_bytes = e0.slice_bytes if slice_bytes is None else slice_bytes
    key = (collective, algorithm, size_bytes, slice_bytes, in_place, params)
    sch = e0.schedules.get(key)
    if sch is None:
        n = e0.servers * e0.G
        sch = algorithms.build(collective, algorithm, e0.servers, e0.G, size_bytes, slice_bytes,
                               params)
        if in_place:
            sch = algorithms.in_place(sch, collective, n, size_bytes)
        e0.schedules[key] = sch
    return sch


def _barrier_schedules(engines, algorithm: str) -> dict:
    e0 = engines[0]
    return schedules(engines, "all_reduce", algorithm, 4 * e0.servers * e0.G,
                     slice_bytes=BARRIER_SLICE_BYTES)


def prepare(engines, rows) -> None:
    """Build the schedules of ``rows`` = [(collective, algorithm, size_bytes,
    in_place[, params])] and of their barriers before the start."""
    for collective, algorithm, size_bytes, in_place, *params in rows:
        schedules(engines, collective, algorithm, size_bytes, in_place, params=params[0]
                  if params else algorithms.Params())
        _barrier_schedules(engines, algorithm)


def _check_later(engines, rank: int, got, want, rec: dict) -> None:
    """Count ``rec["wrong"]`` (``got`` against ``want()``) in the idle time of
    the event loop of ``rank``'s engine, a piece at a time."""
    e = next(e for e in engines if rank in e.ranks)
    e.background.append(count_wrong_pieces(got, want, rec))


def finish_checks(engines) -> None:
    """Run what is left of the result checks (``measure`` leaves them to the
    event loop's idle time): every record's ``wrong`` is set after this."""
    run_background(engines)


def _runs(engines, sch, iterations, compute_ns=0, fill=None, bufs=None):
    runs = []
    for e in engines:
        for r in e.ranks:
            s = sch[r]
            b = bufs[r] if bufs is not None else e.new_buffers(s)
            runs.append(RankRun(r, e.prepare(s), b, e.conns[r], iterations, compute_ns, fill,
                                e.clock))
    return runs


def _lost_ns(engines) -> list[list[int]]:
    """Per engine, per NIC, the clock time it has lost to the process being
    late (``RoceNic.lost_ns``)."""
    return [[n.lost_ns() for n in e.nics] for e in engines]


def _lost_by_rank(before: list[list[int]], engines) -> dict[int, int]:
    """Per rank, the most time one NIC of its engine lost since ``before``:
    what a timed phase lost (its result is distorted by about that much)."""
    return {r: max((b - a for a, b in zip(nb, na)), default=0)
            for e, nb, na in zip(engines, before, _lost_ns(engines)) for r in e.ranks}


def _filler(params: algorithms.Params, n: int):
    """A training step's gradients: the input of its iteration."""
    def fill(run, iteration):
        x = run.bufs["in"]
        x[:] = input_elems(run.rank, iteration, x.size, params.dtype, n)
    return fill


def barrier(engines: list[CollectiveEngine], algorithm: str, timeout_s: float = 60.0) -> dict:
    runs = _runs(engines, _barrier_schedules(engines, algorithm), [0])
    drive(engines, runs, timeout_s)
    return {r.rank: r.records[0][3] for r in runs}


def connections_for(servers: int, gpus: int, pairs: list[tuple]) -> set:
    """Every connection (a, b, link, channel) the (collective, algorithm[,
    params]) ``pairs`` and the barrier use. all_to_allv's, whose pairs with no bytes depend on the
    size, are all_to_all's: every pair."""
    out = set()
    algs = {p[1] for p in pairs}
    for coll, alg, *params in set(pairs) | {("all_reduce", a) for a in algs}:
        coll = "all_to_all" if coll == "all_to_allv" else coll
        p = params[0] if params else algorithms.Params()
        # trees: an element at least on each of their 2 x channels parts
        per_rank = 2 * p.channels if alg == "tree" else 1
        out |= algorithms.channel_connections(algorithms.build(
            coll, alg, servers, gpus, 4 * servers * gpus * per_rank, 4, p))
    return out


def measure(engines, collective: str, algorithm: str, size_bytes: int, iters: int,
            warmup_iters: int = 1, check: bool = True, timeout_s: float = 60.0,
            in_place: bool = False, background_check: bool = False,
            params: algorithms.Params = algorithms.Params()) -> list[dict]:
    """One nccl-tests row's timed loop: warm-up, a barrier, ``iters``
    iterations; one record per rank. ``in_place``: nccl-tests' in-place run
    (``algorithms.in_place``): the result overwrites the input, so each
    iteration starts from the input again, as a training step's fresh
    gradients would (nccl-tests leaves it to accumulate; timing is the same).
    ``background_check``: the records' ``wrong`` is counted later, in the
    next phases' idle time (``finish_checks`` before reading it). ``params``:
    the collective's root, shift or spread (``algorithms.Params``)."""
    e0 = engines[0]
    n = e0.servers * e0.G
    sch = schedules(engines, collective, algorithm, size_bytes, in_place, params=params)
    bufs = {r: e.new_buffers(sch[r]) for e in engines for r in e.ranks}

    def view(r, which):
        if not in_place or collective in algorithms.OWN_BUFFERS:
            return bufs[r][which]
        buf, first, count = algorithms.in_place_views(collective, n, r, size_bytes, elem)[
            0 if which == "in" else 1]
        return bufs[r][buf][first:first + count]

    elem = elem_bytes(params.dtype)
    inputs = {r: input_elems(r, 0, input_bytes(collective, n, size_bytes, r, params) // elem,
                             params.dtype, n) for r in bufs}
    for r in bufs:
        view(r, "in")[:] = inputs[r]
    refill = (lambda run, _it: view(run.rank, "in").__setitem__(slice(None), inputs[run.rank])) \
        if in_place else None
    if warmup_iters:
        drive(engines, _runs(engines, sch, range(warmup_iters), fill=refill, bufs=bufs), timeout_s)
    left = barrier(engines, algorithm, timeout_s)
    runs = _runs(engines, sch, range(iters), fill=refill, bufs=bufs)
    lost0 = _lost_ns(engines)
    drive(engines, runs, timeout_s)
    lost = _lost_by_rank(lost0, engines)
    # in-place all_to_all(v) and send_recv clobber their own input: nccl-tests
    # checks nothing either
    checked = check and not (in_place and collective in algorithms.OWN_BUFFERS)
    out = []
    for run in runs:
        rec = {"rank": run.rank, "collective": collective, "algorithm": algorithm,
               "size_bytes": size_bytes, "nranks": n, "iters": iters,
               "warmup_iters": warmup_iters, "in_place": in_place,
               "start_ns": left[run.rank], "end_ns": run.records[-1][3],
               "iter_end_ns": [it[3] for it in run.records], "wrong": None,
               "lost_ns": lost[run.rank]}
        rec.update(_extra_keys(collective, n, size_bytes, params))
        if checked:
            # its buffers kept until then; ``finish_checks`` does what is left
            _check_later(engines, run.rank, view(run.rank, "out"),
                         lambda r=run.rank: _want(collective, r, n, size_bytes, params, in_place,
                                                  inputs[r]), rec)
        out.append(rec)
    if not background_check:
        finish_checks(engines)
    return out


def _want(collective, rank, n, size_bytes, params, in_place, given):
    """``expected``; a reduce's non-root keeps its receive buffer as it was
    (NCCL writes only the root's): zeros, or in place its input (``given``)."""
    want = expected(collective, rank, n, 0, size_bytes, params)
    if want is None:
        want = given if in_place else np.zeros_like(given)
    return want


def _extra_keys(collective: str, n: int, size_bytes: int, params) -> dict:
    """A record's keys beyond the common ones: a type and op other than
    float32 sum, channels other than 1, PXN on, the root of a rooted collective,
    all_to_allv's algbw bytes (``algorithms.algbw_bytes``)."""
    out = {}
    if (params.dtype, params.op) != ("float32", "sum"):
        out.update(dtype=params.dtype, op=params.op)
    if params.channels != 1:
        out["channels"] = params.channels
    if params.pxn:
        out["pxn"] = True
    if collective in algorithms.ROOTED:
        out["root"] = params.root
    if collective == "all_to_allv":
        out["algbw_bytes"] = algorithms.algbw_bytes(collective, n, size_bytes, params)
    return out


def train(engines, collective: str, algorithm: str, size_bytes: int, steps: int,
          warmup_steps: int, compute_ns: int, check: bool = True,
          timeout_s: float = 60.0, background_check: bool = False,
          params: algorithms.Params = algorithms.Params()) -> list[dict]:
    e0 = engines[0]
    n = e0.servers * e0.G
    sch = schedules(engines, collective, algorithm, size_bytes, params=params)
    barrier(engines, algorithm, timeout_s)
    runs = _runs(engines, sch, range(warmup_steps + steps), compute_ns, _filler(params, n))
    lost0 = _lost_ns(engines)
    drive(engines, runs, timeout_s)
    lost = _lost_by_rank(lost0, engines)
    out = []
    last = warmup_steps + steps - 1
    for run in runs:
        rec = {"rank": run.rank, "collective": collective, "algorithm": algorithm,
               "size_bytes": size_bytes, "nranks": n, "compute_ns": compute_ns,
               "steps": [{"step": it, "start_ns": t0, "collective_start_ns": t1,
                          "end_ns": t2} for it, t0, t1, t2 in run.records
                         if it >= warmup_steps],
               "wrong": None, "lost_ns": lost[run.rank]}
        if check:
            _check_later(engines, run.rank, run.bufs["out"],
                         lambda r=run.rank: expected(collective, r, n, last, size_bytes, params),
                         rec)
        out.append(rec)
    if not background_check:
        finish_checks(engines)
    return out
