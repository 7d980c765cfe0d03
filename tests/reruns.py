"""What makes two runs the same run (virtual time: ``emulator.vtime``)."""
from __future__ import annotations

import json
from pathlib import Path


def without_wall(d):
    """A summary or an agent's result (or any part of one) without what the
    machine measured: every key naming the wall (``wall_s``, ``wall_phases_s``,
    ``coordinator_wall_s``, ``switch_processes_wall``) and a process's CPU
    seconds (``cpu_s``); what is left is the run's, and a rerun's equal."""
    if isinstance(d, dict):
        return {k: without_wall(v) for k, v in d.items() if "wall" not in k and k != "cpu_s"}
    if isinstance(d, list):
        return [without_wall(v) for v in d]
    return d


def agent_result(out, name: str) -> dict:
    """Agent (or server) ``name``'s result in run directory ``out``
    (``run/<name>.result.json``), without what the machine measured."""
    return without_wall(json.loads((Path(out) / "run" / f"{name}.result.json").read_text()))
