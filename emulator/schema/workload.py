"""The ``workload:`` and ``storage:`` sections of an experiment file:
collective benchmarks and a training-step loop on GPU servers, and
checkpoint reads from a storage server during that loop.

Every field: ``docs/design-notes.md``, "The workload: and storage: sections".

GPUDirect RDMA is a property of the NICs, not of the workload: it is set
(per NIC, with the staging path) in the experiment's ``endpoints:``
(``emulator.schema.endpoints``); ``workload.gpudirect`` is an error saying
so. Sizes follow nccl-tests: the total buffer (all_gather / reduce_scatter:
all ranks' shares together). What needs the fabric (the rank count, the
servers) is checked by ``emulator.collectives.workload.validate_for`` and
``emulator.experiment.workload_check``.
"""
from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import Field, model_validator

from emulator.schema.limits import BufferBytes, FabricUs, MessageBytes, memory_budget_bytes, size_text
from emulator.schema.load import FieldError, StrictSpec, validate

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
                     "reduce", "send_recv", "all_to_allv"]
DType = Literal["float32", "float16", "bfloat16", "int32"]
RedOp = Literal["sum", "max", "min"]
REDUCING = ("all_reduce", "reduce_scatter", "reduce")
TrainingCollective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
# the fields a collective takes besides its sizes (``emulator.collectives.algorithms.Params``)
_PARAMS = {"root": ("broadcast", "reduce"), "shift": ("send_recv",), "spread": ("all_to_allv",)}
Algorithm = Literal["ring", "hierarchical", "tree"]
MAX_SIZES = 64
MAX_CHANNELS = 32                  # rings side by side, at most


class SizeRange(StrictSpec):
    min_bytes: BufferBytes
    max_bytes: BufferBytes
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


class TestSpec(StrictSpec):
    __test__ = False                       # (not a pytest class)

    collective: Collective
    sizes: Union[list[BufferBytes], SizeRange]
    iters: int = Field(20, ge=1)
    warmup_iters: int = Field(5, ge=0)
    algorithm: Optional[Algorithm] = None  # default: the workload's
    root: Optional[int] = Field(None, ge=0)           # broadcast, reduce: required
    shift: Optional[int] = Field(None, ge=1)          # send_recv: default 1 (nccl-tests)
    spread: Optional[float] = Field(None, ge=0, le=1)  # all_to_allv: default 1 (nccl-tests)
    dtype: Optional[DType] = None                      # default: the workload's
    op: Optional[RedOp] = None                         # reducing ones; default: the workload's
    channels: Optional[int] = Field(None, ge=1, le=MAX_CHANNELS)   # ring, tree; default: the workload's

    @model_validator(mode="after")
    def _params(self):
        for name, colls in _PARAMS.items():
            if getattr(self, name) is not None and self.collective not in colls:
                raise FieldError(name, f"is for {' and '.join(colls)} only, not {self.collective}")
        if self.op is not None and self.collective not in REDUCING:
            raise FieldError("op", f"{self.collective} reduces nothing (op is for "
                                   f"{', '.join(REDUCING)})")
        if self.collective in _PARAMS["root"] and self.root is None:
            raise FieldError("root", f"{self.collective} needs a root rank")
        return self

    @model_validator(mode="after")
    def _sizes(self):
        sizes = self.size_list()
        if not sizes:
            raise FieldError("sizes", "no sizes")
        if len(sizes) > MAX_SIZES:
            raise FieldError("sizes", f"{len(sizes)} sizes: at most {MAX_SIZES}")
        return self

    def size_list(self) -> list[int]:
        return self.sizes.expand() if isinstance(self.sizes, SizeRange) else list(self.sizes)


# the parallel degrees of a parallelism-shaped step, and the size of each one's traffic
PARALLEL = ("tp", "pp", "dp", "ep")
MAX_MICROBATCHES = 16
MAX_LAYERS = 16


