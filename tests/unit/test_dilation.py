"""``dilation: auto`` without a fabric: the choice of D from injected
measurements, the per-machine / per-fabric-size cache, and the runner's
rerun of a run that fell behind (run and measure functions injected)."""
from __future__ import annotations

import json

import pytest

from emulator.errors import FabricEmuError
from emulator.experiment import dilation as dil
from emulator.experiment.dilation import (
    DilationCache, cache_key, cache_path, calibrate, calibration_experiment, fabric_key,
    ladder_at_least, parse_dilation, follow_cached, rerun_dilation, run_with_dilation,
    start_dilation,
    with_dilation,
)
from tests.summaries import run_summary
from tests.unit.test_results import make_experiment


def noise_only(c: float):
    """Lateness of fixed wall duration: worst ratio c / D."""
    calls = []

    def measure(d):
        calls.append(d)
        return c / d
    measure.calls = calls
    return measure


def readings_by_call(readings: dict):
    """A measure that returns D's reading (a number), or its readings in
    turn (a list; the last one repeated); ``.calls``: the Ds measured."""
    calls = []

    def measure(d):
        calls.append(d)
        rs = readings[d]
        if not isinstance(rs, list):
            return rs
        return rs[min(len(rs), calls.count(d)) - 1]
    measure.calls = calls
    return measure


# ---------------------------------------------------------------- choosing D

@pytest.mark.parametrize("switches, nics, start", [
    (4, 4, 3000),        # the demo: START_DILATION
    (1, 2, 3000),        # smaller: never below it
    (12, 32, 24000),     # 32 hosts: 3000 x 44 / 8 = 16500, the ladder's next step
    (20, 64, 32000),     # 64 hosts: 31500
])
def test_calibration_starts_higher_for_a_fabric_of_more_processes(switches, nics, start):
    assert start_dilation({"switches": switches, "nics": nics, "servers": nics, "flows": 1,
                           "target": "embedded"}) == start


def test_calibration_picks_the_smallest_good_step_and_stops_when_predicted_bad():
    m = noise_only(1000)                     # good (<= 0.5) from D = 2000
    d, measured = calibrate(m, start=3000)
    assert d == 2000
    # 1500, predicted 0.67, is read: a choice is bracketed by the step below;
    # its 0.67, just above the aim, is read once more
    assert m.calls == [3000, 2000, 1500, 1500]
    assert measured == [[1500, 0.6667], [1500, 0.6667], [2000, 0.5], [3000, 0.3333]]


def test_calibration_brackets_a_threshold_that_the_prediction_misses():
    # Behind below 8000 (work piles up: ratio 6 whatever D), noise only
    # above: the good side predicts 4000, which is behind; the search then
    # bisects and lands on the true threshold within 4 runs.
    overloaded = {d: (6.0 if d < 8000 else 2000 / d) for d in dil.LADDER}
    m = readings_by_call(overloaded)
    d, measured = calibrate(m, start=3000, max_runs=4)
    assert m.calls == [3000, 12000, 4000, 8000, 6000]   # up x4 at most, the guess, the middle,
                                                     # the step below (behind)
    assert d == 8000


def test_calibration_jumps_down_to_the_guess_from_a_high_good_run():
    m = noise_only(1000)                     # good from 2000
    d, _ = calibrate(m, start=48000)
    assert m.calls[:4] == [48000, 12000, 3000, 2000]   # x4 down at most, not a step at a time
    assert d == 2000
    m = noise_only(1000)
    d, _ = calibrate(m, start=4000)
    assert m.calls[:3] == [4000, 2000, 1500] and d == 2000   # the guess, when within x4; the bracket


def test_calibration_reaches_the_step_between_a_far_guess_and_its_bracket():
    # websearch-hpcc once: good at 4000 (0.08), behind at 750 and 1000, good
    # at 2000 (0.2); 1500 was never measured. At most x4 down: 1500 is the 4th.
    ratios = {4000: 0.08, 2000: 0.2, 1500: 0.4, 1000: 1.2, 750: 3.0, 500: 6.0}
    m = readings_by_call(ratios)
    d, _ = calibrate(m, start=4000, max_runs=4)
    assert m.calls == [4000, 1000, 2000, 1500] and d == 1500


def test_calibration_behind_by_little_goes_up_by_its_prediction():
    m = noise_only(6000)                     # good from 12000
    d, _ = calibrate(m, start=8000)          # 0.75 at 8000 -> x1.5: 12000, not x4
    assert m.calls[:2] == [8000, 12000]
    assert d == 12000


