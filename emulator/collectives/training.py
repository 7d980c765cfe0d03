"""A parallelism-shaped training loop on engines (``step.py``'s schedules).

``train``: a barrier, then ``warmup_steps + steps`` steps back to back on
every rank (each step's inputs written at its start, as its compute would
produce them); per rank and step (after the warm-up) its time by phase
(``step.phase_times``); #wrong over every piece of the last step.
``report.training_summary`` sums the records up.
"""
from __future__ import annotations

from . import bench
from .data import count_wrong_pieces
from .engine import drive
from .step import Step, checks, fill_inputs, phase_times


def _check_all(items, rec: dict):
    """``count_wrong_pieces`` over every (got, want) of a rank: their sum into ``rec["wrong"]``."""
    total = 0
    for got, want in items:
        part: dict = {}
        yield from count_wrong_pieces(got, want, part)
        total += part["wrong"]
    rec["wrong"] = total


def train(engines, step: Step, steps: int, warmup_steps: int, check: bool = True,
          timeout_s: float = 60.0, background_check: bool = False,
          barrier_algorithm: str = "ring") -> list[dict]:
    """One record per rank of ``engines``: its steps' times by phase (clock ns)."""
    bench.barrier(engines, barrier_algorithm, timeout_s)

    def fill(run, iteration):
        fill_inputs(step, run.rank, run.bufs, iteration)
    runs = bench._runs(engines, step.schedules, range(warmup_steps + steps), 0, fill)
    lost0 = bench._lost_ns(engines)
    drive(engines, runs, timeout_s)
    lost = bench._lost_by_rank(lost0, engines)
    last = warmup_steps + steps - 1
    out = []
    for run in runs:
        phases = step.chain_phases(run.rank)
        rec = {"rank": run.rank, "nranks": step.shape.nranks, "shape": step.shape.describe(),
               "steps": [{"step": it, "start_ns": t0, "end_ns": t2,
                          "phases_ns": phase_times(phases, t0, marks, t2)}
                         for (it, t0, _, t2), marks in zip(run.records, run.mark_records)
                         if it >= warmup_steps],
               "wrong": None, "lost_ns": lost[run.rank]}
        if check:
            e = next(e for e in engines if run.rank in e.ranks)
            e.background.append(_check_all(checks(step, run.rank, run.bufs, last), rec))
        out.append(rec)
    if not background_check:
        bench.finish_checks(engines)
    return out

