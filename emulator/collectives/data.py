"""Deterministic inputs and expected outputs (nccl-tests ``-c 1`` style).

Inputs are small integers (|x| <= 125) in the buffer's type, so a sum is
exact in any order and a result is right or wrong, no tolerance -- as
nccl-tests' verifiable inputs (``dtypes.py``). Where n ranks' sum could
leave the integers a type holds exactly (float16 past 2048, bfloat16 past
256, float32 past 2^24), the inputs shrink to |x| <= limit / n
(``dtypes.amplitude``), so no partial sum in any order is rounded.
"""
from __future__ import annotations

from functools import reduce

import numpy as np

from .algorithms import Params, alltoallv_bytes
from .arith import from_f32, to_f32, ufunc
from .dtypes import AMPLITUDE, amplitude, elem_bytes
from .schedule import split_elems

PERIOD = 251                    # element i of an input: ((7 i + c) mod 251) - 125
_STEP_INVERSE = pow(7, -1, PERIOD)


def input_elems(rank: int, iteration: int, count: int, dtype: str = "float32",
                n: int = 1) -> np.ndarray:
    """Element i: ((7 i + 131 rank + 17 iteration) mod 251) - 125 (scaled by
    ``dtypes.amplitude(dtype, n)`` / 125, rounded down), read-only.

    Every input is the same sequence of period 251 from another start (7 is
    invertible mod 251: this one starts where 7 k = 131 rank + 17 iteration),
    so it is a slice of one array built once per count: a training step
    refills its ranks' inputs inside the event loop, where computing 1 MiB
    took 3-9 ms a rank and the server's NICs fell behind by as much."""
    k = (rank * 131 + iteration * 17) * _STEP_INVERSE % PERIOD
    return periodic_inputs(count, dtype, n)[k:k + count]


_PERIODIC: dict[tuple[str, int], np.ndarray] = {}


def periodic_inputs(count: int, dtype: str = "float32", n: int = 1) -> np.ndarray:
    """The sequence every input of ``dtype`` (among n ranks) is a slice of,
    long enough for ``count`` elements from any start; built again only when
    a longer one is asked for (a server agent asks for its largest before
    the start gate)."""
    amp = amplitude(dtype, n)
    have = _PERIODIC.get((dtype, amp))
    if have is None or len(have) < count + PERIOD:
        i = np.arange(count + PERIOD, dtype=np.int64)
        v = (i * 7) % PERIOD - AMPLITUDE
        if amp != AMPLITUDE:
            v = v * amp // AMPLITUDE
        have = from_f32(v.astype(np.float32), dtype)
        have.flags.writeable = False
        _PERIODIC[(dtype, amp)] = have
    return have


def input_bytes(collective: str, n: int, size_bytes: int, rank: int = 0,
                params: Params = Params()) -> int:
    """The bytes of ``rank``'s input (``algorithms.build``'s ``in``)."""
    if collective == "all_to_allv":
        return sum(alltoallv_bytes(n, size_bytes, params.spread, elem_bytes(params.dtype))[rank])
    return size_bytes // n if collective == "all_gather" else size_bytes


def _reduction_of_inputs(n: int, iteration: int, first: int, count: int, p: Params) -> np.ndarray:
    """Elements ``first`` .. ``first + count`` of every rank's input reduced
    by ``p.op``. Each input has period 251, so the result has too: one period
    is reduced and repeated (summing 8 ranks' 1 MiB took 1 ms, 0.1 ms this
    way). In float32, exact (the module), then in ``p.dtype``."""
    one = reduce(ufunc(p.op), (to_f32(input_elems(r, iteration, first + PERIOD, p.dtype, n)[first:],
                                    p.dtype) for r in range(n)))
    return np.resize(from_f32(one, p.dtype), count)


def expected(collective: str, rank: int, n: int, iteration: int, size_bytes: int,
             params: Params = Params()) -> np.ndarray | None:
    """What ``out`` of ``rank`` must hold (None: nothing, a reduce's non-root)."""
    count = size_bytes // elem_bytes(params.dtype)

    def inputs(r, c):
        return input_elems(r, iteration, c, params.dtype, n)
    if collective == "all_reduce" or (collective == "reduce" and rank == params.root):
        return _reduction_of_inputs(n, iteration, 0, count, params)
    if collective == "reduce":
        return None
    if collective == "broadcast":
        return inputs(params.root, count)
    if collective == "send_recv":
        return inputs((rank - params.shift) % n, count)
    if collective == "all_to_allv":
        return _all_to_allv_expected(rank, n, size_bytes, params, inputs)
    if collective == "all_gather":
        return np.concatenate([inputs(r, count // n) for r in range(n)])
    o, b = split_elems(count, n)[rank]
    if collective == "reduce_scatter":
        return _reduction_of_inputs(n, iteration, o % PERIOD, b, params)
    if collective == "all_to_all":
        return np.concatenate([inputs(r, count)[o:o + b] for r in range(n)])
    raise ValueError(collective)


def _all_to_allv_expected(rank, n, size_bytes, params, inputs):
    """From every rank i in rank order, the piece of i's input it sends us."""
    elem = elem_bytes(params.dtype)
    m = alltoallv_bytes(n, size_bytes, params.spread, elem)
    parts = []
    for i in range(n):
        first = sum(m[i][:rank]) // elem
        parts.append(inputs(i, first + m[i][rank] // elem)[first:])
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
