"""What a ``workload:`` section (``emulator.schema.workload``) needs of the
fabric it runs on: sizes that split into float32 elements (and into one
share per rank), hierarchical for all_reduce only. Errors are one line
``FILE: workload.field.path: reason`` (``ConfigError``)."""
from __future__ import annotations

from emulator.errors import ConfigError
from emulator.schema.workload import TestSpec, WorkloadSpec

from .algorithms import Params

# size must split into one share per rank (nccl-tests: count per rank x n)
_PER_RANK = ("all_gather", "reduce_scatter", "all_to_all")


def params_of(t: TestSpec) -> Params:
    """A test's collective parameters, nccl-tests' defaults where not given."""
    d = Params()
    return Params(root=d.root if t.root is None else t.root,
                  shift=d.shift if t.shift is None else t.shift,
                  spread=d.spread if t.spread is None else t.spread)


def runs(spec: WorkloadSpec) -> list[tuple[str, str, Params]]:
    """(collective, algorithm, params) of every test and the training loop."""
    out = [(t.collective, t.algorithm or spec.algorithm, params_of(t)) for t in spec.tests]
    if spec.training is not None:
        out.append((spec.training.collective, spec.training.algorithm or spec.algorithm, Params()))
    return out


def validate_for(spec: WorkloadSpec, file: str, servers: int, gpus_per_server: int,
                 prefix: str = "workload") -> None:
    """What depends on the fabric: sizes must split into float32 elements
    (and into one share per rank), hierarchical is all_reduce only."""
    n = servers * gpus_per_server
    for i, t in enumerate(spec.tests):
        for name in ("root", "shift"):
            v = getattr(t, name)
            if v is not None and v >= n:
                raise ConfigError(file, f"{prefix}.tests[{i}].{name}",
                                  f"{v} is not below the {n} ranks")
    items = [(f"{prefix}.tests[{i}]", t.collective, t.algorithm or spec.algorithm, t.size_list(),
              isinstance(t.sizes, list)) for i, t in enumerate(spec.tests)]
    if spec.training is not None:
        t = spec.training
        items.append((f"{prefix}.training", t.collective, t.algorithm or spec.algorithm,
                      [t.size_bytes], None))
    for where, coll, alg, sizes, listed in items:
        if alg == "hierarchical" and coll != "all_reduce":
            raise ConfigError(file, f"{where}.algorithm", "hierarchical is all_reduce only")
        unit = 4 * n if coll in _PER_RANK else 4
        for k, size in enumerate(sizes):
            if size % unit:
                field = (f"{where}.sizes[{k}]" if listed else f"{where}.sizes" if listed is False
                         else f"{where}.size_bytes")
                what = "4 B (float32)" if unit == 4 else f"4 B x {n} ranks = {unit} B"
                raise ConfigError(file, field, f"{size} B is not a multiple of {what}")
