"""A server-side agent's start and end (``emulator.collectives.agent_io``):
its result written whole, with the process's CPU, and a bad config refused."""
from __future__ import annotations

import json
import time

import pytest

from emulator.collectives import agent_io
from emulator.collectives.agent_io import agent_main
from emulator.schema.load import ProcessConfig


class _Config(ProcessConfig):
    result_path: str
    spin_s: float = 0.0


@pytest.fixture(autouse=True)
def _no_lifeline(monkeypatch):
    """This process is pytest, not a runner's child: nothing to die with."""
    monkeypatch.setattr(agent_io, "die_with_runner", lambda: None)


def _work(cfg: _Config, path: str) -> dict:
    end = time.process_time() + cfg.spin_s
    while time.process_time() < end:     # CPU the result must account for
        pass
    return {"server": 0, "complete": True}


def test_the_result_is_written_with_the_process_cpu_seconds(tmp_path):
    result = tmp_path / "s.result.json"
    config = tmp_path / "s.json"
    config.write_text(json.dumps({"result_path": str(result), "spin_s": 0.05}))
    before = time.process_time()
    cfg, res = agent_main("test", _Config, _work, argv=[str(config)])
    written = json.loads(result.read_text())
    assert written == res and written["complete"]
    # the process's CPU so far: at least what it spent before and in the work
    assert written["cpu_s"] >= round(before + 0.05, 3) - 0.001


def test_a_bad_config_is_status_2_and_writes_nothing(tmp_path, capsys):
    config = tmp_path / "s.json"
    config.write_text(json.dumps({"result_path": str(tmp_path / "r.json"), "spin_s": "x"}))
    assert agent_main("test", _Config, _work, argv=[str(config)]) == 2
    assert not (tmp_path / "r.json").exists()
    assert "spin_s" in capsys.readouterr().err
