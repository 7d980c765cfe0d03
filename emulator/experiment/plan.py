"""``fabric-emu validate``: check an experiment or topology file without
building anything (no root, no namespaces, no switch), and describe what a
run would build.

    text = describe_file("experiments/demo.yaml", sets=["nic.mtu_bytes=4096"])

A file is an experiment when it names a ``topology``, ``traffic`` or
``workload``; otherwise it is read as a topology. Every problem is the
loaders' one-line ``ConfigError``.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable

from emulator.experiment.model import experiment_from_dict
from emulator.experiment.overrides import apply_sets
from emulator.experiment.resolved import WALL_S_AT_DILATION, Experiment
from emulator.experiment.time_mode import VIRTUAL, planned_target, resolve_time, why_not_virtual
from emulator.experiment.traffic_gen import generated_summary
from emulator.schema.load import read_yaml
from emulator.topo import fabric_from_dict, render_fabric
from emulator.errors import ConfigError

_EXPERIMENT_KEYS = ("topology", "traffic", "workload")


def is_experiment(data) -> bool:
    return isinstance(data, dict) and any(k in data for k in _EXPERIMENT_KEYS)


def describe_file(path: str | Path, sets: Iterable[str] = (), target: str | None = None,
                  width: int = 120) -> str:
    """The resolved plan of ``path`` as text; a ConfigError if it is not valid."""
    data = read_yaml(path, "experiment or topology file")
    if not is_experiment(data):
        if list(sets):
            raise ConfigError("--set", "", "applies to experiment files, not to a topology")
        fabric = fabric_from_dict(data, source=str(path))
        return f"{path}: valid topology\n" + render_fabric(fabric, width=width)
    exp = experiment_from_dict(apply_sets(data, sets), path, target)
    return "\n".join([f"{path}: valid experiment {exp.name!r}", *describe_experiment(exp), ""]) \
        + render_fabric(exp.fabric, width=width)


def describe_experiment(exp: Experiment) -> list[str]:
    """What a run of ``exp`` would do, a few lines: target, clock, dilation,
    traffic, workload. An explicit ``time: virtual`` the run could not keep
    is its ``ConfigError``."""
    target = planned_target(exp.spec.target)
    asked, exp = exp.spec.time, resolve_time(exp, target)
    spec, dilated = exp.spec, exp.time_mode != VIRTUAL
    auto = "auto: " if asked == "auto" else ""
    lines = [f"  target: {spec.target}",
             f"  time: dilated ({auto}not virtual with {why_not_virtual(exp, target)})" if dilated
             and auto else "  time: dilated" if dilated else
             f"  time: virtual ({auto}every process keeps fabric time, in windows: no dilation)"]
    planned = exp                            # at the D a run would start with, if known
    if dilated and spec.dilation == "auto":
        # deferred: dilation imports the runner's layers (a second) a fixed D does not need
        from emulator.experiment.dilation import (
            DilationCache, cache_key, fabric_key, machine_key, with_dilation,
        )
        entry = DilationCache().get(cache_key(machine_key(), fabric_key(exp, target)))
        planned = with_dilation(exp, entry["dilation"]) if entry else None
        lines.append("  dilation: auto, " + (
            f"{entry['dilation']:g} cached for this machine and fabric size" if entry else
            "not measured here yet: the first run calibrates it"))
    elif dilated:
        lines.append(f"  dilation: {spec.dilation:g}")
    generated = {g["entry"]: g for g in generated_summary(exp)}
    plain = [f for f in exp.flows if f.entry not in generated]
    if plain:
        kinds = Counter((f.op, f.size_bytes) for f in plain)
        lines.append(f"  traffic: {len(plain)} flows (" + ", ".join(
            f"{n} x {op} {size:,} B" for (op, size), n in sorted(kinds.items())) + ")")
    for i, g in generated.items():
        sizes = [f.size_bytes for f in exp.flows if f.entry == i]
        lines.append(f"  traffic[{i}]: {g['pattern']} {g['distribution']} at load {g['load']:g} "
                     f"for {g['duration_us']:g} µs on {g['hosts']} hosts (seed {g['seed']}): "
                     f"{g['flows']} flows" + (
                         f", {min(sizes):,}..{max(sizes):,} B (mean {g['mean_size_bytes']:,.0f}), "
                         f"offered load {g['offered_load']:.3f} (per host "
                         f"{g['offered_load_min']:.2f}..{g['offered_load_max']:.2f})"
                         if sizes else ""))
    if exp.workload is not None:
        w, wp = spec.workload, exp.workload
        parts = [f"{t.collective} at {len(t.size_list())} sizes" for t in (w.tests if w else [])]
        if w is not None and w.training is not None:
            tr = w.training
            parts.append("training loop" if not tr.parallel else "training step " + " x ".join(
                f"{k} {getattr(tr, k)}" for k in ("tp", "pp", "dp", "ep") if getattr(tr, k)))
        lines.append(f"  workload: {w.algorithm if w else 'storage'} on {len(wp.servers)} servers"
                     + (f" ({', '.join(parts)})" if parts else "")
                     + (f"; storage {wp.storage_server}" if wp.storage_server else ""))
    if spec.faults:
        kinds: dict[str, int] = {}
        for f in spec.faults:
            kinds[f.kind] = kinds.get(f.kind, 0) + 1
        lines.append(f"  faults: {len(spec.faults)} on "
                     f"{len({_target(f) for f in spec.faults})} targets ("
                     + ", ".join(f"{n} x {k}" for k, n in kinds.items()) + "; docs/faults.md)")
    wd = spec.switch.pfc_watchdog
    if wd.enabled:
        lines.append(f"  PFC watchdog: detection {wd.detection_time_us:g} us, restoration "
                     f"{wd.restoration_time_us:g} us, action {wd.action}")
    if spec.sweep is not None:
        lines.append(f"  sweep: {spec.sweep.parameter} over {len(exp.sweep_points)} values, a run each "
                     "(every one checked)")
    if spec.cluster is not None:
        # deferred: only an experiment with a cluster: section loads the cluster layer
        from emulator.net.cluster import place
        placed = place(spec.cluster, exp.fabric)
        for srv in spec.cluster.servers:
            nodes = [n for n, s in placed.items() if s == srv.name]
            lines.append(f"  server {srv.name} ({srv.address}): {len(nodes)} nodes: " + " ".join(nodes))
    lines.append(f"  wall-time limit: {planned.wall_limit_s:g} s" if planned is not None else
                 f"  wall-time limit: {spec.limits.wall_s:g} s up to D = {WALL_S_AT_DILATION:g}, "
                 "proportionally more above")
    return lines


__all__ = ["describe_experiment", "describe_file", "is_experiment"]


def _target(fault) -> tuple:
    """What a fault acts on: a link (its two ends), a switch or a host."""
    if hasattr(fault, "link"):
        return tuple(sorted(fault.ends))
    return (getattr(fault, "switch", None) or fault.host,)

