"""``dilation: auto``: the time dilation D this machine sustains for an
experiment, measured, cached, and corrected by a rerun when a run falls behind.

A low D runs fast but may fall behind; what is too low is measured: calibration runs
on a ladder of D, a cache per machine and fabric size, one rerun higher when a run
falls behind (``docs/dilated-time.md``, "dilation: auto -- calibration, cache, rerun").
All of this is for dilated runs (``emulator.experiment.time_mode``): a
virtual run is one run at D = 1, nothing calibrated, cached or rerun.
``summary.json`` records ``dilation`` (the D used), ``dilation_chosen_by``
(``file``, ``command line``, ``cache``, ``calibration``, ``rerun``, or
``virtual time``), ``dilation_reruns`` (the runs that fell behind: D, worst
ratio, who; their results moved to ``fell-behind-D<D>/``) and, with
``auto``, ``dilation_calibration`` (the cache key and measurements).
"""
from __future__ import annotations

import dataclasses
import io
import json
import math
from pathlib import Path
from typing import Callable

from rich.console import Console

from emulator.errors import ConfigError, FabricEmuError
from emulator.experiment.dilation_cache import (  # noqa: F401  (this module's names too)
    CACHE_VERSION, DilationCache, cache_key, cache_path, machine_key)
from emulator.experiment.model import Experiment, experiment_from_dict
from emulator.experiment.outdir import OutputDir, output_dir
from emulator.experiment.summary_file import RunSummary
from emulator.experiment.time_mode import VIRTUAL, VIRTUAL_CHOSEN_BY, planned_target, resolve_time
from emulator.experiment.traffic_gen import entry_hosts, host_rate_bps
from emulator.rundir import RunDir
from emulator.schema.limits import MAX_DILATION
from emulator.schema.workload import TestSpec

# up to 256000: a 64-host fabric on two cores needs ~128000-256000 (bench/scale.py)
LADDER = (500, 750, 1000, 1500, 2000, 3000, 4000, 6000, 8000, 12000, 16000, 24000, 32000,
          48000, 64000, 96000, 128000, 192000, 256000)
START_DILATION = 3000          # the first D calibrated for a fabric of START_PROCESSES ...
START_PROCESSES = 8            # ... switches and NICs (the demo's); larger ones start higher
MARGIN = 2.0                   # choose D whose worst lateness is at most half its limit
MAX_CALIBRATION_RUNS = 4
UP_JUMP_MAX = 4.0              # a behind calibration run raises D at most this much
# ... and a good one lowers it at most this much: far below, the 1 / D guess
# lands where the run no longer keeps up, and the bisection that follows
# used up the runs (websearch-hpcc: 4000 good, guess 750 behind, 2000 good,
# 1000 behind: 1500 was never measured)
DOWN_JUMP_MAX = 4.0
# A reading this close above the aim (<= x 1.5: 0.75 with MARGIN 2) at the
# step just below the chosen D is noise as often as not (the demo read 0.66
# at 3000 in one calibration, 0.26 in the next): it is measured once more,
# and the step is good if that reading is. Either is far from behind (1).
# A step below never measured is read too: the 1 / D prediction from a
# noisy reading is no bracket (incast-pfc read 0.41 at 1500, predicting 0.62
# at 1000, where other calibrations read 0.3) -- and with the ladder's steps
# (x1.33-1.5) any good reading predicts at most 0.75 on the step below.
REMEASURE_ABOVE_AIM = 1.5
# Lateness cannot grow with D (each frame has D times the wall time): a
# reading above the aim at a D higher than one that read better is noise --
# a stall from outside the run -- and is measured once more, the better of
# the two kept (the demo read 0.81 at 3000, then 1.59 at 6000, and the
# search went up to 24000 and chose 12000). One such re-measure per calibration.
REMEASURE_CONTRADICTIONS = 1
FALLBACK_DILATION = 10000.0    # `fabric-emu cli` with auto and nothing cached: no traffic to measure
CAL_FLOW_BYTES = 512 * 1024    # calibration flows: long enough for lateness to build up
CAL_POISSON_BYTES = 1 << 20    # a poisson entry's calibration: this much offered per host
CAL_TRAINING_STEPS = 2         # a workload's calibration: training steps (none of them warm-up)

