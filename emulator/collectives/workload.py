"""What a ``workload:`` section (``emulator.schema.workload``) needs of the
fabric it runs on: sizes that split into elements of their type (and into
one share per rank), hierarchical and tree for all_reduce only. Errors are one line
``FILE: workload.field.path: reason`` (``ConfigError``)."""
from __future__ import annotations

from emulator.errors import ConfigError
from emulator.schema.limits import memory_budget_bytes, size_text
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
    if spec.training is not None and not spec.training.parallel:
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
    if spec.training is not None and spec.training.parallel:
        _validate_shape(spec, file, servers, gpus_per_server, prefix)
    elif spec.training is not None:
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


def _validate_shape(spec: WorkloadSpec, file: str, servers: int, G: int, prefix: str) -> None:
    """A parallelism-shaped step on ``servers`` x ``G`` ranks: tp x pp x dp
    is every rank, a TP group inside one server's NVLink domain, ep divides
    dp, each size splits into elements (per rank where the collective
    shares it out, per bucket where dp_overlap cuts the gradients)."""
    tr, n, where = spec.training, servers * G, f"{prefix}.training"
    tp, pp, ep = tr.tp or 1, tr.pp or 1, tr.ep or 1
    if tr.dp is None and n % (tp * pp):
        raise ConfigError(file, f"{where}.tp", f"tp {tp} x pp {pp} does not divide the {n} ranks "
                                              f"({servers} servers x {G} GPUs)")
    dp = tr.dp if tr.dp is not None else n // (tp * pp)
    if tp * pp * dp != n:
        raise ConfigError(file, where, f"tp {tp} x pp {pp} x dp {dp} = {tp * pp * dp} ranks, the "
                                       f"fabric has {n} ({servers} servers x {G} GPUs)")
    if G % tp:
        raise ConfigError(file, f"{where}.tp", f"{tp} ranks would span servers: a TP group is "
                                               f"inside one NVLink domain, tp must divide the "
                                               f"{G} GPUs of a server")
    if dp % ep:
        raise ConfigError(file, f"{where}.ep", f"{ep} does not divide dp {dp} (Megatron-LM's "
                                               "expert-parallel groups split the data-parallel ones)")
    if dp > 1 and tr.dp_bytes is None:
        raise ConfigError(file, f"{where}.dp_bytes", f"required with dp {dp}")
    try:
        amplitude(spec.dtype, max(tp, dp, ep, 2))
    except ValueError as e:
        raise ConfigError(file, f"{prefix}.dtype", str(e)) from None
    elem = elem_bytes(spec.dtype)
    buckets = tr.layers if tr.dp_overlap else 1
    units = {"tp_bytes": (elem, ""), "pp_bytes": (elem, ""),
             "ep_bytes": (elem * ep, f" x ep {ep}"),
             "dp_bytes": (elem * buckets * (dp if tr.dp_collective == "reduce_scatter" else 1),
                          (f" x {buckets} buckets (layers, dp_overlap)" if buckets > 1 else "")
                          + (f" x dp {dp} (reduce_scatter)" if tr.dp_collective == "reduce_scatter"
                             else ""))}
    for name, (unit, why) in units.items():
        size = getattr(tr, name)
        if size is not None and size % unit:
            raise ConfigError(file, f"{where}.{name}", f"{size} B is not a multiple of {elem} B "
                                                       f"({spec.dtype}){why} = {unit} B")
    need = n * _step_buffer_bytes(tr)
    if need > memory_budget_bytes():
        raise ConfigError(file, where, f"the step's buffers, up to {size_text(need)} over {n} "
                                       f"ranks, do not fit this machine's memory budget "
                                       f"({size_text(memory_budget_bytes())}): fewer microbatches "
                                       "or layers, or smaller sizes")


def _step_buffer_bytes(tr) -> int:
    """At most the bytes of one rank's step buffers (``step.py``: every piece
    has its own): per microbatch, layer and direction a TP all-reduce's and
    a MoE all-to-all's input and output; per microbatch and direction the
    activations in and out; the gradients' collectives (a reduce-scatter's
    copy and an all-gather's output included)."""
    M, L = tr.microbatches, tr.layers
    return (M * L * 2 * 2 * ((tr.tp_bytes or 0) + (tr.ep_bytes or 0))
            + M * 2 * 2 * (tr.pp_bytes or 0) + 4 * (tr.dp_bytes or 0))