def test_calibration_that_finds_nothing_good_goes_beyond_what_it_measured():
    d, measured = calibrate(lambda d: 50.0, start=3000, max_runs=3)
    assert d > max(m[0] for m in measured) or d == dil.LADDER[-1]


def test_rerun_dilation_is_at_least_double_and_predicted_good():
    assert rerun_dilation(3000, 1.2) == 8000          # predicted good: 3000 x 1.2 x 2 = 7200
    assert rerun_dilation(3000, 0.9) == 6000          # at least twice
    assert rerun_dilation(64000, 3.0) == dil.LADDER[-1]


def test_parse_dilation():
    assert parse_dilation(None) is None and parse_dilation("auto") == "auto"
    assert parse_dilation("2500") == 2500.0
    assert parse_dilation("1e6") == 1e6
    for bad in ("fast", "0.5", "nan", "inf", "-3", "1e300", "1000001"):
        with pytest.raises(FabricEmuError, match="--dilation"):
            parse_dilation(bad)


def test_auto_must_be_resolved_before_a_run():
    exp = make_experiment(dilation="auto")
    with pytest.raises(FabricEmuError, match="auto"):
        exp.dilation
    assert with_dilation(exp, 4000).dilation == 4000.0


# ---------------------------------------------------------------- the cache

def test_cache_path_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_path() == tmp_path / "fabric-emu" / "dilation.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_path() == tmp_path / "home" / ".cache" / "fabric-emu" / "dilation.json"


def test_cache_key_separates_machines_and_fabric_sizes():
    small = make_experiment()                                   # 2 flows on clos-2x2
    more = make_experiment(traffic=[{"pattern": "all-to-all", "size_bytes": 1024}])   # 12 flows
    m1 = {"hostname": "a", "cpus": 2, "cpu_model": "x"}
    m2 = dict(m1, cpus=4)
    assert fabric_key(small, "embedded") == {"switches": 4, "servers": 4, "nics": 4, "flows": 2,
                                             "target": "embedded"}
    keys = {cache_key(m, fabric_key(e, t)) for m in (m1, m2) for e in (small, more)
            for t in ("embedded", "bmv2")}
    assert len(keys) == 8
    # the same fabric size and machine: the same key, whatever the flows' sizes
    bigger = make_experiment(traffic=[{"src": "h1", "dst": "h3", "size_bytes": 1 << 24},
                                      {"src": "h2", "dst": "h3", "size_bytes": 1 << 24}])
    assert cache_key(m1, fabric_key(bigger, "embedded")) == cache_key(m1, fabric_key(small, "embedded"))


def test_cache_round_trip_and_unreadable_file(tmp_path):
    c = DilationCache(tmp_path / "sub" / "dilation.json")
    assert c.get("k") is None
    c.put("k", 3000.0, "calibration", [[3000, 0.4]])
    c.put("j", 8000.0, "rerun")
    assert DilationCache(c.path).get("k")["dilation"] == 3000.0
    assert DilationCache(c.path).get("j")["how"] == "rerun"
    c.path.write_text("{not json")
    assert c.get("k") is None
    c.path.write_text(json.dumps({"version": 999, "entries": {"k": {"dilation": 1}}}))
    assert c.get("k") is None


# ---------------------------------------------------------------- running

def dilated(**extra):
    """``make_experiment`` in dilated time: what calibration, the cache and reruns are for."""
    return make_experiment(time="dilated", **extra)


class FakeRuns:
    """``run_one``: a run at D is behind when D < ``needs``; writes summary.json."""

    def __init__(self, needs: float):
        self.needs, self.runs, self.fresh = needs, [], []

    def __call__(self, exp, out, console):
        d = exp.dilation
        self.runs.append(d)
        self.fresh.append(not (out / "summary.json").exists())
        behind = d < self.needs
        out.mkdir(parents=True, exist_ok=True)
        return written(out, d, 1.5 if behind else 0.3, ["leaf1"] if behind else [])


def written(out, dilation: float, ratio: float, behind: list[str]) -> dict:
    """A run's summary at D with its verdict, written into ``out`` as the runner does."""
    s = run_summary(dilation=dilation, fell_behind=ratio > 1,
                    fidelity={"worst_ratio": ratio, "behind": behind})
    s.write(out)
    return s.as_dict()


def quiet():
    import io

    from rich.console import Console
    return Console(file=io.StringIO())


