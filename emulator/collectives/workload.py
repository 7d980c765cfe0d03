"""The ``workload:`` section of an experiment file (collective benchmarks and
a training-step loop), validated strictly; errors are one line
``FILE: workload.field.path: reason`` (``ConfigError``).

```yaml
workload:
  algorithm: ring               # ring | hierarchical (all_reduce only)
  dtype: float32                # the only one (fixed, like op: sum)
  op: sum
  slice_bytes: 65536            # transfer unit: NCCL's step size; one receive slot each
  slots: 8                      # receive slots per connection (NCCL_STEPS)
  check: true                   # verify results (#wrong), outside the timed loop
  servers: [server1, server2]   # experiment files: the compute servers running it
                                #   (default: every compute server of the topology)
  tests:                        # nccl-tests style: sizes x iterations
    - collective: all_reduce    # all_reduce | all_gather | reduce_scatter | all_to_all
      sizes: {min_bytes: 65536, max_bytes: 4194304, factor: 2}   # -b -e -f
      iters: 20                 # -n
      warmup_iters: 5           # -w
    - {collective: all_gather, sizes: [1048576], algorithm: ring}
  training:                     # optional: compute, then all-reduce the gradients
    steps: 10
    warmup_steps: 1
    compute_us: 500             # fabric time
    collective: all_reduce
    size_bytes: 16777216
```
GPUDirect RDMA is a property of the NICs, not of the workload: it is set
(per NIC, with the staging path) in the experiment's ``endpoints:``
(``emulator/experiment/endpoints.py``); ``workload.gpudirect`` is an error
saying so. Sizes follow nccl-tests: the total buffer (all_gather / reduce_scatter: all
ranks' shares together). ``validate_for`` checks what needs the rank count.
"""
from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, model_validator

from emulator.errors import ConfigError

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
Algorithm = Literal["ring", "hierarchical"]
MAX_SIZES = 64


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SizeRange(_Strict):
    min_bytes: PositiveInt
    max_bytes: PositiveInt
    factor: int = Field(2, ge=2)

    @model_validator(mode="after")
    def _order(self):
        if self.max_bytes < self.min_bytes:
            raise ValueError("max_bytes must be >= min_bytes")
        return self

    def expand(self) -> list[int]:
        out, s = [], self.min_bytes
        while s <= self.max_bytes:
            out.append(s)
            s *= self.factor
        return out


class TestSpec(_Strict):
    collective: Collective
    sizes: Union[list[PositiveInt], SizeRange]
    iters: int = Field(20, ge=1)
    warmup_iters: int = Field(5, ge=0)
    algorithm: Algorithm | None = None     # default: the workload's

    @model_validator(mode="after")
    def _sizes(self):
        sizes = self.size_list()
        if not sizes:
            raise ValueError("no sizes")
        if len(sizes) > MAX_SIZES:
            raise ValueError(f"{len(sizes)} sizes: at most {MAX_SIZES}")
        return self

    def size_list(self) -> list[int]:
        return self.sizes.expand() if isinstance(self.sizes, SizeRange) else list(self.sizes)


class TrainingSpec(_Strict):
    steps: int = Field(ge=1)
    warmup_steps: int = Field(1, ge=0)
    compute_us: float = Field(0.0, ge=0)
    collective: Collective = "all_reduce"
    size_bytes: PositiveInt
    algorithm: Algorithm | None = None


class WorkloadSpec(_Strict):
    algorithm: Algorithm = "ring"
    dtype: Literal["float32"] = "float32"
    op: Literal["sum"] = "sum"
    slice_bytes: int = Field(65536, ge=256, le=16 << 20)
    slots: int = Field(8, ge=1, le=64)
    check: bool = True
    servers: list[str] | None = Field(None, min_length=1)   # experiment files only
    tests: list[TestSpec] = []
    training: TrainingSpec | None = None

    @model_validator(mode="after")
    def _something(self):
        if not self.tests and self.training is None:
            raise ValueError("give 'tests' or 'training' (or both)")
        if self.slice_bytes % 4:
            raise ValueError("slice_bytes must be a multiple of 4 (float32)")
        return self

    def pairs(self) -> list[tuple[str, str]]:
        """(collective, algorithm) of everything to run."""
        out = [(t.collective, t.algorithm or self.algorithm) for t in self.tests]
        if self.training is not None:
            out.append((self.training.collective, self.training.algorithm or self.algorithm))
        return out


def _field_path(loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part != "SizeRange" and not str(part).startswith(
                ("function-", "literal[", "union[", "list[")):
            out += ("." if out else "") + str(part)
    return out


def parse_workload(data, file: str, prefix: str = "workload") -> WorkloadSpec:
    if not isinstance(data, dict):
        raise ConfigError(file, prefix, "expected a mapping")
    if "gpudirect" in data:             # one source of truth: the NICs' endpoints section
        raise ConfigError(file, f"{prefix}.gpudirect",
                          "GPUDirect RDMA is per NIC: set 'endpoints: {gpudirect: false, "
                          "staging: {rate_gbps, latency_us}}' instead")
    try:
        return WorkloadSpec.model_validate(data)
    except ValidationError as e:
        # in a union (sizes: list | range) report the branch the input was
        # meant for, not "should be a valid list" for a mapping
        shape = {"list_type", "model_type", "model_attributes_type", "dict_type"}
        errs = e.errors()
        err = next((x for x in errs if x["type"] not in shape), errs[0])
        path = _field_path(err["loc"])
        raise ConfigError(file, f"{prefix}.{path}" if path else prefix,
                          err["msg"].removeprefix("Value error, ")) from None


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
