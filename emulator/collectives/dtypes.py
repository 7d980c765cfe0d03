"""Element types and reduction ops of the collectives (nccl-tests' ``-d`` and
``-o``): their names, sizes and exact integers, without NumPy (the run's
start imports this through the report); their arithmetic: ``arith.py``.

Exact checks: nccl-tests' verifiable inputs (verifiable/verifiable.cu,
``genSumXY`` / ``genInOutFloatSum``) are chosen so that every partial sum is
exactly representable, so a float sum is the same in any order and is
checked with tolerance 0 (2 ulps only for ``avg``'s pre-multiply). Ours do
the same (``data.py``): integers of at most ``exact_limit / n`` in
magnitude, so no partial sum of n of them leaves the integers the type
holds exactly (float16: 2048, bfloat16: 256); max and min are exact anyway.
"""
from __future__ import annotations

# name: (storage NumPy type, bytes per element, nccl-tests' name, largest |integer| held exactly)
DTYPES = {"float32": ("float32", 4, "float", 1 << 24), "float16": ("float16", 2, "half", 1 << 11),
          "bfloat16": ("uint16", 2, "bfloat16", 1 << 8), "int32": ("int32", 4, "int32", 1 << 31)}
UFUNCS = {"sum": "add", "max": "maximum", "min": "minimum"}


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
