"""A training step shaped by its parallelism (``workload.training`` with
``tp``/``pp``/``dp``/``ep``; docs/training.md): every rank's step as one
schedule (``schedule.RankSchedule``) whose pieces run in the order a
Megatron-LM rank runs them, on the groups of ``groups.layout``.

A rank of pipeline stage p (of P), per microbatch (of M), GPipe's order
(every forward, then every backward):

* forward: receive the activations from stage p-1 (PP), then per layer
  (of L) ``forward_ns`` of compute, the TP all-reduce (``tp_bytes``, inside
  the tensor-parallel group: NVLink) and the MoE all-to-all (``ep_bytes``,
  the expert-parallel group); send the activations to stage p+1 (PP).
* backward: receive the gradients from stage p+1, per layer in reverse
  ``backward_ns`` of compute, TP all-reduce, MoE all-to-all; send the
  gradients to stage p-1.
* the gradients (``dp_bytes``) reduced over the data-parallel group: an
  all-reduce, or a reduce-scatter then an all-gather (a distributed
  optimizer's). After the backward pass; with ``dp_overlap`` a bucket per
  layer (``dp_bytes`` / L) starts as soon as the last microbatch's backward
  compute of that layer ends, beside the rest of the backward pass (as
  Megatron-LM's overlap_grad_reduce).

The pieces but the overlapped buckets form the rank's *chain*: each starts
when the one before ends (a ``ComputeOp`` join closes each, its end time
recorded: ``RankSchedule.marks``), so a step's time splits exactly into
phases, plus the time the buckets outlast the chain (``dp``). Data
parallelism has its own QPs (channel ``DP_CHAN``); every piece's data is
checked exactly (``data.py``): inputs of its own.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from .algorithms import Params, link_kind
from .data import expected, input_bytes, input_elems
from .dtypes import elem_bytes
from .groups import group_of, group_schedules, layout, ring_order
from .schedule import RECV, SEND, ComputeOp, Op, RankSchedule, finalize, slices

PHASES = ("compute", "tp", "ep", "pp", "dp")
DP_CHAN = 1


@dataclass(frozen=True)
class Shape:
    """The step's parallelism and sizes; compute times in clock ns (fabric
    ns x the dilation)."""
    tp: int
    pp: int
    dp: int
    ep: int = 1
    tp_bytes: int = 0
    pp_bytes: int = 0
    dp_bytes: int = 0
    ep_bytes: int = 0
    microbatches: int = 1
    layers: int = 1
    forward_ns: int = 0
    backward_ns: int = 0
    dp_collective: str = "all_reduce"
    dp_overlap: bool = False
    dtype: str = "float32"
    op: str = "sum"

    @property
    def nranks(self) -> int:
        return self.tp * self.pp * self.dp

    def describe(self) -> dict:
        """What summary.json's training section says of the step's shape."""
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "ep": self.ep,
                "microbatches": self.microbatches, "layers": self.layers,
                "tp_bytes": self.tp_bytes, "pp_bytes": self.pp_bytes, "dp_bytes": self.dp_bytes,
                "ep_bytes": self.ep_bytes, "dp_collective": self.dp_collective,
                "dp_overlap": self.dp_overlap}


def shape_of(tr, nranks: int, dtype: str = "float32", op: str = "sum",
             dilation: float = 1.0) -> Shape:
    """The ``Shape`` of a ``TrainingSpec`` with tp/pp/dp/ep on ``nranks`` ranks
    (dp left out: the ranks tp x pp leave)."""
    tp, pp, ep = tr.tp or 1, tr.pp or 1, tr.ep or 1
    dp = tr.dp if tr.dp is not None else max(1, nranks // (tp * pp))
    bwd_us = 2 * tr.compute_us if tr.backward_compute_us is None else tr.backward_compute_us
    return Shape(tp, pp, dp, ep, tr.tp_bytes or 0, tr.pp_bytes or 0, tr.dp_bytes or 0,
                 tr.ep_bytes or 0, tr.microbatches, tr.layers,
                 round(tr.compute_us * 1000 * dilation), round(bwd_us * 1000 * dilation),
                 tr.dp_collective, tr.dp_overlap, dtype, op)


@dataclass
class Piece:
    """One phase's work on one rank: ``collective`` (or "send", "recv",
    "compute") of ``size_bytes`` over ``group`` (ring order; send/recv:
    (sender, receiver)), its data named by ``key``, its buffers by
    ``prefix``, its ops [first, end) and the op that closes it on the
    chain (``mark``; None: off the chain)."""
    phase: str
    collective: str
    size_bytes: int = 0
    group: tuple[int, ...] = ()
    key: str = ""
    prefix: str = ""
    first: int = 0
    end: int = 0
    mark: int | None = None


@dataclass
class Step:
    shape: Shape
    schedules: dict[int, RankSchedule]
    pieces: dict[int, list[Piece]] = field(default_factory=dict)

    def chain_phases(self, rank: int) -> list[str]:
        """The phase of each of ``rank``'s chain marks, in order."""
        return [p.phase for p in self.pieces[rank] if p.mark is not None]


