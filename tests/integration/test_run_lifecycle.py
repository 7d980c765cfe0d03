"""Runs that tell the truth when killed, crashed or doubled.

A SIGKILLed runner leaves nothing behind within 2 s (its processes die with
it, its watchdog deletes its veths); a second run or a ``clean`` while one
is active is refused in one line and leaves it alone; ``clean --force`` or a
switch killed mid-run ends the run in one line, partial summary.json kept.

The fabric is a 1-spine, 2-leaf, 2-host one with node names of its own
(interface names do not meet another test's); every wait is for a
condition with a deadline.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import FABRIC_EMU, REPO, leftovers, run_cli

pytestmark = pytest.mark.fabric

NODES = ("ks1", "kl1", "kl2", "kh1", "kh2")
TOPO = """\
name: lifecycle
nodes: [{name: ks1, role: spine}, {name: kl1, role: leaf}, {name: kl2, role: leaf},
        {name: kh1, role: host}, {name: kh2, role: host}]
links:
  - {a: kh1, b: kl1, rate_gbps: 100, delay_us: 1}
  - {a: kh2, b: kl2, rate_gbps: 100, delay_us: 1}
  - {a: kl1, b: ks1, rate_gbps: 100, delay_us: 1}   # switch-switch: root namespace
  - {a: kl2, b: ks1, rate_gbps: 100, delay_us: 1}
addressing: {host_prefix: 10.0.0.0/16}
"""
# At dilation 10000 a 100 Gbps link runs at 10 Mbps: 256 KiB take ~0.2 s,
# 16 MiB ~13 s (long enough to act on a run while its agents send).
SHORT_BYTES, LONG_BYTES = 262_144, 16_777_216
START_TIMEOUT_S = 60.0          # fabric up and agents started, on a loaded machine
REAP_S = 2.0                    # the promise: nothing left 2 s after a SIGKILL


def _experiment(tmp_path: Path, size_bytes: int, name: str = "lifecycle",
                per_process: tuple[int, int] = (1, 1)) -> Path:
    """The run these tests act on; ``per_process``: (agents, switches) per
    process -- a process per node unless a test packs them (whatever
    ``auto`` would choose on the machine)."""
    (tmp_path / "topo.yaml").write_text(TOPO)
    exp = tmp_path / f"{name}.yaml"
    agents, switches = per_process
    exp.write_text(f"name: {name}\ntopology: topo.yaml\ntarget: embedded\ndilation: 10000\n"
                   f"traffic: [{{src: kh1, dst: kh2, op: write, size_bytes: {size_bytes}}}]\n"
                   f"limits: {{wall_s: 60}}\n"
                   f"agents: {{per_process: {agents}}}\nswitch: {{per_process: {switches}}}\n")
    return exp


def wait_for(cond, timeout_s: float, what: str, fail: bool = True):
    """cond()'s first true value; at the deadline, fail the test (or return it false)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value or (time.monotonic() > deadline and not fail):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.05)


def _lock_free() -> bool:
    from emulator.net.runlock import RunActive, RunLock
    try:
        RunLock.acquire("test probe", "-").release()
        return True
    except RunActive:
        return False


def _lock_holder_pid() -> int | None:
    """The pid the lock file names (read only: probing with flock could refuse a run)."""
    from emulator.net.runlock import LOCK_NAME, lock_dir
    try:
        return json.loads((lock_dir() / LOCK_NAME).read_text() or "{}").get("pid")
    except (OSError, ValueError):
        return None


def _nothing_foreign() -> bool:
    """No emulator process or veth but this test's: ``clean --force`` would end them."""
    left, ours = leftovers(), mine()
    return set(left["processes"]) <= set(ours["processes"]) and \
        set(left["interfaces"]) <= set(ours["interfaces"])


@pytest.fixture(autouse=True)
def _no_other_run():
    """Another fabric on this machine (another test session) would refuse ours: wait for it."""
    wait_for(_lock_free, 300, "the run lock free (another fabric is running)")


def mine() -> dict[str, list]:
    """What exists of this test's fabric: its veths, its processes (agents,
    switches, node shells; by pid in ``leftovers()``)."""
    from emulator.net.clean import _cmdlines
    left = leftovers()
    ours = {pid for pid, cmd in _cmdlines()
            if any(f"mininet:{n}" == (cmd.split() or [""])[-1] for n in NODES)
            or any(f"/{n}." in cmd for n in NODES)
            or _ours(cmd, "emulator.net.forkserver")
            or _ours(cmd, "emulator.experiment.plotter", "run")}
    return {"interfaces": [i for i in left["interfaces"] if i.split("-")[0] in NODES],
            "processes": [p for p in left["processes"] if p in ours]}


