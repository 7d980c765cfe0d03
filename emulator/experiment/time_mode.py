"""Which clock a run keeps: the experiment's ``time`` setting, decided.

* ``virtual``: every switch and agent process advances fabric time
  together, in windows no longer than the smallest link lookahead, the next
  window opening when every process has finished the current one. Nothing
  is late by construction, so a virtual run has no dilation (D = 1: its
  wall time is the CPU its work needs), no calibration, no cache, no rerun.
* ``dilated``: the wall clock slowed by the dilation D
  (``emulator.experiment.dilation``); what BMv2, whose clock cannot be held,
  and a live fabric, where the kernel sends traffic (``fabric-emu cli``,
  ``fe.Fabric``), keep.
* ``auto``: virtual where virtual time runs, else dilated.

``resolve_time`` decides, for the target the run uses: the experiment it
returns has ``spec.time`` "virtual" or "dilated" (``Experiment.time_mode``)
and, when virtual, ``spec.dilation`` 1 whatever the file said (the file's
dilation is for dilated runs). An explicit ``time: virtual`` where it
cannot be kept is a ``ConfigError`` naming the file, ``time`` and why.

What virtual time covers yet is ``virtual_time_unsupported``'s to say, and
only its.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from emulator.errors import ConfigError
from emulator.experiment.faults import FAULTS_NEED, check_bmv2_faults, check_watchdog

if TYPE_CHECKING:  # pragma: no cover
    from emulator.experiment.resolved import Experiment

VIRTUAL, DILATED = "virtual", "dilated"
# summary.json's ``dilation_chosen_by`` for a virtual run
VIRTUAL_CHOSEN_BY = "virtual time"


def virtual_time_unsupported(exp: "Experiment") -> str | None:
    """Why virtual time does not run ``exp`` yet (None: it does). It covers
    host agents (their ``endpoints:`` parts -- host CPU, DPU, staging -- run
    in the host agent, on its NIC's clock), a workload's server and storage
    agents, on Ethernet (RoCE) and InfiniBand fabrics, on one machine or
    spread over a ``cluster:``'s servers (the window barrier reaches them
    over the runner's ssh connection: ``emulator.net.cluster``): every
    embedded run. The place to name what a new kind of process cannot keep
    yet."""
    return None


def why_not_virtual(exp: "Experiment", target: str, *, live: bool = False,
                    dilation_given: bool = False) -> str | None:
    """Why this run cannot keep virtual time, a noun phrase (None: it can):
    what ``time: auto`` resolves to dilated for, and an explicit
    ``time: virtual`` is refused with."""
    if target == "bmv2":
        return "target bmv2 (BMv2 keeps its own clock, which cannot be held)"
    if live:
        return ("a live fabric (fabric-emu cli, fe.Fabric: the kernel sends its traffic "
                "on the wall clock)")
    if dilation_given:
        return "a dilation given on the command line (a virtual run has none)"
    return virtual_time_unsupported(exp)


def resolve_time(exp: "Experiment", target: str, *, live: bool = False,
                 dilation_given: bool = False) -> "Experiment":
    """``exp`` with its clock decided for ``target`` ("embedded" or "bmv2",
    as the run resolves it: ``planned_target``). ``live``: a fabric the
    kernel sends traffic over; ``dilation_given``: a dilation from the
    command line (or ``fe.run(dilation=...)``), which asks for a dilated run.
    A sweep's points are resolved too (each is refused before any runs).
    Resolving a resolved experiment again changes nothing."""
    asked = exp.spec.time
    why_not = why_not_virtual(exp, target, live=live, dilation_given=dilation_given)
    if asked == VIRTUAL and why_not is not None:
        raise ConfigError(exp.source, "time", f"virtual is not possible with {why_not}; "
                                              "say time: dilated (or auto)")
    mode = VIRTUAL if asked == VIRTUAL or (asked == "auto" and why_not is None) else DILATED
    if exp.spec.faults and target == "bmv2":
        check_bmv2_faults(exp)           # link down/up and degrade, on the wall clock
    elif exp.spec.faults and mode != VIRTUAL:
        raise ConfigError(exp.source, "faults", FAULTS_NEED)
    check_watchdog(exp, target)
    update: dict = {"time": mode}
    if mode == VIRTUAL:
        update["dilation"] = 1.0
    points = tuple((v, resolve_time(p, target, live=live, dilation_given=dilation_given))
                   for v, p in exp.sweep_points)
    return dataclasses.replace(exp, spec=exp.spec.model_copy(update=update), sweep_points=points)


def check_time(exp: "Experiment", *, dilation_given: bool = False) -> "Experiment":
    """``exp`` as it is if the clock it asks for can be kept on the target it
    plans (a sweep's every point), else ``resolve_time``'s ``ConfigError``:
    what commands check before anything exists (each run resolves its own)."""
    resolve_time(exp, planned_target(exp.spec.target), dilation_given=dilation_given)
    return exp


def planned_target(target: str) -> str:
    """The target a run of ``target`` (the file's or ``--target``) uses, as
    far as its clock goes: "auto" as the runner resolves it; "bmv2" as
    given, installed or not (the run says if it is missing; the clock's
    refusal comes first, being the file's)."""
    if target != "auto":
        return target
    # deferred: the runner needs Mininet and the fabric layer, which imports this module
    from emulator.experiment.runner import resolve_target
    return resolve_target(target)


def keeps_virtual_time(exp: "Experiment") -> bool:
    """Whether a run of ``exp`` as it is (no dilation given) keeps virtual time."""
    return resolve_time(exp, planned_target(exp.spec.target)).time_mode == VIRTUAL


def run_time_mode(exp: "Experiment") -> str:
    """The clock a run of ``exp`` keeps: its resolved ``time_mode``; one
    never resolved (``run_experiment`` called directly, as tests do) runs
    dilated, as every run did before virtual time."""
    return DILATED if exp.spec.time == "auto" else exp.time_mode


__all__ = ["DILATED", "VIRTUAL", "VIRTUAL_CHOSEN_BY", "check_time", "keeps_virtual_time",
           "planned_target", "resolve_time",
           "run_time_mode", "virtual_time_unsupported", "why_not_virtual"]