def seed(key: str, iteration: int) -> int:
    """The data of a piece in a step: one input sequence per (key, step)."""
    return zlib.crc32(f"{key}/{iteration}".encode())


class _Rank:
    """Builds one rank's step schedule piece by piece."""

    def __init__(self, rank: int, shape: Shape, G: int, slice_bytes: int, cache: dict):
        self.rank, self.shape, self.G, self.slice_bytes, self.cache = rank, shape, G, slice_bytes, cache
        self.s = RankSchedule(rank, {}, dtype=shape.dtype, redop=shape.op)
        self.pieces: list[Piece] = []
        self.last: int | None = None          # the chain's last mark
        self.waits: list[tuple[int, int, int]] = []   # ops [a, b) wait for op c

    def _join(self, after, chain: bool) -> int:
        i = len(self.s.ops)
        self.s.ops.append(ComputeOp(0, after=tuple(after)))
        if chain:
            self.s.marks.append(i)
            self.last = i
        return i

    def compute(self, ns: int) -> int:
        i = len(self.s.ops)
        self.s.ops.append(ComputeOp(ns, after=() if self.last is None else (self.last,)))
        self.s.marks.append(i)
        self.last = i
        self.pieces.append(Piece("compute", "compute", first=i, end=i + 1, mark=i))
        return i

    def _append(self, phase, coll, size, group, key, sched: RankSchedule, after, chain) -> int:
        prefix = f"p{len(self.pieces)}."
        first = len(self.s.ops)
        for name, nbytes in sched.buffers.items():
            self.s.buffers[prefix + name] = nbytes
        for o in sched.ops:
            self.s.ops.append(Op(o.kind, o.peer, o.link, prefix + o.buf, o.off, o.nbytes, o.reduce,
                                 None if o.src_buf is None else prefix + o.src_buf, o.src_off,
                                 o.chan))
        end = len(self.s.ops)
        if after is not None:
            self.waits.append((first, end, after))
        join = self._join(range(first, end), chain)
        self.pieces.append(Piece(phase, coll, size, tuple(group), key, prefix, first, end,
                                 join if chain else None))
        return join

    def collective(self, phase, coll, ranks, size, key, chan=0, after=-1, chain=True) -> int:
        """``coll`` over ``ranks`` after op ``after`` (-1: the chain's last)."""
        group = ring_order(ranks, self.G)
        ck = (coll, tuple(group), size, chan)
        if ck not in self.cache:
            self.cache[ck] = group_schedules(coll, group, self.G, size, self.slice_bytes,
                                             Params(dtype=self.shape.dtype, op=self.shape.op),
                                             chan)
        return self._append(phase, coll, size, group, f"{key}/{group[0]}", self.cache[ck][self.rank],
                            self.last if after == -1 else after, chain)

    def p2p(self, peer: int, size: int, key: str, send: bool) -> int:
        """Pipeline parallelism: ``size`` bytes to (``send``) or from ``peer``."""
        link = link_kind(self.rank, peer, self.G)
        buf = "in" if send else "out"
        sched = RankSchedule(self.rank, {buf: size})
        sched.ops = [Op(SEND if send else RECV, peer, link, buf, off, nb)
                     for off, nb in slices(0, size, self.slice_bytes)]
        pair = (self.rank, peer) if send else (peer, self.rank)
        return self._append("pp", "send" if send else "recv", size, pair, f"{key}/{pair[0]}",
                            sched, self.last, True)

    def finish(self) -> RankSchedule:
        finalize(self.s)
        for a, b, c in self.waits:
            for op in self.s.ops[a:b]:
                op.deps = tuple(sorted({*op.deps, c}))
        return self.s


def build(shape: Shape, servers: int, gpus_per_server: int, slice_bytes: int) -> Step:
    """Every rank's step schedule (the module docstring)."""
    n = servers * gpus_per_server
    if shape.nranks != n:
        raise ValueError(f"tp {shape.tp} x pp {shape.pp} x dp {shape.dp} = {shape.nranks} ranks, "
                         f"the fabric has {n}")
    groups = layout(shape.tp, shape.pp, shape.dp, shape.ep)
    cache: dict = {}
    step = Step(shape, {})
    for r in range(n):
        b = _Rank(r, shape, gpus_per_server, slice_bytes, cache)
        _program(b, shape, groups)
        step.schedules[r] = b.finish()
        step.pieces[r] = b.pieces
    return step