class TrainingSpec(StrictSpec):
    """A loop of ``steps`` steps: one collective over every rank
    (``collective``, ``size_bytes``, ``compute_us`` before it), or, given
    any of ``tp``/``pp``/``dp``/``ep``, a step shaped by that parallelism
    (``emulator.collectives.step``, docs/training.md): per microbatch and
    layer ``compute_us`` forward (``backward_compute_us`` backward, default
    twice that), TP all-reduce of ``tp_bytes``, MoE all-to-all of
    ``ep_bytes``; ``pp_bytes`` of activations between pipeline stages; the
    gradients (``dp_bytes``) reduced over DP, overlapping the last backward
    pass with ``dp_overlap``."""
    steps: int = Field(ge=1)
    warmup_steps: int = Field(1, ge=0)
    compute_us: FabricUs = 0.0
    collective: TrainingCollective = "all_reduce"
    size_bytes: Optional[BufferBytes] = None
    algorithm: Optional[Algorithm] = None
    tp: Optional[int] = Field(None, ge=1)
    pp: Optional[int] = Field(None, ge=1)
    dp: Optional[int] = Field(None, ge=1)        # default: the ranks left by tp x pp
    ep: Optional[int] = Field(None, ge=1)
    tp_bytes: Optional[BufferBytes] = None
    pp_bytes: Optional[BufferBytes] = None
    dp_bytes: Optional[BufferBytes] = None
    ep_bytes: Optional[BufferBytes] = None
    microbatches: int = Field(1, ge=1, le=MAX_MICROBATCHES)
    layers: int = Field(1, ge=1, le=MAX_LAYERS)            # per pipeline stage
    backward_compute_us: Optional[FabricUs] = None
    dp_collective: Literal["all_reduce", "reduce_scatter"] = "all_reduce"
    dp_overlap: bool = False

    @property
    def parallel(self) -> bool:
        """Whether the step is shaped by parallelism (else one collective)."""
        return any(getattr(self, k) is not None for k in PARALLEL)

    @model_validator(mode="after")
    def _shape(self):
        shaped = ("microbatches", "layers", "backward_compute_us", "dp_collective", "dp_overlap",
                  *(f"{k}_bytes" for k in PARALLEL))
        # given: not its default (a config written back in full has every field)
        given = [k for k in shaped if getattr(self, k) != type(self).model_fields[k].default]
        if not self.parallel:
            if given:
                raise FieldError(given[0], "is for a step shaped by parallelism: give tp, pp, "
                                           "dp or ep")
            if self.size_bytes is None:
                raise FieldError("size_bytes", "required (or give tp, pp, dp, ep and their "
                                               "*_bytes for a parallelism-shaped step)")
            return self
        for k in ("collective", "size_bytes", "algorithm"):
            if getattr(self, k) != type(self).model_fields[k].default:
                raise FieldError(k, "is for a one-collective loop: a parallelism-shaped step "
                                    "takes tp_bytes, pp_bytes, dp_bytes, ep_bytes")
        for k in PARALLEL:
            degree, size = getattr(self, k), getattr(self, f"{k}_bytes")
            if degree == 1 and size is not None:
                raise FieldError(f"{k}_bytes", f"{k} is 1: there is no {k.upper()} traffic")
            if (degree or 1) > 1 and size is None:
                raise FieldError(f"{k}_bytes", f"required with {k} {degree}")
        if self.ep is not None and self.dp is not None and self.dp % self.ep:
            raise FieldError("ep", f"{self.ep} does not divide dp {self.dp} (Megatron-LM's "
                                   "expert-parallel groups split the data-parallel ones)")
        return self


class WorkloadSpec(StrictSpec):
    algorithm: Algorithm = "ring"
    dtype: DType = "float32"
    op: RedOp = "sum"
    channels: int = Field(1, ge=1, le=MAX_CHANNELS)   # rings of the CHANNELED collectives, trees
    pxn: bool = False             # NCCL's PXN: inter-server sends leave by the receiver's rail
    slice_bytes: int = Field(65536, ge=256, le=16 << 20)
    slots: int = Field(8, ge=1, le=64)
    check: bool = True
    servers: Optional[list[str]] = Field(None, min_length=1)   # experiment files only
    tests: list[TestSpec] = []
    training: Optional[TrainingSpec] = None

    @model_validator(mode="before")
    @classmethod
    def _no_gpudirect(cls, data: Any) -> Any:
        if isinstance(data, dict) and "gpudirect" in data:   # one source of truth: endpoints:
            raise FieldError("gpudirect", "GPUDirect RDMA is per NIC: set 'endpoints: {gpudirect: "
                                          "false, staging: {rate_gbps, latency_us}}' instead")
        return data

    @model_validator(mode="after")
    def _something(self):
        if not self.tests and self.training is None:
            raise ValueError("give 'tests' or 'training' (or both)")
        if self.slice_bytes % 4:
            raise FieldError("slice_bytes", "must be a multiple of 4 (an element of any type)")
        return self

    def pairs(self) -> list[tuple[str, str]]:
        """(collective, algorithm) of everything to run."""
        out = [(t.collective, t.algorithm or self.algorithm) for t in self.tests]
        if self.training is not None and not self.training.parallel:
            out.append((self.training.collective, self.training.algorithm or self.algorithm))
        return out


class StorageSpec(StrictSpec):
    server: str = "storage1"
    block_bytes: MessageBytes = 262144        # one RDMA READ
    blocks: int = Field(16, ge=1, le=4096)
    readers: Optional[list[str]] = Field(None, min_length=1)
    queue_depth: int = Field(2, ge=1, le=64)
    storage_latency_us: FabricUs = 0.0

    @model_validator(mode="after")
    def _disk_fits(self):
        disk = self.block_bytes * self.blocks
        if disk > memory_budget_bytes():
            raise FieldError("blocks", f"{self.blocks} blocks of {self.block_bytes} bytes: the target's "
                                       f"disk ({size_text(disk)}) does not fit this machine's memory budget "
                                       f"({size_text(memory_budget_bytes())})")
        return self


def parse_workload(data: Any, file: str, prefix: str = "workload") -> WorkloadSpec:
    """A ``workload:`` section on its own (errors name ``prefix.field``)."""
    return validate(WorkloadSpec, data, file, prefix=prefix)
