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

import threading
from types import SimpleNamespace

import pytest

from emulator.agents.start_gate import ready_then_start
from emulator.clock import ManualClock
from emulator.errors import RunAborted
from emulator.experiment.agents import AgentProcesses, start_together
from emulator.experiment.runner import WallPhases
from emulator.schema.load import ProcessConfig
from tests.polling import GENEROUS_S, eventually

# An agent in miniature: reads its config, waits until the test's ``hold``
# file exists if it has one (its imports, as long as the test wants), passes
# the gate, writes the start time it got, exits.
AGENT = """
import json, os, sys, time
from emulator.agents.start_gate import ready_then_start
cfg = json.load(open(sys.argv[-1]))
while cfg["hold"] and not os.path.exists(cfg["hold"]):
    time.sleep(0.005)
if cfg["die"]:
    sys.exit(cfg["die"])
start = ready_then_start(cfg["name"], cfg["ready_path"], None)
open(cfg["out"], "w").write(str(start))
"""


class GateConfig(ProcessConfig):
    name: str
    ready_path: str | None
    hold: str | None = None
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


def group(tmp_path: Path, holds: dict[str, Path | None],
          die: dict[str, int] | None = None) -> AgentProcesses:
    """An agent per name of ``holds``, each ready once its hold file exists (None: at once)."""
    g = AgentProcesses(Net(), None, tmp_path)
    for name, hold in holds.items():
        g.launch(name, GateConfig(name=name, ready_path=g.ready_path(name),
                                  hold=None if hold is None else str(hold),
                                  die=(die or {}).get(name, 0),
                                  out=str(tmp_path / f"{name}.start")), "x")
    return g


class Watched:
    """A group whose ``not_ready`` the test sees: ``held`` is set once the
    runner has looked twice and found ``name`` not ready."""

    def __init__(self, group: AgentProcesses, name: str):
        self.group, self.name, self.looks = group, name, 0
        self.held = threading.Event()

    def __getattr__(self, attr):
        return getattr(self.group, attr)

    def not_ready(self):
        waiting = self.group.not_ready()
        if self.name in waiting:
            self.looks += 1
            if self.looks >= 2:
                self.held.set()
        return waiting


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
    # "slow" is held until the runner has seen "fast" ready and "slow" not:
    # no start may be handed out before "slow" is let go, and both get the
    # same one, ahead of the moment it was handed out.
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    hold = tmp_path / "let-slow-go"
    a = group(tmp_path / "a", {"fast": None})
    b = Watched(group(tmp_path / "b", {"slow": hold}), "slow")
    handed: dict[str, int] = {}
    runner = threading.Thread(target=lambda: handed.update(
        start=start_together(a, b, timeout_s=GENEROUS_S), t_release=time.time_ns()))
    runner.start()
    eventually(lambda: (tmp_path / "a" / "fast.ready").exists(), "fast ready")
    assert b.held.wait(GENEROUS_S)             # the runner saw slow not ready ...
    assert "start" not in handed               # ... and handed out nothing
    t_let_go = time.time_ns()
    hold.touch()
    runner.join(GENEROUS_S)
    for g in (a, b):
        for p in g.procs.values():
            assert p.wait(timeout=30) == 0
    got = {int((tmp_path / d / f"{n}.start").read_text()) for d, n in (("a", "fast"), ("b", "slow"))}
    assert got == {handed["start"]}
    assert handed["start"] > t_let_go          # not before the slow one was ready
    assert handed["start"] > handed["t_release"]    # still ahead when handed out
    assert (tmp_path / "b" / "slow.ready").exists()


@pytest.mark.parametrize("status", [1, 3])    # a traceback; even an exit that ends a run well
def test_an_agent_that_exits_before_the_gate_aborts_the_wait_naming_it(tmp_path, status):
    g = group(tmp_path, {"ok": None, "bad": None}, die={"bad": status})
    with pytest.raises(RunAborted, match="agent bad") as e:
        start_together(g, timeout_s=GENEROUS_S)
    assert "exited" in str(e.value) and "not ready" not in str(e.value)    # its exit: no timeout
    g.stop()
    assert g.procs["ok"].returncode != 0       # it left the gate on EOF: no run


def test_an_agent_never_ready_times_out_naming_it_and_stop_ends_it(tmp_path):
    g = group(tmp_path, {"stuck": tmp_path / "never"})
    with pytest.raises(RunAborted, match="agent stuck not ready"):
        start_together(g, timeout_s=0.3)
    g.stop(grace_s=2)
    assert g.procs["stuck"].poll() is not None


def test_wall_phases_count_each_phase_from_the_previous_mark(monkeypatch):
    from emulator.experiment import runner
    clock = ManualClock()
    monkeypatch.setattr(runner, "time", SimpleNamespace(monotonic=lambda: clock.now_ns() / 1e9))
    ph = WallPhases()
    clock.advance(50_000_000)
    first = ph.mark("bring_up")
    clock.advance(20_000_000)
    ph.mark("traffic")
    clock.advance(1_234_567)
    assert ph.seconds == {"bring_up": 0.05, "traffic": 0.02}      # in order, to the ms
    assert first == 0.05 and ph.total_s() == pytest.approx(0.071234567)
    assert json.loads(json.dumps(ph.seconds)) == ph.seconds