def _ours(cmdline: str, module: str, sub: str = "") -> bool:
    """The fork server or the plotter of a run of this test's fabric: the
    directory its first argument names (``sub`` in it: the plotter's is the
    results directory) holds our nodes' configs."""
    words = cmdline.split()
    if module not in words:
        return False
    rest = words[words.index(module) + 1:]
    return bool(rest) and any(Path(rest[0], sub, f"{n}.{kind}.json").exists()
                              for n in NODES for kind in ("switch", "agent"))


class Run:
    """``fabric-emu run`` in the background, its stderr in a file."""

    def __init__(self, exp: Path, out: Path, *options: str):
        self.out = out
        self.err_path = out.parent / f"{out.name}.stderr"
        with open(self.err_path, "w") as err:
            self.proc = subprocess.Popen([*FABRIC_EMU, "run", str(exp), "--out", str(out), *options],
                                         cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)

    def agents_sending(self) -> bool:
        """Both agents started (the fabric is up and programmed)."""
        from emulator.net.clean import _own_processes
        return len(_own_processes(str(self.out))) >= 5 and all(
            (self.out / "run" / f"{h}.agent.log").exists() for h in ("kh1", "kh2"))

    def wait(self, timeout_s: float = 90) -> tuple[int, str]:
        rc = self.proc.wait(timeout=timeout_s)
        return rc, self.err_path.read_text()


def start_run(exp: Path, out: Path, ready, *options: str) -> Run:
    """A run (``options``: the command's) that has got to ``ready(run)``; started again
    if another fabric (another test session) took the lock between our check and its start."""
    for _ in range(5):
        run = Run(exp, out, *options)
        wait_for(lambda: ready(run) or run.proc.poll() is not None, START_TIMEOUT_S, "run started")
        if run.proc.poll() is None or "another run is active" not in run.err_path.read_text():
            return run
        wait_for(_lock_free, 300, "the run lock free (another fabric is running)")
    pytest.skip("other fabrics keep taking the run lock")


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("fabric-emu:")]


def test_sigkill_of_the_runner_leaves_nothing_within_2s(tmp_path):
    run = start_run(_experiment(tmp_path, LONG_BYTES), tmp_path / "out", Run.agents_sending)
    before = mine()
    assert before["interfaces"] and before["processes"], before
    run.proc.kill()
    t0 = time.monotonic()
    run.proc.wait()
    deadline = t0 + REAP_S
    while (left := mine()) != {"interfaces": [], "processes": []} and time.monotonic() < deadline:
        time.sleep(0.05)
    took_s = time.monotonic() - t0
    assert left == {"interfaces": [], "processes": []}, f"after {took_s:.2f} s: {left}"
    # The watchdog has cleaned up and let the lock go: the next run may start.
    wait_for(_lock_free, REAP_S, "the run lock free after the reaping")
    assert "died without tearing down" in (tmp_path / "out" / "run" / "watchdog.log").read_text()


def first_show(tmp_path: Path) -> str:
    shown = run_cli("show", tmp_path / "first", timeout=60)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_second_run_is_refused_and_first_completes(tmp_path):
    launched_ns = time.time_ns()
    first = start_run(_experiment(tmp_path, SHORT_BYTES), tmp_path / "first",
                      lambda run: _lock_holder_pid() == run.proc.pid)
    second = run_cli("run", _experiment(tmp_path, SHORT_BYTES, "second"), "--out", tmp_path / "second",
                     timeout=60)
    assert second.returncode == 2, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1, second.stderr
    assert f"pid {first.proc.pid}" in lines[0] and "lifecycle.yaml" in lines[0] \
        and str(tmp_path / "first") in lines[0], lines[0]
    assert not (tmp_path / "second").exists()
    rc, err = first.wait()
    assert rc == 0, err
    summary = json.loads((tmp_path / "first" / "summary.json").read_text())
    assert summary["complete"]
    # the run's report beside its summary; show names it
    report = tmp_path / "first" / "report.html"
    assert report.stat().st_size > 1_000_000 and f"report: {report}" in first_show(tmp_path)
    if summary["time"] == "virtual":     # fabric time 0 as a Unix time: the same every run
        from emulator.vtime.member import VIRTUAL_UNIX_EPOCH_NS
        assert summary["start_unix_ns"] == VIRTUAL_UNIX_EPOCH_NS
    else:                                # after the launch, before the last flow's end
        assert launched_ns < summary["start_unix_ns"] < \
            time.time_ns() - summary["fabric_ns"] * summary["dilation"]
    # the teardown that overlapped the results is over when the command is
    assert mine() == {"interfaces": [], "processes": []}