Measure = Callable[[float], float]          # D -> worst_ratio of a run at D


# ------------------------------------------------------------------ choosing D

def ladder_at_least(d: float) -> float:
    """The smallest ladder step >= d (the top step if d is beyond it)."""
    return float(next((s for s in LADDER if s >= d - 1e-9), LADDER[-1]))


def predicted_ratio(ratio: float, d_from: float, d_to: float) -> float:
    """Noise lateness is a wall duration: in fabric time it scales as 1 / D."""
    return ratio * d_from / d_to


def _next_step(measured: dict[float, float], target: float) -> float | None:
    """The next D to measure, or None when the bracket is closed. Below the
    lowest good D the 1 / D prediction is optimistic (lateness grows faster
    once a run stops keeping up); above the highest bad D a behind run's
    ratio is pessimistic (work piled up), so: up at most ``UP_JUMP_MAX``
    times, down to the optimistic guess (at most ``DOWN_JUMP_MAX`` times),
    and when that proved bad, halfway (in log) between the highest bad and
    the lowest good D; when no guess lies below the lowest good D, the
    step just below it (every choice is bracketed by a reading)."""
    bad = [s for s, r in measured.items() if r > target]
    good = [s for s, r in measured.items() if r <= target]
    lo, hi = (max(bad) if bad else None), (min(good) if good else None)
    if hi is None:
        up = ladder_at_least(max(lo * 1.01, min(lo * measured[lo] / target, lo * UP_JUMP_MAX)))
        return None if up in measured else up
    steps = [float(s) for s in LADDER if s < hi and (lo is None or s > lo)]
    if not steps:
        return None
    guess = ladder_at_least(max(hi * measured[hi] / target, hi / DOWN_JUMP_MAX))
    if guess >= hi:
        # not even the optimistic guess is good lower; but a prediction from
        # a noisy reading is no bracket: the step just below is read
        # (hol-victim-ib once read 0.40 at 4000, its start, where it reads
        # 0.11-0.14, and stopped there)
        return steps[-1]
    if guess in steps:
        return guess
    mid = math.sqrt(lo * hi)           # the guess was at or below a bad D: bisect
    return min(steps, key=lambda s: (round(abs(math.log(s / mid)), 9), -s))   # a tie: the higher


def start_dilation(fabric: dict) -> float:
    """The first D to calibrate a fabric (``fabric_key``) at: START_DILATION
    for the demo's size, in proportion to its switches and NICs beyond it.
    Every one is a process sharing the machine's cores: lateness grows with
    their number, and a run far below its D (64 hosts at 3000) is minutes
    far behind for a verdict known in advance."""
    procs = fabric.get("switches", 0) + fabric.get("nics", 0)
    return ladder_at_least(START_DILATION * max(1.0, procs / START_PROCESSES))


def calibrate(measure: Measure, start: float = START_DILATION, margin: float = MARGIN,
              max_runs: int = MAX_CALIBRATION_RUNS) -> tuple[float, list[list[float]]]:
    """(chosen D, [[D, worst_ratio], ...] measured): the lowest good D
    (ratio <= 1 / margin) of a bracketing search from ``start``
    (``_next_step``), never more than ``max_runs`` measurements, besides
    one re-measure of a reading that contradicts a lower D's
    (``REMEASURE_CONTRADICTIONS``: the better kept); then the step just
    below the chosen D, if it was never read or read at most
    ``REMEASURE_ABOVE_AIM`` above the aim (every reading listed, a D's in
    the order measured). If no D measured was good, the highest D measured
    scaled by its prediction."""
    target = 1.0 / margin
    measured: dict[float, float] = {}
    readings: list[list[float]] = []
    again_left = REMEASURE_CONTRADICTIONS
    d: float | None = ladder_at_least(start)
    for _ in range(max_runs):
        r = measure(d)
        readings.append([d, round(r, 4)])
        if r > target and again_left and any(s < d and q < r for s, q in measured.items()):
            again_left -= 1              # a higher D read worse than a lower one: noise
            again = measure(d)
            readings.append([d, round(again, 4)])
            r = min(r, again)
        measured[d] = r
        d = _next_step(measured, target)
        if d is None:
            break
    good = [s for s, r in measured.items() if r <= target]
    if good:
        chosen = min(good)
        below = [float(s) for s in LADDER if s < chosen]
        if below:
            b = below[-1]
            # the step below: read if it never was (the choice is then
            # bracketed), once more if it read just above the aim
            if b not in measured or measured[b] <= target * REMEASURE_ABOVE_AIM:
                again = measure(b)
                readings.append([b, round(again, 4)])
                if again <= target:
                    chosen = b
    else:
        top = max(measured)
        chosen = ladder_at_least(top * max(2.0, measured[top] / target))
    return chosen, sorted(readings, key=lambda x: x[0])     # a D measured twice: in order


