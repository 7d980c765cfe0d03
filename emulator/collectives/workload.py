"""What a ``workload:`` section (``emulator.schema.workload``) needs of the
fabric it runs on: sizes that split into elements of their type (and into
one share per rank), hierarchical and tree for all_reduce only. Errors are one line
``FILE: workload.field.path: reason`` (``ConfigError``)."""
from __future__ import annotations

from emulator.errors import ConfigError
from emulator.schema.workload import TestSpec, WorkloadSpec

from . import pxn
from .algorithms import ALL_REDUCE_ONLY, CHANNELED, Params, channeled
from .dtypes import amplitude, elem_bytes

# size must split into one share per rank (nccl-tests: count per rank x n)
_PER_RANK = ("all_gather", "reduce_scatter", "all_to_all")


def params_of(t: TestSpec, spec: WorkloadSpec) -> Params:
    """A test's collective parameters: its own, else the workload's type and
    op, else nccl-tests' defaults."""
    d = Params()
    return Params(root=d.root if t.root is None else t.root,
                  shift=d.shift if t.shift is None else t.shift,
                  spread=d.spread if t.spread is None else t.spread,
                  dtype=t.dtype or spec.dtype, op=t.op or spec.op,
                  channels=t.channels or _channels(spec, t.collective, t.algorithm),
                  pxn=spec.pxn)


def _rings(spec: WorkloadSpec, collective: str, algorithm: str | None) -> bool:
    """Whether the collective runs rings (trees) that channels split."""
    return channeled(collective, algorithm or spec.algorithm)


def _channels(spec: WorkloadSpec, collective: str, algorithm: str | None) -> int:
    """The workload's channels where the collective runs rings, else 1."""
    return spec.channels if _rings(spec, collective, algorithm) else 1


def training_params(spec: WorkloadSpec) -> Params:
    tr = spec.training
    return Params(dtype=spec.dtype, op=spec.op,
                  channels=_channels(spec, tr.collective, tr.algorithm) if tr else 1,
                  pxn=spec.pxn)


def runs(spec: WorkloadSpec) -> list[tuple[str, str, Params]]:
    """(collective, algorithm, params) of every test and the training loop."""
    out = [(t.collective, t.algorithm or spec.algorithm, params_of(t, spec)) for t in spec.tests]
    if spec.training is not None:
        out.append((spec.training.collective, spec.training.algorithm or spec.algorithm,
                    training_params(spec)))
    return out


def validate_for(spec: WorkloadSpec, file: str, servers: int, gpus_per_server: int,
                 prefix: str = "workload") -> None:
    """What depends on the fabric: sizes must split into elements of their
    type (and into one share per rank), a root or shift must name a rank,
    hierarchical and tree are all_reduce only, pxn's relay channels must
    fit a QPN, and a sum must stay exact
    (``dtypes.amplitude``: bfloat16 sums of at most 256 ranks)."""
    n = servers * gpus_per_server
    for i, t in enumerate(spec.tests):
        if t.channels not in (None, 1) and not _rings(spec, t.collective, t.algorithm):
            raise ConfigError(file, f"{prefix}.tests[{i}].channels",
                              f"{t.collective} ({t.algorithm or spec.algorithm}) runs one "
                              f"channel: channels are for ring {', '.join(CHANNELED)} "
                              "and tree all_reduce")
        for name in ("root", "shift"):
            v = getattr(t, name)
            if v is not None and v >= n:
                raise ConfigError(file, f"{prefix}.tests[{i}].{name}",
                                  f"{v} is not below the {n} ranks")
    items = [(f"{prefix}.tests[{i}]", t.collective, t.algorithm or spec.algorithm, t.size_list(),
              isinstance(t.sizes, list), params_of(t, spec)) for i, t in enumerate(spec.tests)]
    if spec.training is not None:
        t = spec.training
        items.append((f"{prefix}.training", t.collective, t.algorithm or spec.algorithm,
                      [t.size_bytes], None, training_params(spec)))
    for where, coll, alg, sizes, listed, p in items:
        if alg in ALL_REDUCE_ONLY and coll != "all_reduce":
            raise ConfigError(file, f"{where}.algorithm", f"{alg} is all_reduce only, not {coll}")
        if spec.pxn:
            try:
                pxn.check_fits(gpus_per_server, 2 * p.channels)
            except ValueError as e:
                raise ConfigError(file, f"{prefix}.pxn", str(e)) from None
        try:
            amplitude(p.dtype, n)
        except ValueError as e:
            raise ConfigError(file, f"{where}.dtype" if p.dtype != spec.dtype
                              else f"{prefix}.dtype", str(e)) from None
        elem = elem_bytes(p.dtype)
        unit = elem * n if coll in _PER_RANK else elem
        for k, size in enumerate(sizes):
            if size % unit:
                field = (f"{where}.sizes[{k}]" if listed else f"{where}.sizes" if listed is False
                         else f"{where}.size_bytes")
                what = (f"{elem} B ({p.dtype})" if unit == elem
                        else f"{elem} B x {n} ranks = {unit} B")
                raise ConfigError(file, field, f"{size} B is not a multiple of {what}")
