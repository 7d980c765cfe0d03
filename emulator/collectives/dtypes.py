"""Element types and reduction ops of the collectives (nccl-tests' ``-d`` and ``-o``).

Buffers hold each type's bits in a NumPy array: float32, float16 and int32
as themselves, bfloat16 -- which NumPy lacks -- as uint16 bit patterns,
reduced in float32 and rounded back to nearest-even, as a GPU's bf16
arithmetic does. The transport moves bytes (``transport.py``); the engine
views them as the buffer's type.

Exact checks: nccl-tests' verifiable inputs (verifiable/verifiable.cu,
``genSumXY`` / ``genInOutFloatSum``) are chosen so that every partial sum is
exactly representable, so a float sum is the same in any order and is
checked with tolerance 0 (2 ulps only for ``avg``'s pre-multiply). Ours do
the same (``data.py``): integers of at most ``exact_limit / n`` in
magnitude, so no partial sum of n of them leaves the integers the type
holds exactly (float16: 2048, bfloat16: 256); max and min are exact anyway.
"""
from __future__ import annotations

# NumPy comes with the functions that compute, not with the names: the
# report (and the run's start, which imports it) needs only those
# name: (storage NumPy type, bytes per element, nccl-tests' name, largest |integer| held exactly)
DTYPES = {"float32": ("float32", 4, "float", 1 << 24), "float16": ("float16", 2, "half", 1 << 11),
          "bfloat16": ("uint16", 2, "bfloat16", 1 << 8), "int32": ("int32", 4, "int32", 1 << 31)}
UFUNCS = {"sum": "add", "max": "maximum", "min": "minimum"}


def storage(dtype: str):
    import numpy as np
    return np.dtype(DTYPES[dtype][0]).type


def ufunc(op: str):
    import numpy as np
    return getattr(np, UFUNCS[op])


def elem_bytes(dtype: str) -> int:
    return DTYPES[dtype][1]


def nccl_name(dtype: str) -> str:
    return DTYPES[dtype][2]


def exact_limit(dtype: str) -> int:
    return DTYPES[dtype][3]


AMPLITUDE = 125                 # the largest |input| (``data.input_elems``)


def amplitude(dtype: str, n: int) -> int:
    """The largest |input| of ``n`` ranks' ``dtype`` inputs: 125, or less
    where n of them could sum past the integers ``dtype`` holds exactly."""
    amp = min(AMPLITUDE, exact_limit(dtype) // max(n, 1))
    if amp < 1:
        raise ValueError(f"{dtype}: a sum of {n} ranks' inputs is not exact in every order "
                         f"(at most {exact_limit(dtype)} ranks)")
    return amp


def bf16_to_f32(bits):
    import numpy as np
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """Round to nearest, ties to even (finite values; NaN is never an input)."""
    import numpy as np
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_f32(x, dtype: str):
    """float32 values as ``dtype``'s stored elements (rounded where not exact)."""
    return f32_to_bf16(x) if dtype == "bfloat16" else x.astype(storage(dtype))


def to_f32(x, dtype: str):
    import numpy as np
    return bf16_to_f32(x) if dtype == "bfloat16" else x.astype(np.float32)


def combiner(op: str, dtype: str):
    """``f(acc, x)``: acc = acc op x, in place, in ``dtype``'s arithmetic."""
    fn = ufunc(op)
    if dtype != "bfloat16":
        return lambda acc, x: fn(acc, x, out=acc)

    def bf16(acc, x):
        acc[:] = f32_to_bf16(fn(bf16_to_f32(acc), bf16_to_f32(x)))
    return bf16