def rerun_dilation(d: float, worst_ratio: float, margin: float = MARGIN) -> float:
    """The D to rerun a run that fell behind at ``d``: predicted good, at least 2 x d."""
    return ladder_at_least(max(2.0 * d, d * worst_ratio * margin))


# ------------------------------------------------------------------ the cache's key
# (the cache itself: ``dilation_cache``)

def fabric_key(exp: Experiment, target: str) -> dict:
    """The fabric's size and what runs on it: what the sustainable D depends on."""
    f = exp.fabric
    flows = len(exp.flows)
    if exp.workload is not None:
        flows += len(workload_flows(exp))
    return {"switches": len(f.switches()), "servers": len(f.servers()), "nics": len(f.hosts()),
            "flows": flows, "target": target}


# ------------------------------------------------------------------ experiments at a D

def with_dilation(exp: Experiment, d: float | str) -> Experiment:
    """``exp`` at D = ``d`` (a number, or "auto")."""
    d = d if d == "auto" else float(d)
    return dataclasses.replace(exp, spec=exp.spec.model_copy(update={"dilation": d}))


def parse_dilation(value: str | float | None) -> float | str | None:
    """``--dilation``: "auto" or a number from 1 to ``MAX_DILATION``, as the
    file's ``dilation`` (None: the file's)."""
    if value is None or value == "auto":
        return value
    try:
        d = float(value)
    except (TypeError, ValueError):
        d = math.nan
    if not 1 <= d <= MAX_DILATION:       # NaN and inf fail this too
        raise FabricEmuError(f"--dilation: expected 'auto' or a number from 1 to "
                             f"{MAX_DILATION:,.0f}, got {value!r}")
    return d


def workload_flows(exp: Experiment) -> list[dict]:
    """A workload's flows as the cache key counts them (``fabric_key``): each
    server's NIC g to the next server's NIC g (the ring's server-to-server
    hops, every rail), the storage target to each reader."""
    wp, f = exp.workload, exp.fabric
    out = []
    servers = [f.server(s) for s in wp.servers]
    if len(servers) > 1:
        for i, srv in enumerate(servers):
            nxt = servers[(i + 1) % len(servers)]
            for a, b in zip(srv.nics, nxt.nics):
                out.append({"src": a, "dst": b, "op": "write", "size_bytes": CAL_FLOW_BYTES})
    for _, nic in wp.readers:
        out.append({"src": wp.storage_nic, "dst": nic, "op": "write", "size_bytes": CAL_FLOW_BYTES})
    return out


def calibration_experiment(exp: Experiment) -> Experiment:
    """The scaled-down copy that calibration runs (the experiment itself if the
    copy is not a valid experiment, e.g. tenants that a burst would cross)."""
    data = exp.spec.model_dump(mode="json", exclude_none=True)
    data.pop("sweep", None)
    data["name"] = f"{exp.name}-calibration"
    if data.get("traffic"):
        data["traffic"] = [_calibration_entry(exp, i, t) for i, t in enumerate(data["traffic"])]
    if exp.workload is not None:
        _shorten_workload(data)
    try:
        return experiment_from_dict(data, exp.source)
    except ConfigError:
        return exp


