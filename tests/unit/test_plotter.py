"""The plots' own process (emulator/experiment/plotter.py) and the idle
scheduling it imports in (emulator/net/idle_cpu.py)."""
from __future__ import annotations

import os
import time

import pytest

from emulator.experiment.plots import write_plots
from emulator.experiment.plotter import CSV_FIGURES, FIGURES, Plotter, process_state as _state
from emulator.experiment.results_io import write_csv
from emulator.net import idle_cpu
from tests.unit.test_plots import assert_png, results_dir  # noqa: F401  (fixture)


def _settles(pid: int, stopped: bool, limit_s: float = 10.0) -> bool:
    """Whether the process reaches the state: a signal takes effect when the
    process next runs, and an idle-class process on a loaded machine may
    wait longer than ``pause``'s own bounded wait."""
    deadline = time.monotonic() + limit_s
    while (_state(pid) in ("t", "T")) != stopped:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True

SUMMARY = {"flows": [{"complete": True, "fct_ns": 9000 * (i + 1), "fct_slowdown": 1.5 + i}
                     for i in range(3)]}


def test_every_figure_is_in_the_queue_once():
    assert sorted(FIGURES) == sorted({"queue_depth.png", "throughput.png", "pause_timeline.png",
                                      "fct_cdf.png", "fct_slowdown.png"})
    assert len(set(FIGURES)) == len(FIGURES)


def test_the_plotter_draws_what_write_plots_draws(results_dir, tmp_path):  # noqa: F811
    exp, out = results_dir
    cols = ["bucket", "pct_from", "pct_to", "flows", "size_min_bytes", "size_max_bytes",
            "slowdown_p50", "slowdown_p95", "slowdown_p99", "slowdown_mean", "slowdown_max"]
    write_csv(out / "fct_slowdown.csv", cols,
              [dict(zip(cols, [1, 0, 50, 3, 1024, 4096, 1.5, 2.5, 2.5, 1.8, 2.5])),
               dict(zip(cols, [2, 50, 100, 3, 4096, 65536, 1.2, 1.9, 2.0, 1.4, 2.0]))])
    here = write_plots(out, SUMMARY, fabric=exp.fabric)
    ref = {name: path.read_bytes() for name, path in here.items()}
    for path in here.values():
        path.unlink()
    plotter = Plotter.start(out, exp.fabric)
    files = plotter.plot(out, SUMMARY)
    assert plotter.proc.returncode == 0, "the process drew them, not the fallback"
    assert set(files) == set(ref) and len(ref) >= 4
    for name, path in files.items():
        assert_png(path)
        assert path.stat().st_size > 0 and name in ref


def test_a_plotter_paused_for_the_traffic_is_stopped_and_still_draws_its_job(results_dir):  # noqa: F811
    exp, out = results_dir
    plotter = Plotter.start(out, exp.fabric)
    try:
        plotter.pause()                  # returns once the process has stopped
        assert _settles(plotter.proc.pid, stopped=True), "stopped while the traffic runs"
        plotter.resume()
        assert _settles(plotter.proc.pid, stopped=False)
        plotter.pause()                  # the job of a plotter left paused: plot() lets it go on
        files = plotter.plot(out, SUMMARY)
    finally:
        plotter.close()
    assert plotter.proc.returncode == 0, "the process drew them, not the fallback"
    assert {"queue_depth.png", "throughput.png", "fct_cdf.png"} <= set(files)


def test_the_time_series_figures_wait_for_release(results_dir):  # noqa: F811
    """Given its job, the plotter draws the summary's figures at once, and
    those of the time-series CSVs only once released (the runner is still
    writing those CSVs until then)."""
    exp, out = results_dir
    plotter = Plotter.start(out, exp.fabric, idle=False)
    try:
        plotter.submit(out, SUMMARY)
        deadline = time.monotonic() + 60.0      # a bound on a loaded machine, not a timing
        while not (out / "fct_cdf.png").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (out / "fct_cdf.png").exists(), "the summary's figure, before the release"
        time.sleep(0.2)     # given the time, it would have gone on to the next
        assert not any((out / name).exists() for name in CSV_FIGURES)
        plotter.release()
        files = plotter.collect()
    finally:
        plotter.close()
    assert plotter.proc.returncode == 0, "the process drew them, not the fallback"
    assert {"queue_depth.png", "throughput.png", "fct_cdf.png"} <= set(files)


def _appears(path, limit_s: float = 60.0) -> bool:
    """Whether the file is there within the bound (a loaded machine's, not a timing)."""
    deadline = time.monotonic() + limit_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return path.exists()


def test_a_time_series_figure_is_drawn_once_its_csvs_are_written(results_dir):  # noqa: F811
    """Released CSV by CSV (``written``): the queue depths' figure once
    queue_depth.csv is written, the pause timeline only once every CSV it
    reads is (pfc_events.csv, and the queue depths' and rates' for its end)."""
    exp, out = results_dir
    plotter = Plotter.start(out, exp.fabric, idle=False)
    try:
        plotter.submit(out, SUMMARY)
        plotter.written("queue_depth.csv")
        plotter.written("pfc_events.csv")
        assert _appears(out / "queue_depth.png"), "drawn before the release"
        assert _appears(out / "fct_cdf.png")
        time.sleep(0.3)     # given the time, it would have gone on to the others
        assert not (out / "throughput.png").exists() and not (out / "pause_timeline.png").exists()
        plotter.written("flow_rate.csv")
        assert _appears(out / "pause_timeline.png") and _appears(out / "throughput.png")
        plotter.release()
        files = plotter.collect()
    finally:
        plotter.close()
    assert plotter.proc.returncode == 0, "the process drew them, not the fallback"
    assert set(files) == set(FIGURES) - {"fct_slowdown.png"}      # (no fct_slowdown.csv here)


