"""NumPy arithmetic of the element types (``dtypes.py``).

Buffers hold each type's bits in a NumPy array: float32, float16 and int32
as themselves, bfloat16 -- which NumPy lacks -- as uint16 bit patterns,
reduced in float32 and rounded back to nearest-even, as a GPU's bf16
arithmetic does. The transport moves bytes (``transport.py``); the engine
views them as the buffer's type.
"""
from __future__ import annotations

import numpy as np

from .dtypes import DTYPES, UFUNCS


def storage(dtype: str):
    """The NumPy type a buffer of ``dtype`` holds."""
    return np.dtype(DTYPES[dtype][0]).type


def ufunc(op: str):
    return getattr(np, UFUNCS[op])


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to nearest, ties to even (finite values; NaN is never an input)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_f32(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values as ``dtype``'s stored elements (rounded where not exact)."""
    return f32_to_bf16(x) if dtype == "bfloat16" else x.astype(storage(dtype))


def to_f32(x: np.ndarray, dtype: str) -> np.ndarray:
    return bf16_to_f32(x) if dtype == "bfloat16" else x.astype(np.float32)


def combiner(op: str, dtype: str):
    """``f(acc, x)``: acc = acc op x, in place, in ``dtype``'s arithmetic."""
    fn = ufunc(op)
    if dtype != "bfloat16":
        return lambda acc, x: fn(acc, x, out=acc)

    def bf16(acc, x):
        acc[:] = f32_to_bf16(fn(bf16_to_f32(acc), bf16_to_f32(x)))
    return bf16