def _shorten_workload(data: dict) -> None:
    """A workload's calibration runs the workload itself -- its servers'
    collective agents, GPU models and storage readers are the processes
    whose lateness its full run is judged on (a burst of WRITEs between its
    NICs in its stead, run by host agents, calibrated checkpoint-shared at
    8000; its full run then fell behind at 8000 and held at 24000) --
    shortened: every test's largest size once, no warm-up;
    ``CAL_TRAINING_STEPS`` training steps; the storage blocks in proportion."""
    wl = data["workload"]
    for t in wl.get("tests") or []:
        t.update(sizes=[max(TestSpec.model_validate(t).size_list())], iters=1, warmup_iters=0)
    tr = wl.get("training")
    share = 1.0
    if tr is not None:
        steps = min(tr["steps"], CAL_TRAINING_STEPS)
        share = steps / (tr["steps"] + tr.get("warmup_steps", 1))
        tr.update(steps=steps, warmup_steps=0)
    st = data.get("storage")
    if st is not None and "blocks" in st:
        st["blocks"] = max(st.get("queue_depth", 1), math.ceil(st["blocks"] * share))


def _calibration_entry(exp: Experiment, i: int, t: dict) -> dict:
    """A traffic entry of the calibration copy: a flow or pattern capped at
    CAL_FLOW_BYTES; a poisson entry at its load with its flows capped there
    too (so more of them: the load is kept) and its window cut to the time
    its slowest host offers ``CAL_POISSON_BYTES`` in."""
    if t.get("pattern") != "poisson":
        return dict(t, size_bytes=min(t["size_bytes"], CAL_FLOW_BYTES))
    spec = exp.spec.traffic[i]
    rate = min(host_rate_bps(exp.fabric, h) for h in entry_hosts(spec, exp.fabric))
    window_us = CAL_POISSON_BYTES * 8e6 / (rate * spec.load)
    return dict(t, duration_us=min(spec.duration_us, window_us),
                min_bytes=min(spec.min_bytes, CAL_FLOW_BYTES),
                max_bytes=min(spec.max_bytes or CAL_FLOW_BYTES, CAL_FLOW_BYTES))


# ------------------------------------------------------------------ running

RunOne = Callable[[Experiment, Path, Console], dict]     # the summary as written


def _runner(pcap: bool, summary_only: bool = False, plots: bool = True) -> RunOne:
    # deferred: the runner needs Mininet and the fabric layer; plan (validate) imports this module
    from emulator.experiment.runner import run_experiment
    return lambda e, out, console: run_experiment(e, out, console, pcap=pcap,
                                                  summary_only=summary_only, plots=plots)


def measure_by_running(exp: Experiment, out_dir: Path, run_one: RunOne,
                       console: Console) -> Measure:
    """Calibration runs of ``calibration_experiment(exp)`` into
    ``out_dir/calibration/D=<D>`` (run directories of their own: a D measured
    again replaces its earlier run), printing one line each."""
    cal = calibration_experiment(exp)
    quiet = Console(file=io.StringIO())

    def measure(d: float) -> float:
        s = run_one(with_dilation(cal, d), RunDir(out_dir).calibration(d).path, quiet)
        r = s["fidelity"]["worst_ratio"]
        console.print(f"  calibration at dilation {d:g}: worst lateness {r:.2f} of its limit"
                      + ("" if s.get("complete") else " (incomplete)"))
        return r
    return measure


def run_with_dilation(exp: Experiment, out_dir: str | Path, console: Console | None = None,
                      pcap: bool = False, dilation: float | str | None = None, *,
                      run_one: RunOne | None = None, measure: Measure | None = None,
                      cache: DilationCache | None = None, target: str | None = None,
                      force: bool = False, plots: bool = True) -> dict:
    """Run ``exp`` in its time (``time_mode.resolve_time``; a ``dilation``
    given asks for dilated): virtual, once at D = 1; dilated, at its D
    (``dilation`` overrides the file's): a number as given; ``auto`` from the
    cache or a calibration, rerun once higher if the run falls behind.
    Returns the final run's summary, with the dilation's provenance added
    (and rewritten into ``summary.json``). ``out_dir`` is new or an earlier
    run's (``outdir``; ``force``: one holding others' files too, kept).
    ``plots``: false, the run draws no PNG figures (``run_experiment``)."""
    target = target or planned_target(exp.spec.target)
    exp = resolve_time(exp, target, dilation_given=dilation is not None)
    with output_dir(out_dir, force=force) as odir:
        return _run_with_dilation(exp, odir, console or Console(stderr=True), pcap, dilation,
                                  run_one, measure, cache, target, plots)