def test_a_plotter_gone_before_the_job_leaves_the_figures_to_the_runner(results_dir):  # noqa: F811
    exp, out = results_dir
    plotter = Plotter.start(out, exp.fabric)
    plotter.proc.kill()
    plotter.proc.wait()
    files = plotter.plot(out, SUMMARY)
    assert {"queue_depth.png", "throughput.png", "fct_cdf.png"} <= set(files)
    for path in files.values():
        assert_png(path)


def test_a_plotter_never_given_a_job_is_ended_by_close(results_dir):  # noqa: F811
    exp, out = results_dir
    plotter = Plotter.start(out, exp.fabric)
    plotter.close()
    assert plotter.proc.poll() is not None


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups and nice 0 again need root")
def test_a_process_moved_into_the_idle_class_and_back():
    """A child of this test: moved in and out from here, as the runner does
    with its plotter."""
    import subprocess
    import sys
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             start_new_session=True)
    try:
        back = idle_cpu.enter_idle(child.pid)
        if back is None:
            pytest.skip("no cgroup cpu controller and no nice: idle scheduling unavailable here")
        if back[0] == "cgroup":
            group = idle_cpu.cpu_cgroup_root() / idle_cpu.IDLE_CGROUP
            assert str(child.pid) in (group / "cgroup.procs").read_text().split()
            assert (group / "cpu.idle").read_text().strip() == "1"
            idle_cpu.leave_idle(back, child.pid)      # and the cgroup removed, unless in use
            assert not group.exists() or \
                str(child.pid) not in (group / "cgroup.procs").read_text().split()
            assert back[1].endswith("cgroup.procs") and \
                str(child.pid) in open(back[1]).read().split()
        else:
            assert os.getpriority(os.PRIO_PROCESS, child.pid) == idle_cpu.FALLBACK_NICE
            idle_cpu.leave_idle(back, child.pid)
            assert os.getpriority(os.PRIO_PROCESS, child.pid) == 0
    finally:
        child.kill()
        child.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")
def test_a_process_killed_in_the_idle_class_is_taken_out_of_it_first(monkeypatch):
    """``clean.kill_processes`` (the watchdog's reaping, ``fabric-emu clean``)
    moves an idle-class process out before its SIGKILL: its exit is not left
    for a CPU nothing else wants."""
    import subprocess
    import sys
    from emulator.net import clean
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             start_new_session=True)
    try:
        back = idle_cpu.enter_idle(child.pid)
        if back is None or back[0] != "cgroup":
            pytest.skip("no cgroup cpu controller here: the idle class is nice 19")
        assert _in_idle_class(child.pid)
        idle_at_kill = []
        kill = os.kill

        def recording_kill(pid, sig):
            if pid == child.pid:
                idle_at_kill.append(_in_idle_class(pid))
            kill(pid, sig)
        monkeypatch.setattr(clean.os, "kill", recording_kill)
        assert clean.kill_processes(lambda: [child.pid] if child.poll() is None else [],
                                    grace_s=0) == 1
        child.wait(timeout=5)
        assert idle_at_kill and idle_at_kill[0] is False
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        idle_cpu.remove_idle_cgroup()


def _in_idle_class(pid: int) -> bool:
    with open(f"/proc/{pid}/cgroup") as f:
        in_group = any(line.rstrip("\n").endswith("/" + idle_cpu.IDLE_CGROUP) for line in f)
    return in_group or os.getpriority(os.PRIO_PROCESS, pid) == idle_cpu.FALLBACK_NICE


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups and nice 0 again need root")
def test_the_plotter_leaves_the_idle_class_when_the_traffic_is_over(results_dir):  # noqa: F811
    """Idle while the traffic runs; at normal priority from ``resume`` on, not
    only from the job: it imports matplotlib while the results are written."""
    exp, out = results_dir
    plotter = Plotter.start(out, exp.fabric)
    try:
        if plotter._idle is None:
            pytest.skip("no cgroup cpu controller and no nice: idle scheduling unavailable here")
        assert _in_idle_class(plotter.proc.pid)
        plotter.pause()
        plotter.resume()
        assert not _in_idle_class(plotter.proc.pid)
        files = plotter.plot(out, SUMMARY)
    finally:
        plotter.close()
    assert plotter.proc.returncode == 0, "the process drew them, not the fallback"
    assert {"queue_depth.png", "throughput.png", "fct_cdf.png"} <= set(files)


def test_a_plotter_started_after_the_traffic_is_never_idle(results_dir):  # noqa: F811
    """A big fabric's plotter starts once the switches stopped: nothing to give way to."""
    exp, out = results_dir
    plotter = Plotter.start(out, exp.fabric, idle=False)
    try:
        assert plotter._idle is None and not _in_idle_class(plotter.proc.pid)
        files = plotter.plot(out, SUMMARY)
    finally:
        plotter.close()
    assert plotter.proc.returncode == 0, "the process drew them, not the fallback"
    assert {"queue_depth.png", "throughput.png", "fct_cdf.png"} <= set(files)