def test_auto_calibrates_once_then_reuses_the_cache(tmp_path):
    exp = dilated(dilation="auto")
    cache = DilationCache(tmp_path / "cache.json")
    runs, m = FakeRuns(needs=0), noise_only(1000)
    s = run_with_dilation(exp, tmp_path / "a", quiet(), run_one=runs, measure=m, cache=cache,
                          target="embedded")
    assert m.calls == [3000, 2000, 1500, 1500] and runs.runs == [2000.0]
    assert s["dilation_chosen_by"] == "calibration" and s["dilation_reruns"] == []
    assert s["dilation_calibration"]["measurements"] == [[1500, 0.6667], [1500, 0.6667], [2000, 0.5],
                                                         [3000, 0.3333]]
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["dilation_chosen_by"] == "calibration"
    m2 = noise_only(1000)
    s = run_with_dilation(exp, tmp_path / "b", quiet(), run_one=runs, measure=m2, cache=cache,
                          target="embedded")
    assert m2.calls == [] and s["dilation_chosen_by"] == "cache" and runs.runs[-1] == 2000.0


def test_a_bigger_fabric_is_calibrated_anew(tmp_path):
    cache = DilationCache(tmp_path / "cache.json")
    runs = FakeRuns(needs=0)
    run_with_dilation(dilated(dilation="auto"), tmp_path / "a", quiet(), run_one=runs,
                      measure=noise_only(1000), cache=cache, target="embedded")
    more = dilated(dilation="auto",
                           traffic=[{"pattern": "all-to-all", "size_bytes": 1024}])
    m = noise_only(4000)
    s = run_with_dilation(more, tmp_path / "b", quiet(), run_one=runs, measure=m, cache=cache,
                          target="embedded")
    assert m.calls and s["dilation_chosen_by"] == "calibration" and s["dilation"] == 8000


def test_a_run_that_falls_behind_is_rerun_once_higher_and_the_cache_learns(tmp_path):
    exp = dilated(dilation="auto")
    cache = DilationCache(tmp_path / "cache.json")
    runs = FakeRuns(needs=5000)                      # the machine got busier since calibration
    s = run_with_dilation(exp, tmp_path / "a", quiet(), run_one=runs, measure=noise_only(1000),
                          cache=cache, target="embedded")
    assert runs.runs == [2000.0, 6000.0]             # rerun_dilation(2000, 1.5) = 6000
    assert s["dilation"] == 6000.0 and not s["fell_behind"]
    assert s["dilation_chosen_by"] == "rerun"
    assert s["dilation_reruns"] == [{"dilation": 2000.0, "chosen_by": "calibration",
                                     "worst_ratio": 1.5, "behind": ["leaf1"]}]
    # the behind run's results were set aside: the rerun began in an empty directory
    assert json.loads((tmp_path / "a" / "fell-behind-D2000" / "summary.json").read_text())["dilation"] == 2000.0
    assert runs.fresh == [True, True]
    runs2 = FakeRuns(needs=5000)
    s = run_with_dilation(exp, tmp_path / "b", quiet(), run_one=runs2, cache=cache,
                          target="embedded", measure=noise_only(1000))
    assert runs2.runs == [6000.0] and s["dilation_chosen_by"] == "cache"


def test_a_run_set_aside_leaves_the_users_files_where_they_were(tmp_path):
    """The behind run's results go to fell-behind-D<D>; a user's file beside
    them (written there before, run with force) is neither moved nor lost."""
    from emulator.errors import OutputError
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    kw = dict(run_one=FakeRuns(needs=5000), measure=noise_only(1000),
              cache=DilationCache(tmp_path / "cache.json"), target="embedded")
    with pytest.raises(OutputError, match="notes.txt"):
        run_with_dilation(dilated(dilation="auto"), out, quiet(), **kw)
    s = run_with_dilation(dilated(dilation="auto"), out, quiet(), force=True, **kw)
    assert s["dilation_chosen_by"] == "rerun"
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (out / "fell-behind-D2000").iterdir()) == ["summary.json"]


def test_a_fixed_dilation_is_never_changed(tmp_path):
    runs = FakeRuns(needs=5000)
    s = run_with_dilation(dilated(), tmp_path / "a", quiet(), run_one=runs)    # file: 1000
    assert runs.runs == [1000.0] and s["fell_behind"] and s["dilation_chosen_by"] == "file"
    s = run_with_dilation(dilated(dilation="auto"), tmp_path / "b", quiet(),
                          dilation=2500.0, run_one=runs)
    assert runs.runs[-1] == 2500.0 and s["dilation_chosen_by"] == "command line"
    assert s["dilation_reruns"] == []