def _layer(b: _Rank, sh: Shape, groups, key: str) -> int:
    """One layer's compute (forward or backward by ``key``), TP all-reduce, MoE all-to-all."""
    c = b.compute(sh.forward_ns if key.startswith("f") else sh.backward_ns)
    if sh.tp > 1:
        b.collective("tp", "all_reduce", group_of(groups["tp"], b.rank), sh.tp_bytes, f"tp/{key}")
    if sh.ep > 1:
        b.collective("ep", "all_to_all", group_of(groups["ep"], b.rank), sh.ep_bytes, f"ep/{key}")
    return c


def _gradients(b: _Rank, sh: Shape, dp: list[int], size: int, key: str, after: int,
               chain: bool) -> None:
    """The data-parallel reduction of ``size`` bytes of gradients."""
    if sh.dp_collective == "all_reduce":
        b.collective("dp", "all_reduce", dp, size, f"dp/{key}", DP_CHAN, after, chain)
        return
    rs = b.collective("dp", "reduce_scatter", dp, size, f"dp/rs/{key}", DP_CHAN, after, chain)
    b.collective("dp", "all_gather", dp, size, f"dp/ag/{key}", DP_CHAN, rs, chain)


def _program(b: _Rank, sh: Shape, groups) -> None:
    pp = group_of(groups["pp"], b.rank)
    dp = group_of(groups["dp"], b.rank)
    p, M, L = pp.index(b.rank), sh.microbatches, sh.layers
    for mb in range(M):
        if p > 0:
            b.p2p(pp[p - 1], sh.pp_bytes, f"pp/f/{mb}", send=False)
        for layer in range(L):
            _layer(b, sh, groups, f"f/{mb}/{layer}")
        if p < sh.pp - 1:
            b.p2p(pp[p + 1], sh.pp_bytes, f"pp/f/{mb}", send=True)
    for mb in range(M):
        if p < sh.pp - 1:
            b.p2p(pp[p + 1], sh.pp_bytes, f"pp/b/{mb}", send=False)
        for layer in reversed(range(L)):
            c = _layer(b, sh, groups, f"b/{mb}/{layer}")
            if sh.dp > 1 and sh.dp_overlap and mb == M - 1:
                _gradients(b, sh, dp, sh.dp_bytes // L, f"bucket{layer}", c, chain=False)
        if p > 0:
            b.p2p(pp[p - 1], sh.pp_bytes, f"pp/b/{mb}", send=True)
    if sh.dp > 1 and not sh.dp_overlap:
        _gradients(b, sh, dp, sh.dp_bytes, "all", -1, chain=True)


def _has_input(pc: Piece) -> bool:
    return pc.collective not in ("compute", "recv")


def fill_inputs(step: Step, rank: int, bufs: dict[str, np.ndarray], iteration: int) -> None:
    """Every piece's input of ``rank`` in step ``iteration`` (the gradients,
    activations... its compute produced)."""
    sh = step.shape
    elem = elem_bytes(sh.dtype)
    for pc in step.pieces[rank]:
        if not _has_input(pc):
            continue
        if pc.collective == "send":
            local, m, count = 0, 2, pc.size_bytes // elem
        else:
            local, m = pc.group.index(rank), len(pc.group)
            count = input_bytes(pc.collective, m, pc.size_bytes) // elem
        bufs[pc.prefix + "in"][:] = input_elems(local, seed(pc.key, iteration), count, sh.dtype, m)


def checks(step: Step, rank: int, bufs: dict[str, np.ndarray], iteration: int) -> list:
    """(got, want()) of every piece of ``rank`` that produces data."""
    sh = step.shape
    params = Params(dtype=sh.dtype, op=sh.op)
    out = []
    for pc in step.pieces[rank]:
        if pc.collective == "compute" or pc.collective == "send":
            continue
        s = seed(pc.key, iteration)
        if pc.collective == "recv":
            want = (lambda pc=pc, s=s: input_elems(0, s, pc.size_bytes // elem_bytes(sh.dtype),
                                                   sh.dtype, 2))
        else:
            want = (lambda pc=pc, s=s: expected(pc.collective, pc.group.index(rank),
                                                len(pc.group), s, pc.size_bytes, params))
        out.append((bufs[pc.prefix + "out"], want))
    return out


def phase_times(phases: list[str], start_ns: int, marks_ns: list[int], end_ns: int
                ) -> dict[str, int]:
    """A step's time by phase: each chain piece from the previous mark (the
    step's start) to its own; the overlapped buckets' time past the chain's
    end is ``dp``. The values sum to ``end_ns - start_ns``."""
    out = dict.fromkeys(PHASES, 0)
    at = start_ns
    for phase, t in zip(phases, marks_ns):
        out[phase] += t - at
        at = t
    out["dp"] += end_ns - at
    return out
