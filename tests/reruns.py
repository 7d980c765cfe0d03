"""What makes two runs the same run (virtual time: ``emulator.vtime``)."""
from __future__ import annotations


def without_wall(d):
    """A summary (or any part of one) without its wall-time fields: every
    key naming the wall (``wall_s``, ``wall_phases_s``, ``coordinator_wall_s``,
    ``switch_processes_wall``); what is left is the run's, and a rerun's equal."""
    if isinstance(d, dict):
        return {k: without_wall(v) for k, v in d.items() if "wall" not in k}
    if isinstance(d, list):
        return [without_wall(v) for v in d]
    return d
