"""The clock a run keeps (``time: auto | virtual | dilated``): the setting,
its resolution rules, its refusals (one line, exit 2, nothing written), a
virtual run as one run at D = 1, and a virtual run's summary."""
from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from emulator.api import load_experiment
from emulator.errors import ConfigError, FabricEmuError
from emulator.experiment.dilation import DilationCache, run_with_dilation
from emulator.experiment.summary import build_summary, render_summary
from emulator.experiment.summary_file import read_summary
from emulator.experiment.time_mode import resolve_time
from tests.conftest import REPO
from tests.refusal_cases import cli
from tests.summaries import run_summary
from tests.unit.test_results import make_experiment, make_run
from tests.unit.test_results_summary import agent_results

EXPERIMENTS = REPO / "experiments"


def shipped(name: str, **sets):
    return load_experiment(EXPERIMENTS / f"{name}.yaml", set=sets or None)


# ------------------------------------------------------------------ the setting

@pytest.mark.parametrize("value", ["auto", "virtual", "dilated"])
def test_time_takes_its_three_values_and_set_changes_it(value):
    assert shipped("demo").spec.time == "auto"             # the default
    assert shipped("demo", time=value).spec.time == value


def test_time_refuses_anything_else_in_one_line():
    with pytest.raises(ConfigError) as e:
        shipped("demo", time="wall")
    assert e.value.field == "time" and str(e.value).count("\n") == 0
    assert "must be one of auto, virtual or dilated (got 'wall')" in str(e.value)


def test_time_mode_is_decided_when_the_run_starts_not_before():
    with pytest.raises(FabricEmuError, match="time 'auto' is decided when the experiment runs"):
        shipped("demo").time_mode


# ------------------------------------------------------------------ resolution

# (experiment, --set, target, live, dilation given) -> the clock; one rule each
RULES = {
    "embedded-plain-traffic": ("demo", {}, "embedded", False, False, "virtual"),
    "bmv2": ("demo", {}, "bmv2", False, False, "dilated"),
    "live-fabric": ("demo", {}, "embedded", True, False, "dilated"),
    "dilation-given": ("demo", {}, "embedded", False, True, "dilated"),
    "infiniband": ("incast-ib", {}, "embedded", False, False, "virtual"),
    "workload": ("allreduce-rail", {}, "embedded", False, False, "virtual"),
    "workload-storage": ("checkpoint-shared", {}, "embedded", False, False, "virtual"),
    # the window barrier spans the servers over the runner's ssh connection
    "cluster": ("cluster-pods", {}, "embedded", False, False, "virtual"),
    # host CPU / DPU costs run in the host agents, on their NIC's clock: covered
    "endpoints": ("multitenant-nic-vs-dpu", {}, "embedded", False, False, "virtual"),
    "poisson-hpcc": ("websearch-hpcc", {}, "embedded", False, False, "virtual"),
    "explicit-dilated": ("demo", {"time": "dilated"}, "embedded", False, False, "dilated"),
    "explicit-virtual": ("incast-pfc", {"time": "virtual"}, "embedded", False, False, "virtual"),
}


@pytest.mark.parametrize("case", sorted(RULES))
def test_resolution_rules(case):
    name, sets, target, live, given, clock = RULES[case]
    exp = shipped(name, **sets)
    r = resolve_time(exp, target, live=live, dilation_given=given)
    assert r.time_mode == clock and r.spec.time == clock
    if clock == "virtual":        # the file's dilation is for dilated runs
        assert r.dilation == 1.0 and r.spec.dilation == 1.0
    else:
        assert r.spec.dilation == exp.spec.dilation
    assert resolve_time(r, target, live=live, dilation_given=given) == r     # once is enough


def test_a_sweeps_points_are_resolved_with_it():
    exp = resolve_time(shipped("sweep-dcqcn"), "embedded")
    assert exp.sweep_points and all(p.time_mode == "virtual" and p.dilation == 1.0
                                    for _, p in exp.sweep_points)
    with pytest.raises(ConfigError, match="time: virtual is not possible with target bmv2"):
        resolve_time(shipped("sweep-dcqcn", time="virtual"), "bmv2")


