"""Deterministic inputs and expected outputs (nccl-tests ``-c 1`` style).

Inputs are small integers stored as float32 (|x| <= 125), so a sum over up to
~130000 ranks is exact in any order: a result is right or wrong, no tolerance.
"""
from __future__ import annotations

import numpy as np

from .algorithms import Params, alltoallv_bytes
from .schedule import ELEM_BYTES, chunk_bytes

PERIOD = 251                    # element i of an input: ((7 i + c) mod 251) - 125
_STEP_INVERSE = pow(7, -1, PERIOD)


def input_elems(rank: int, iteration: int, count: int) -> np.ndarray:
    """Element i: ((7 i + 131 rank + 17 iteration) mod 251) - 125, read-only.

    Every input is the same sequence of period 251 from another start (7 is
    invertible mod 251: this one starts where 7 k = 131 rank + 17 iteration),
    so it is a slice of one array built once per count: a training step
    refills its ranks' inputs inside the event loop, where computing 1 MiB
    took 3-9 ms a rank and the server's NICs fell behind by as much."""
    k = (rank * 131 + iteration * 17) * _STEP_INVERSE % PERIOD
    return periodic_inputs(count)[k:k + count]


_PERIODIC = np.empty(0, np.float32)


def periodic_inputs(count: int) -> np.ndarray:
    """The sequence every input is a slice of, long enough for ``count``
    elements from any start; built again only when a longer one is asked
    for (a server agent asks for its largest before the start gate)."""
    global _PERIODIC
    if len(_PERIODIC) < count + PERIOD:
        i = np.arange(count + PERIOD, dtype=np.int64)
        out = ((i * 7) % PERIOD - 125).astype(np.float32)
        out.flags.writeable = False
        _PERIODIC = out
    return _PERIODIC


def input_bytes(collective: str, n: int, size_bytes: int, rank: int = 0,
                params: Params = Params()) -> int:
    """The bytes of ``rank``'s input (``algorithms.build``'s ``in``)."""
    if collective == "all_to_allv":
        return sum(alltoallv_bytes(n, size_bytes, params.spread)[rank])
    return size_bytes // n if collective == "all_gather" else size_bytes


def _sum_of_inputs(n: int, iteration: int, first: int, count: int) -> np.ndarray:
    """Elements ``first`` .. ``first + count`` of the sum of every rank's
    input. Each input has period 251, so the sum has too: one period is
    summed and repeated (summing 8 ranks' 1 MiB took 1 ms, 0.1 ms this way)."""
    one = sum(input_elems(r, iteration, first + PERIOD)[first:] for r in range(n))
    return np.resize(one.astype(np.float32), count)


def expected(collective: str, rank: int, n: int, iteration: int, size_bytes: int,
             params: Params = Params()) -> np.ndarray | None:
    """What ``out`` of ``rank`` must hold (None: nothing, a reduce's non-root)."""
    count = size_bytes // ELEM_BYTES
    if collective == "all_reduce" or (collective == "reduce" and rank == params.root):
        return _sum_of_inputs(n, iteration, 0, count)
    if collective == "reduce":
        return None
    if collective == "broadcast":
        return input_elems(params.root, iteration, count)
    if collective == "send_recv":
        return input_elems((rank - params.shift) % n, iteration, count)
    if collective == "all_to_allv":
        return _all_to_allv_expected(rank, n, iteration, size_bytes, params)
    if collective == "all_gather":
        return np.concatenate([input_elems(r, iteration, count // n) for r in range(n)])
    blocks = [(o // ELEM_BYTES, b // ELEM_BYTES) for o, b in chunk_bytes(count, n)]
    if collective == "reduce_scatter":
        o, b = blocks[rank]
        return _sum_of_inputs(n, iteration, o % PERIOD, b)
    if collective == "all_to_all":
        o, b = blocks[rank]
        return np.concatenate([input_elems(r, iteration, count)[o:o + b] for r in range(n)])
    raise ValueError(collective)


def _all_to_allv_expected(rank, n, iteration, size_bytes, params):
    """From every rank i in rank order, the piece of i's input it sends us."""
    m = alltoallv_bytes(n, size_bytes, params.spread)
    parts = []
    for i in range(n):
        first = sum(m[i][:rank]) // ELEM_BYTES
        parts.append(input_elems(i, iteration, first + m[i][rank] // ELEM_BYTES)[first:])
    return np.concatenate(parts)


def count_wrong(got: np.ndarray, want: np.ndarray) -> int:
    if got.shape != want.shape:
        return max(got.size, want.size)
    return int(np.count_nonzero(got != want))


CHECK_PIECE_ELEMS = 1 << 15     # 128 KiB compared per piece: ~20 us here


def count_wrong_pieces(got: np.ndarray, want, into: dict, key: str = "wrong"):
    """``count_wrong(got, want())`` a piece at a time, a generator (one piece
    per ``next``) that leaves the count in ``into[key]``: a server agent's
    event loop runs it in its idle time (``CollectiveEngine.background``),
    where the whole check of 1 MiB on 4 ranks stalled its NICs for 2 ms."""
    want = want()
    yield
    if got.shape != want.shape:
        into[key] = max(got.size, want.size)
        return
    wrong = 0
    for a in range(0, got.size, CHECK_PIECE_ELEMS):
        b = a + CHECK_PIECE_ELEMS
        wrong += int(np.count_nonzero(got[a:b] != want[a:b]))
        yield
    into[key] = wrong