def _run_with_dilation(exp: Experiment, odir: OutputDir, console: Console, pcap: bool,
                       dilation: float | str | None, run_one: RunOne | None,
                       measure: Measure | None, cache: DilationCache | None,
                       target: str | None, plots: bool = True) -> dict:
    out_dir = odir.path
    run_one_given = run_one is not None
    run_one = run_one or _runner(pcap, plots=plots)
    if exp.time_mode == VIRTUAL:          # nothing is late: no D to choose, no rerun
        return _record(run_one(exp, out_dir, console), out_dir, VIRTUAL_CHOSEN_BY, [], None)
    requested = exp.spec.dilation if dilation is None else dilation
    if requested != "auto":
        summary = run_one(with_dilation(exp, requested), out_dir, console)
        return _record(summary, out_dir, "file" if dilation is None else "command line", [], None)

    odir.claim(RunDir.CALIBRATION, RunDir.BEHIND_GLOB)    # before any run
    cache = cache or DilationCache()
    key = cache_key(machine_key(), fabric_key(exp, target))
    entry = cache.get(key)
    if entry is not None:
        d, how, measurements = float(entry["dilation"]), "cache", entry.get("measurements", [])
        console.print(f"dilation auto: {d:g} (cached for this machine and fabric size, {cache.path})")
    else:
        console.print("dilation auto: calibrating this machine for this fabric and traffic")
        # Calibration runs need only their verdict: summary.json, no captures
        # (a run at a D far too low leaves raw logs of gigabytes: 64 hosts at 3000).
        cal_run = run_one if run_one_given else _runner(False, summary_only=True)
        measure = measure or measure_by_running(exp, out_dir, cal_run, console)
        d, measurements = calibrate(measure, start=start_dilation(fabric_key(exp, target)))
        how = "calibration"
        cache.put(key, d, how, measurements)
        console.print(f"dilation auto: {d:g} (worst lateness at most 1/{MARGIN:g} of its limit; "
                      f"cached in {cache.path})")
    summary = run_one(with_dilation(exp, d), out_dir, console)
    reruns = []
    if not summary["fell_behind"] and how == "cache":
        follow_cached(cache, key, d, summary["fidelity"]["worst_ratio"], measurements)
    if summary["fell_behind"]:
        r = summary["fidelity"]["worst_ratio"]
        d2 = rerun_dilation(d, r)
        reruns.append({"dilation": d, "chosen_by": how, "worst_ratio": r,
                       "behind": summary["fidelity"]["behind"]})
        kept = _set_aside(odir, d)
        console.print(f"[bold]dilation auto: the run fell behind at {d:g}[/] (worst lateness "
                      f"{r:.2f} of its limit: {', '.join(summary['fidelity']['behind'])}; kept in "
                      f"{kept}); rerunning once at {d2:g}")
        cache.put(key, d2, "rerun", measurements)
        summary = run_one(with_dilation(exp, d2), out_dir, console)
        d, how = d2, "rerun"
        if summary["fell_behind"]:
            console.print(f"[bold red]dilation auto: still behind at {d:g}[/]: the results are "
                          "distorted; the next run starts higher")
            cache.put(key, rerun_dilation(d, summary["fidelity"]["worst_ratio"]), "rerun",
                      measurements)
    return _record(summary, out_dir, how, reruns,
                   {"cache_file": str(cache.path), "key": json.loads(key),
                    "measurements": measurements, "margin": MARGIN})