@pytest.mark.parametrize("target, live, given, why", [
    ("bmv2", False, False, "target bmv2 (BMv2 keeps its own clock, which cannot be held)"),
    ("embedded", True, False, "a live fabric (fabric-emu cli, fe.Fabric"),
    ("embedded", False, True, "a dilation given on the command line"),
])
def test_explicit_virtual_that_cannot_be_kept_is_refused(target, live, given, why):
    with pytest.raises(ConfigError) as e:
        resolve_time(shipped("demo", time="virtual"), target, live=live, dilation_given=given)
    assert e.value.field == "time" and e.value.file.endswith("demo.yaml")
    assert f"virtual is not possible with {why}" in e.value.reason


def test_a_virtual_runs_wall_budget_is_not_stretched():
    demo = shipped("demo", dilation=20000)
    assert resolve_time(demo, "embedded").wall_limit_s == demo.spec.limits.wall_s
    dilated = resolve_time(demo, "embedded", dilation_given=True)
    assert dilated.wall_limit_s == 2 * demo.spec.limits.wall_s       # 20000 / 10000


# ------------------------------------------------------------------ refusals via the CLI

@pytest.mark.parametrize("args, words", [
    (["run", "{d}/demo.yaml", "--time", "virtual", "--target", "bmv2"],
     ["demo.yaml: time: virtual is not possible with target bmv2"]),
    (["run", "{d}/demo.yaml", "--time", "virtual", "--dilation", "4000"],
     ["demo.yaml: time: virtual is not possible with a dilation given on the command line"]),
    (["run", "{d}/sweep-dcqcn.yaml", "--time", "virtual", "--target", "bmv2"],
     ["sweep-dcqcn.yaml: time: virtual is not possible with target bmv2"]),
    (["cli", "{d}/demo.yaml", "--set", "time=virtual"],
     ["demo.yaml: time: virtual is not possible with a live fabric"]),
    (["compare", "{d}/incast-pfc.yaml", "{d}/incast-ib.yaml", "--time", "virtual",
      "--dilation", "4000"],
     ["incast-pfc.yaml: time: virtual is not possible with a dilation given on the command line"]),
])
def test_the_cli_refuses_a_virtual_clock_it_cannot_keep_in_one_line(tmp_path, args, words):
    work = tmp_path / "work"
    work.mkdir()
    res, took = cli([a.format(d=EXPERIMENTS) for a in args] + ["--out", str(tmp_path / "out")],
                    work, tmp_path / "cache")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, (took, res.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("fabric-emu: "), res.stderr[-2000:]
    for w in words:
        assert w in lines[0], lines[0]
    assert not (tmp_path / "out").exists() and not any(work.iterdir())
    assert not (tmp_path / "cache" / "fabric-emu").exists()        # no dilation cached


# ------------------------------------------------------------------ running

class Runs:
    """``run_one``: records (clock, D) and writes a summary as the runner would."""

    def __init__(self):
        self.runs = []

    def __call__(self, exp, out, console):
        self.runs.append((exp.time_mode, exp.dilation))
        s = run_summary(time=exp.time_mode, dilation=exp.dilation)
        out.mkdir(parents=True, exist_ok=True)
        s.write(out)
        return s.as_dict()


def no_measure(d):
    raise AssertionError(f"a virtual run was calibrated (at D = {d:g})")


def quiet() -> Console:
    return Console(file=io.StringIO())


def test_a_virtual_run_is_one_run_at_d1_without_calibration_or_cache(tmp_path):
    demo = shipped("demo")
    assert demo.spec.dilation == "auto"                      # the file's: for dilated runs
    cache, runs = DilationCache(tmp_path / "cache.json"), Runs()
    s = run_with_dilation(demo, tmp_path / "out", quiet(), run_one=runs, measure=no_measure,
                          cache=cache, target="embedded")
    assert runs.runs == [("virtual", 1.0)]
    assert s["dilation_chosen_by"] == "virtual time" and s["dilation_reruns"] == []
    assert "dilation_calibration" not in s and not cache.path.exists()
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert written["dilation_chosen_by"] == "virtual time" and written["time"] == "virtual"
    assert not (tmp_path / "out" / "calibration").exists()


def test_a_dilation_given_makes_the_run_dilated_as_before(tmp_path):
    runs = Runs()
    s = run_with_dilation(shipped("demo"), tmp_path / "out", quiet(), dilation=3000.0,
                          run_one=runs, measure=no_measure, target="embedded")
    assert runs.runs == [("dilated", 3000.0)] and s["dilation_chosen_by"] == "command line"


def test_a_refused_run_leaves_no_directory(tmp_path):
    with pytest.raises(ConfigError, match="time: virtual is not possible with target bmv2"):
        run_with_dilation(shipped("demo", time="virtual"), tmp_path / "out", quiet(),
                          run_one=Runs(), target="bmv2")
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ the summary

def virtual_summary(tmp_path, **extra):
    exp = resolve_time(make_experiment(**extra), "embedded")
    run_dir = make_run(tmp_path / "run")
    return exp, build_summary(exp, "embedded", agent_results(20_000), {}, run_dir,
                              wall_s=2.5).as_dict()


def test_a_virtual_runs_verdict_is_rule_virtual_not_behind_same_keys(tmp_path):
    exp, s = virtual_summary(tmp_path)
    dilated = build_summary(make_experiment(), "embedded", agent_results(20_000), {},
                            tmp_path / "run", wall_s=2.5).as_dict()
    assert dilated["fell_behind"] and dilated["time"] == "dilated"   # leaf2 late: behind, dilated
    assert s["time"] == "virtual" and s["dilation"] == 1.0 and s["summary_version"] == 6
    assert s["fell_behind"] is False
    assert s["fidelity"]["rule"] == "virtual" and s["fidelity"]["worst_ratio"] == 0.0
    assert s["fidelity"]["behind"] == [] and set(s["fidelity"]) == set(dilated["fidelity"])
    for part in ("switches", "nics"):
        assert [set(x) for x in s[part]] == [set(x) for x in dilated[part]]
        assert all(x["ratio"] is None and x["behind"] is False for x in s[part])
    leaf2 = next(x for x in s["switches"] if x["node"] == "leaf2")
    assert leaf2["p99_lateness_fabric_ns"] is None and leaf2["released_frames"] == 68
    table = io.StringIO()
    Console(file=table, width=200).print(render_summary(s))
    assert "(virtual time)" in table.getvalue() and "dilation 1" not in table.getvalue()


def test_a_virtual_run_still_counts_frames_the_emulation_lost(tmp_path):
    """Headroom drops are the modelled PFC's (no process late); a frame the
    kernel dropped at a socket is lost whatever the clock."""
    exp = resolve_time(make_experiment(), "embedded")
    run_dir = make_run(tmp_path / "run")
    stats = json.loads((run_dir / "leaf2.stats.json").read_text())
    stats["ports"][0]["rx_socket_drops"] = 3
    stats["ports"][0]["priorities"][0]["headroom_drops"] = 5
    (run_dir / "leaf2.stats.json").write_text(json.dumps(stats))
    s = build_summary(exp, "embedded", agent_results(20_000), {}, run_dir, wall_s=2.5).as_dict()
    assert s["headroom_drops"] and s["socket_drops"]
    assert s["fidelity"]["behind"] == ["socket leaf2:1"] and s["fell_behind"]


def test_the_summary_reader_takes_old_and_new(tmp_path):
    _, s = virtual_summary(tmp_path)
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "summary.json").write_text(json.dumps(s))
    assert read_summary(tmp_path / "new")["time"] == "virtual"
    old = {k: v for k, v in s.items() if k != "time"} | {"summary_version": 5}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "summary.json").write_text(json.dumps(old))
    assert "time" not in read_summary(tmp_path / "old")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "summary.json").write_text(json.dumps(s | {"time": "wall"}))
    with pytest.raises(FabricEmuError, match="time: Input should be 'virtual' or 'dilated'"):
        read_summary(tmp_path / "bad")


def test_the_library_refuses_before_anything_exists(tmp_path):
    import emulator as fe
    with pytest.raises(ConfigError, match="a dilation given on the command line"):
        fe.run(shipped("demo", time="virtual"), tmp_path / "out", dilation=4000)
    with pytest.raises(ConfigError, match="time: virtual is not possible with target bmv2"):
        fe.sweep(shipped("demo", time="virtual", target="bmv2"), {"nic.mtu_bytes": [1024, 4096]},
                 tmp_path / "grid")
    assert not any(tmp_path.iterdir())


def test_results_and_comparisons_name_the_clock(tmp_path):
    from emulator.api import Result
    from emulator.experiment.compare import COLUMNS, row
    _, s = virtual_summary(tmp_path)
    assert Result(s).time == "virtual" and "time='virtual'" in repr(Result(s))
    assert Result({k: v for k, v in s.items() if k != "time"}).time == "dilated"    # before v6
    assert "time" in COLUMNS and row("a", s)["time"] == "virtual"