def test_calibration_experiment_is_a_scaled_copy():
    exp = make_experiment(dilation="auto", traffic=[{"pattern": "all-to-all", "size_bytes": 1 << 24}])
    cal = calibration_experiment(exp)
    assert [(f.src, f.dst) for f in cal.flows] == [(f.src, f.dst) for f in exp.flows]
    assert {f.size_bytes for f in cal.flows} == {dil.CAL_FLOW_BYTES}
    assert cal.fabric.name == exp.fabric.name


def test_a_workload_is_calibrated_by_running_it_shortened():
    from tests.conftest import REPO
    from emulator.experiment.model import load_experiment

    exp = load_experiment(REPO / "experiments" / "checkpoint-shared.yaml")
    cal = calibration_experiment(exp)
    assert cal is not exp and not cal.flows
    tr, full = cal.spec.workload.training, exp.spec.workload.training
    assert (tr.steps, tr.warmup_steps) == (dil.CAL_TRAINING_STEPS, 0) and full.steps == 4
    assert (tr.size_bytes, tr.collective) == (full.size_bytes, full.collective)
    # its storage reads overlap the steps as in the full run: 16 blocks over
    # 4 + 1 steps, 2 steps -> 7 blocks; the same readers and target
    assert cal.spec.storage.blocks == 7 and cal.workload.readers == exp.workload.readers
    assert cal.workload.servers == exp.workload.servers
    assert fabric_key(cal, "embedded")["flows"] == fabric_key(exp, "embedded")["flows"] > 0

    rail = calibration_experiment(load_experiment(REPO / "experiments" / "allreduce-rail.yaml"))
    [test] = rail.spec.workload.tests                  # 64 KiB .. 1 MiB, 2 + 1 iterations
    assert (test.size_list(), test.iters, test.warmup_iters) == ([1 << 20], 1, 0)


def test_a_cached_dilation_follows_the_machine_both_ways(tmp_path):
    cache = DilationCache(tmp_path / "cache.json")
    cache.put("k", 48000, "calibration", [])
    assert follow_cached(cache, "k", 48000, 0.2, []) is None          # within 4 x margin: stays
    assert cache.get("k")["dilation"] == 48000
    assert follow_cached(cache, "k", 48000, 0.01, []) == 24000        # far below: halved
    assert cache.get("k")["dilation"] == 24000 and cache.get("k")["how"] == "relaxed"
    assert follow_cached(cache, "k", 24000, 0.1, []) == 12000
    assert follow_cached(cache, "k", 500, 0.01, []) is None           # the ladder's bottom
    # above the margin's aim (1/2) but not behind: raised to bring it back to 1/2
    assert follow_cached(cache, "k", 12000, 0.5, []) is None           # at the aim: stays
    assert follow_cached(cache, "k", 12000, 0.6, []) == 16000          # 12000 x 1.2 -> 16000
    assert cache.get("k")["dilation"] == 16000 and cache.get("k")["how"] == "tightened"
    assert follow_cached(cache, "k", 16000, 0.95, []) == 32000         # 30400 -> 32000


def test_raised_while_behind_reruns_higher_until_not_behind(tmp_path):
    d2 = rerun_dilation(4000, 3.0)
    ratios = {4000: 3.0, d2: 1.2}              # behind twice, then fine
    seen = []

    def run_one(exp, out, console):
        seen.append(exp.dilation)
        r = ratios.get(exp.dilation, 0.3)
        return written(out, exp.dilation, r, ["leaf1"] if r > 1 else [])

    s = dil.run_raised_while_behind(make_experiment(), tmp_path, 4000, run_one=run_one)
    assert seen == [4000, d2, rerun_dilation(d2, 1.2)] and d2 > 4000
    assert not s["fell_behind"] and s["dilation_chosen_by"] == "rerun"
    assert [r["dilation"] for r in s["dilation_reruns"]] == seen[:2]
    assert (tmp_path / "fell-behind-D4000").is_dir()


def test_raised_while_behind_gives_up_after_max_reruns(tmp_path):
    def run_one(exp, out, console):
        return written(out, exp.dilation, 5.0, ["h1"])

    s = dil.run_raised_while_behind(make_experiment(), tmp_path, 1000, run_one=run_one, max_reruns=1)
    assert s["fell_behind"] and len(s["dilation_reruns"]) == 1


