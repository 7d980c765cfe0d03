"""What a ``workload:`` section (``emulator.schema.workload``) needs of the
fabric it runs on: sizes that split into float32 elements (and into one
share per rank), hierarchical for all_reduce only. Errors are one line
``FILE: workload.field.path: reason`` (``ConfigError``)."""
from __future__ import annotations

from emulator.errors import ConfigError
from emulator.schema.workload import WorkloadSpec


def validate_for(spec: WorkloadSpec, file: str, servers: int, gpus_per_server: int,
                 prefix: str = "workload") -> None:
    """What depends on the fabric: sizes must split into float32 elements
    (and into one share per rank), hierarchical is all_reduce only."""
    n = servers * gpus_per_server
    items = [(f"{prefix}.tests[{i}]", t.collective, t.algorithm or spec.algorithm, t.size_list(),
              isinstance(t.sizes, list)) for i, t in enumerate(spec.tests)]
    if spec.training is not None:
        t = spec.training
        items.append((f"{prefix}.training", t.collective, t.algorithm or spec.algorithm,
                      [t.size_bytes], None))
    for where, coll, alg, sizes, listed in items:
        if alg == "hierarchical" and coll != "all_reduce":
            raise ConfigError(file, f"{where}.algorithm", "hierarchical is all_reduce only")
        unit = 4 if coll == "all_reduce" else 4 * n
        for k, size in enumerate(sizes):
            if size % unit:
                field = (f"{where}.sizes[{k}]" if listed else f"{where}.sizes" if listed is False
                         else f"{where}.size_bytes")
                what = "4 B (float32)" if unit == 4 else f"4 B x {n} ranks = {unit} B"
                raise ConfigError(file, field, f"{size} B is not a multiple of {what}")