def test_clean_refuses_during_a_run_and_force_ends_it_in_one_line(tmp_path):
    run = start_run(_experiment(tmp_path, LONG_BYTES), tmp_path / "out", Run.agents_sending,
                    "--no-plots")
    refused = run_cli("clean", timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert f"pid {run.proc.pid}" in refused.stderr and "--force" in refused.stderr
    assert run.proc.poll() is None and mine()["interfaces"], "clean touched the run"

    if not wait_for(lambda: _nothing_foreign() or run.proc.poll() is not None, 120,
                    "other fabrics' processes gone", fail=False):
        pytest.skip("another test's emulator processes are running: clean --force would end them")
    assert run.proc.poll() is None, run.wait()[1]
    forced = run_cli("clean", "--force", timeout=60)
    assert forced.returncode == 0, forced.stderr
    rc, err = run.wait()
    assert rc != 0 and "Traceback" not in err, err
    assert len(error_lines(err)) == 1, err
    wait_for(lambda: mine() == {"interfaces": [], "processes": []}, 10, "the fabric gone")


def test_switch_killed_mid_run_ends_it_naming_the_switch(tmp_path):
    run = start_run(_experiment(tmp_path, LONG_BYTES), tmp_path / "out", Run.agents_sending,
                    "--no-plots")
    from emulator.net.clean import _own_processes
    [switch_pid] = [p for p in _own_processes(str(tmp_path / "out" / "run" / "kl2.switch.json"))]
    os.kill(switch_pid, signal.SIGKILL)
    rc, err = run.wait()
    assert rc == 1 and "Traceback" not in err, err
    [line] = error_lines(err)
    assert "switch kl2" in line and "SIGKILL" in line and str(tmp_path / "out" / "run" / "kl2.log") in line, line
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["complete"] is False and "switch kl2" in summary["aborted"]
    assert [f["src"] for f in summary["flows"]] == ["kh1"]    # what the agents wrote
    wait_for(lambda: mine() == {"interfaces": [], "processes": []}, 10, "the fabric gone")


def test_a_summary_only_run_writes_its_verdict_and_nothing_else(tmp_path):
    """What calibration runs do: summary.json (fidelity, flows), no time series
    or plots, and a fabric as torn down as after a full run."""
    from emulator.api import load_experiment
    from emulator.experiment.runner import run_experiment
    exp = load_experiment(_experiment(tmp_path, SHORT_BYTES))
    summary = run_experiment(exp, tmp_path / "out", summary_only=True)
    assert summary["complete"] and "worst_ratio" in summary["fidelity"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".fabric-emu-run", "run",
                                                                     "summary.json"]
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["flows"] == summary["flows"]
    assert mine() == {"interfaces": [], "processes": []}


@pytest.mark.parametrize("victim", ["agents", "switches"])
def test_a_pack_killed_mid_run_ends_it_naming_a_member_and_leaves_nothing(tmp_path, victim):
    """Agents and switches several to a process (agents/pack.py, dataplane/pack.py):
    SIGKILL of the shared process is one line naming one of its members and
    the pack's log, and the whole fabric goes, as for a process of one."""
    exp = _experiment(tmp_path, LONG_BYTES, per_process=(2, 3))
    run_dir = tmp_path / "out" / "run"

    def packs_running(run: Run) -> bool:
        log = run_dir / "kh1+1.agent.log"
        return (run_dir / "kl1+2.log").exists() and log.exists() and "READY kh2" in log.read_text()
    run = start_run(exp, tmp_path / "out", packs_running, "--no-plots")
    from emulator.net.clean import _own_processes
    what, pack, log = (("agent kh1", "kh1+1", "kh1+1.agent.log") if victim == "agents"
                       else ("switch kl1", "kl1+2", "kl1+2.log"))
    [pid] = _own_processes(str(run_dir / f"{pack}.pack.json"))
    os.kill(pid, signal.SIGKILL)
    rc, err = run.wait()
    assert rc == 1 and "Traceback" not in err, err
    [line] = error_lines(err)
    assert what in line and "SIGKILL" in line and str(run_dir / log) in line, line
    wait_for(lambda: mine() == {"interfaces": [], "processes": []}, 10, "the fabric gone")