def run_raised_while_behind(exp: Experiment, out_dir: str | Path, start: float,
                            console: Console | None = None, pcap: bool = False,
                            max_reruns: int = 2, *, run_one: RunOne | None = None,
                            plots: bool = True) -> dict:
    """Run ``exp`` dilated (``time: virtual`` refused) at ``start``; while the
    run falls behind, rerun it (at most ``max_reruns`` times) at
    ``rerun_dilation``'s higher D. What the test suite uses: no calibration,
    so a machine that keeps up pays for one run only, and a loaded one still
    gets results from a run that was not behind (the caller asserts
    ``fell_behind`` is false). Nothing is cached. ``plots``: as ``run_with_dilation``'s."""
    exp = resolve_time(exp, planned_target(exp.spec.target), dilation_given=True)
    console = console or Console(stderr=True)
    run_one = run_one or _runner(pcap, plots=plots)
    d, reruns = float(start), []
    with output_dir(out_dir) as odir:
        odir.claim(RunDir.BEHIND_GLOB)
        summary = run_one(with_dilation(exp, d), odir.path, console)
        while summary["fell_behind"] and len(reruns) < max_reruns:
            r = summary["fidelity"]["worst_ratio"]
            reruns.append({"dilation": d, "chosen_by": "start" if not reruns else "rerun",
                           "worst_ratio": r, "behind": summary["fidelity"]["behind"]})
            kept = _set_aside(odir, d)
            d = rerun_dilation(d, r)
            console.print(f"[bold]the run fell behind[/] (worst lateness {r:.2f} of its limit; "
                          f"kept in {kept}); rerunning at {d:g}")
            summary = run_one(with_dilation(exp, d), odir.path, console)
        return _record(summary, odir.path, "start" if not reruns else "rerun", reruns, None)


def follow_cached(cache: "DilationCache", key: str, d: float, worst_ratio: float,
                  measurements: list) -> float | None:
    """The cached D follows the machine, one step a run, from a run at that D
    that did not fall behind. Far below the limit (below 1 / (4 x MARGIN): a
    machine quieter than when it was calibrated, or a rerun's D after a
    passing load spike) it is halved: even half the D keeps the ratio under
    the margin's aim, as lateness scales as 1 / D. Above the margin's aim
    (1 / MARGIN) but not behind (a machine busier than at calibration) it is
    raised to the ladder step that brings the ratio back to the aim, before
    a run falls behind. Returns the new D, or None if it stays."""
    if worst_ratio > 1 / MARGIN:
        higher = ladder_at_least(d * worst_ratio * MARGIN)
        if higher <= d:
            return None
        cache.put(key, higher, "tightened", measurements)
        return higher
    if worst_ratio >= 1 / (4 * MARGIN):
        return None
    lower = ladder_at_least(d / 2)
    if lower >= d:
        return None
    cache.put(key, lower, "relaxed", measurements)
    return lower


def _set_aside(odir: OutputDir, d: float) -> Path:
    """Move the results of the run at ``d`` (what this run wrote into the
    directory but calibrations and runs set aside before; never others'
    files) into ``fell-behind-D<d>``: the rerun starts with no result file
    of the run it replaces."""
    return odir.set_aside(RunDir.behind_name(d), keep=(RunDir.CALIBRATION, RunDir.BEHIND_GLOB))


def _record(written: dict, out_dir: Path, how: str, reruns: list, calibration: dict | None) -> dict:
    """The final run's summary with the dilation's provenance, rewritten."""
    summary = RunSummary.model_validate(written)
    summary.dilation_chosen_by, summary.dilation_reruns = how, reruns
    if calibration is not None:
        summary.dilation_calibration = calibration
    if RunDir(out_dir).summary.exists():
        summary.write(out_dir)
    return summary.as_dict()


def dilation_for_cli(exp: Experiment, target: str) -> Experiment:
    """``fabric-emu cli`` (no traffic to calibrate with): an ``auto`` D is the
    cached one, else ``FALLBACK_DILATION``."""
    if exp.spec.dilation != "auto":
        return exp
    entry = DilationCache().get(cache_key(machine_key(), fabric_key(exp, target)))
    return with_dilation(exp, entry["dilation"] if entry else FALLBACK_DILATION)
