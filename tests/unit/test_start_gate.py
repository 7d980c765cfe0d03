"""The start barrier: agents say they are ready, the runner hands them one
start time once all are (``emulator/agents/start_gate.py``,
``emulator.experiment.agents.start_together``). Real processes on real
pipes; only Mininet's host is replaced by the runner's own namespace."""
from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emulator.agents.start_gate import ready_then_start
from emulator.errors import RunAborted
from emulator.experiment.agents import AgentProcesses, start_together
from emulator.experiment.runner import WallPhases
from emulator.schema.load import ProcessConfig

# An agent in miniature: reads its config, sleeps as long as it says (its
# imports), passes the gate, writes the start time it got, exits.
AGENT = """
import json, sys, time
from emulator.agents.start_gate import ready_then_start
cfg = json.load(open(sys.argv[-1]))
time.sleep(cfg["import_s"])
if cfg["die"]:
    sys.exit(cfg["die"])
start = ready_then_start(cfg["name"], cfg["ready_path"], None)
open(cfg["out"], "w").write(str(start))
"""


class GateConfig(ProcessConfig):
    name: str
    ready_path: str | None
    import_s: float
    die: int = 0
    out: str


class Net:
    """FabricNet's ``spawn`` without namespaces: the agent's module replaced by AGENT."""

    def spawn(self, node, module, args, log_path, *, stdin_pipe=False):
        with open(log_path, "w") as log:
            return subprocess.Popen([sys.executable, "-c", AGENT, args[-1]], stdout=log,
                                    stderr=subprocess.STDOUT,
                                    stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL)

    def check_alive(self):
        pass


def group(tmp_path: Path, import_s: dict[str, float], die: dict[str, int] | None = None) -> AgentProcesses:
    g = AgentProcesses(Net(), None, tmp_path)
    for name, s in import_s.items():
        g.launch(name, GateConfig(name=name, ready_path=g.ready_path(name), import_s=s,
                                  die=(die or {}).get(name, 0), out=str(tmp_path / f"{name}.start")), "x")
    return g


def test_gate_marks_ready_and_returns_the_start_it_reads(tmp_path):
    out = io.StringIO()
    ready = tmp_path / "a.ready"
    sys_stdout, sys.stdout = sys.stdout, out
    try:
        start = ready_then_start("a", str(ready), None, stdin=io.StringIO("123456789\n"))
    finally:
        sys.stdout = sys_stdout
    assert start == 123456789
    assert ready.exists()
    assert out.getvalue() == "READY a\n"


def test_gate_without_ready_path_keeps_the_configured_start(tmp_path, capsys):
    assert ready_then_start("a", None, 42, stdin=io.StringIO("")) == 42
    assert capsys.readouterr().out == "READY a\n"


def test_gate_ends_the_agent_when_the_runner_closes_stdin(tmp_path, capsys):
    with pytest.raises(SystemExit, match="closed stdin"):
        ready_then_start("a", str(tmp_path / "a.ready"), None, stdin=io.StringIO(""))


def test_every_agent_gets_one_start_after_the_slowest_is_ready(tmp_path):
    # "slow" is ready 0.6 s after "fast": no start may be handed out before
    # it, and both get the same one, ahead of the moment it was handed out.
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    a = group(tmp_path / "a", {"fast": 0.0})
    b = group(tmp_path / "b", {"slow": 0.6})
    t_launch = time.time_ns()
    start = start_together(a, b, timeout_s=30)
    t_release = time.time_ns()
    for g in (a, b):
        for p in g.procs.values():
            assert p.wait(timeout=30) == 0
    got = {int((tmp_path / d / f"{n}.start").read_text()) for d, n in (("a", "fast"), ("b", "slow"))}
    assert got == {start}
    assert start - t_launch >= 0.6e9           # not before the slow one was ready
    assert start > t_release                   # still ahead when handed out
    assert (tmp_path / "b" / "slow.ready").exists()


@pytest.mark.parametrize("status", [1, 3])    # a traceback; even an exit that ends a run well
def test_an_agent_that_exits_before_the_gate_aborts_the_wait_naming_it(tmp_path, status):
    g = group(tmp_path, {"ok": 0.0, "bad": 0.0}, die={"bad": status})
    t = time.monotonic()
    with pytest.raises(RunAborted, match="agent bad"):
        start_together(g, timeout_s=30)
    assert time.monotonic() - t < 10
    g.stop()
    assert g.procs["ok"].returncode != 0       # it left the gate on EOF: no run


def test_an_agent_never_ready_times_out_naming_it_and_stop_ends_it(tmp_path):
    g = group(tmp_path, {"stuck": 30.0})
    with pytest.raises(RunAborted, match="agent stuck not ready"):
        start_together(g, timeout_s=0.3)
    g.stop(grace_s=2)
    assert g.procs["stuck"].poll() is not None


def test_wall_phases_count_each_phase_from_the_previous_mark():
    ph = WallPhases()
    time.sleep(0.05)
    first = ph.mark("bring_up")
    time.sleep(0.02)
    ph.mark("traffic")
    assert list(ph.seconds) == ["bring_up", "traffic"]
    assert 0.05 <= first < 1
    assert 0.02 <= ph.seconds["traffic"] < first + 1
    assert ph.total_s() >= first + ph.seconds["traffic"]
    json.dumps(ph.seconds)
