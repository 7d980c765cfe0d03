"""An in-memory executor of schedules, for tests: no transport, no time.

It runs ops in a random order that respects what a real executor must: an
op's ``deps``, FIFO matching per (sender, receiver, channel), and at most
``slots`` messages sent but not yet consumed per (sender, receiver,
channel) -- so a schedule that needs unbounded buffering or has a missing
dependency shows up as a deadlock or a wrong result.
"""
from __future__ import annotations

import bisect
import random
from collections import deque

import numpy as np

from .arith import combiner, storage
from .schedule import COPY, RECV, SEND, RankSchedule


def run(schedules: dict[int, RankSchedule], inputs: dict[int, np.ndarray], slots: int = 2,
        seed: int = 0, input_at: dict[int, tuple[str, int]] | None = None,
        init=None) -> dict[int, dict[str, np.ndarray]]:
    """The ranks' buffers at the end. ``init(rank, buffers)``: fills a rank's
    buffers before the start (where ``inputs`` fills one)."""
    rng = random.Random(seed)
    bufs = {r: {k: np.zeros(v // s.elem_bytes, storage(s.dtype)) for k, v in s.buffers.items()}
            for r, s in schedules.items()}
    combine = {r: combiner(s.redop, s.dtype) for r, s in schedules.items()}
    for r, x in inputs.items():       # input_at: (buffer, first element) of an in-place rank
        buf, first = (input_at or {}).get(r, ("in", 0))
        bufs[r][buf][first:first + x.size] = x
    for r in schedules if init is not None else ():
        init(r, bufs[r])
    # what may run, wire permitting: per rank the ops not done whose deps
    # are, in op order (the order the random choice draws from)
    waiting = {r: [len(op.deps) for op in s.ops] for r, s in schedules.items()}
    dependents = {r: [[] for _ in s.ops] for r, s in schedules.items()}
    for r, s in schedules.items():
        for i, op in enumerate(s.ops):
            for j in op.deps:
                dependents[r][j].append(i)
    free = {r: [i for i, n in enumerate(w) if n == 0] for r, w in waiting.items()}
    wire: dict[tuple[int, int, int], deque] = {}   # (sender, receiver, channel)
    left = sum(len(s.ops) for s in schedules.values())
    while left:
        ready = []
        for r, s in schedules.items():
            for i in free[r]:
                op = s.ops[i]
                if op.kind == SEND and len(wire.get((r, op.peer, op.chan), ())) >= slots:
                    continue
                if op.kind == RECV and not wire.get((op.peer, r, op.chan)):
                    continue
                ready.append((r, i))
        if not ready:
            raise RuntimeError(f"deadlock with {left} ops left")
        r, i = rng.choice(ready)
        op = schedules[r].ops[i]
        e = schedules[r].elem_bytes
        a, b = op.off // e, (op.off + op.nbytes) // e
        if op.kind == SEND:
            wire.setdefault((r, op.peer, op.chan), deque()).append(bufs[r][op.buf][a:b].copy())
        elif op.kind == RECV:
            x = wire[(op.peer, r, op.chan)].popleft()
            if len(x) != b - a:
                raise RuntimeError(f"rank {r} op {i}: got {len(x)} elements, expected {b - a}")
            if op.reduce:
                combine[r](bufs[r][op.buf][a:b], x)
            else:
                bufs[r][op.buf][a:b] = x
        elif op.kind == COPY:
            sa = op.src_off // e
            bufs[r][op.buf][a:b] = bufs[r][op.src_buf][sa:sa + b - a]
        free[r].remove(i)
        for k in dependents[r][i]:
            waiting[r][k] -= 1
            if waiting[r][k] == 0:
                bisect.insort(free[r], k)
        left -= 1
    if any(wire.values()):
        raise RuntimeError("messages left unreceived")
    return bufs
