"""Deterministic inputs and expected outputs (nccl-tests ``-c 1`` style).

Inputs are small integers stored as float32 (|x| <= 125), so a sum over up to
~130000 ranks is exact in any order: a result is right or wrong, no tolerance.
"""
from __future__ import annotations

import numpy as np

from .schedule import ELEM_BYTES, chunk_bytes


def input_elems(rank: int, iteration: int, count: int) -> np.ndarray:
    i = np.arange(count, dtype=np.int64)
    return (((i * 7 + rank * 131 + iteration * 17) % 251) - 125).astype(np.float32)


def input_bytes(collective: str, n: int, size_bytes: int) -> int:
    return size_bytes // n if collective == "all_gather" else size_bytes


def expected(collective: str, rank: int, n: int, iteration: int, size_bytes: int) -> np.ndarray:
    """What ``out`` of ``rank`` must hold."""
    count = size_bytes // ELEM_BYTES
    if collective == "all_reduce":
        return sum(input_elems(r, iteration, count) for r in range(n)).astype(np.float32)
    if collective == "all_gather":
        return np.concatenate([input_elems(r, iteration, count // n) for r in range(n)])
    blocks = [(o // ELEM_BYTES, b // ELEM_BYTES) for o, b in chunk_bytes(count, n)]
    if collective == "reduce_scatter":
        o, b = blocks[rank]
        return sum(input_elems(r, iteration, count)[o:o + b] for r in range(n)).astype(np.float32)
    if collective == "all_to_all":
        o, b = blocks[rank]
        return np.concatenate([input_elems(r, iteration, count)[o:o + b] for r in range(n)])
    raise ValueError(collective)


def count_wrong(got: np.ndarray, want: np.ndarray) -> int:
    if got.shape != want.shape:
        return max(got.size, want.size)
    return int(np.count_nonzero(got != want))