@pytest.mark.parametrize("second, chosen", [(0.45, 1500), (0.6, 2000)])
def test_a_reading_just_above_the_aim_below_the_choice_is_measured_again(second, chosen):
    # the demo read 0.66 at 3000 in one calibration and 0.26 in the next:
    # a marginal reading on the step below the choice gets a second run
    readings = {4000: [0.1], 2000: [0.3], 1500: [0.6, second], 1000: [3.0]}
    m = readings_by_call(readings)
    d, measured = calibrate(m, start=4000)
    assert m.calls == [4000, 1000, 2000, 1500, 1500]      # the 4 runs, then the second
    assert d == chosen
    assert [r for s, r in measured if s == 1500] == [0.6, second]      # in the order measured


def test_a_reading_well_above_the_aim_is_not_measured_again():
    readings = {4000: 0.1, 2000: 0.3, 1500: 0.9, 1000: 3.0}
    m = readings_by_call(readings)
    d, _ = calibrate(m, start=4000)
    assert d == 2000 and m.calls.count(1500) == 1


def test_one_good_reading_is_not_a_search():
    # hol-victim-ib once read 0.40 at its start (4000), where it reads
    # 0.11-0.14: the guess (3200) rounds up to 4000 itself, yet 3000 is tried
    readings = {4000: 0.40, 3000: 0.15, 2000: 0.6, 1500: 2.0, 1000: 3.0}
    m = readings_by_call(readings)
    d, _ = calibrate(m, start=4000)
    assert m.calls[:2] == [4000, 3000] and d == 3000


def test_a_reading_that_contradicts_a_lower_d_is_measured_again_once():
    # the demo read 0.81 at 3000, then 1.59 at 6000 (a stall from outside
    # the run), and the search went up to 24000 and chose 12000
    m = readings_by_call({3000: [0.81], 6000: [1.59, 0.38], 4000: [0.7], 12000: [0.2]})
    d, measured = calibrate(m, start=3000)
    assert m.calls[:3] == [3000, 6000, 6000] and d == 6000
    assert [r for s, r in measured if s == 6000] == [1.59, 0.38]       # both, in order


def test_a_contradiction_that_holds_is_searched_on_and_only_one_is_measured_again():
    m = readings_by_call({3000: [0.81], 6000: [1.59], 24000: [0.06], 12000: [0.9, 0.1],
                          16000: [0.3]})
    d, _ = calibrate(m, start=3000)
    assert m.calls.count(6000) == 2               # re-measured, read bad again: up
    assert m.calls.count(12000) == 1              # a second contradiction is believed
    assert m.calls[-1] == 16000 and d == 16000    # then the step below the choice is read


def test_readings_that_fall_with_d_are_not_measured_again():
    # 3000 reads worse than 4000 above it, better than 1000 below: no contradiction
    m = readings_by_call({1000: [2.0], 4000: [0.3], 3000: [0.9, 0.1]})
    d, _ = calibrate(m, start=1000)
    assert m.calls == [1000, 4000, 3000] and d == 4000


@pytest.mark.parametrize("plots", [True, False])
def test_plots_reach_the_runner_of_every_run_but_a_calibrations(tmp_path, monkeypatch, plots):
    """``plots=False`` (a test's run, ``fabric-emu run --no-plots``) goes down
    to ``runner.run_experiment`` for each kind of run; calibration runs draw
    nothing either way (``summary_only``)."""
    calls = []

    def run_experiment(exp, out, console, pcap=False, *, summary_only=False, plots=True):
        calls.append((exp.dilation, summary_only, plots))
        out.mkdir(parents=True, exist_ok=True)
        return written(out, exp.dilation, 0.3, [])
    monkeypatch.setattr("emulator.experiment.runner.run_experiment", run_experiment)
    run_with_dilation(dilated(), tmp_path / "file", quiet(), plots=plots)            # D 1000
    run_with_dilation(dilated(dilation="auto"), tmp_path / "auto", quiet(), plots=plots,
                      cache=DilationCache(tmp_path / "cache.json"))
    dil.run_raised_while_behind(make_experiment(), tmp_path / "raised", 4000, plots=plots)
    finals = [c for c in calls if not c[1]]
    assert [c[0] for c in finals] == [1000.0, finals[1][0], 4000.0]
    assert all(c[2] is plots for c in finals)
    assert any(c[1] for c in calls)         # the auto run calibrated first
