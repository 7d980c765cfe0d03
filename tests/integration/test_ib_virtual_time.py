"""incast-ib in virtual time, twice: the same run, bit for bit.

The InfiniBand switches (``emulator.ib.switch``) and ``IbNic`` agents keep
the run's virtual clock (``emulator.vtime``): credit updates, VL
arbitration and every packet at its exact fabric time. The second run
packs nothing (a process per switch and per agent, the switch's own
``main``) where the first packs them: the results cannot tell. Compared:
summary.json but for its wall-time fields and the count of processes,
every CSV, and every port's pcap (ERF).
"""
from __future__ import annotations

import filecmp
import json

import pytest

from emulator.experiment import time_mode
from emulator.experiment.model import experiment_from_dict, read_experiment_data
from emulator.experiment.overrides import apply_sets
from emulator.experiment.runner import run_experiment
from tests.conftest import REPO

SMALLER = [f"traffic[{i}].size_bytes=131072" for i in range(5)]
NOT_THE_RUN = {"wall_s", "wall_phases_s", "coordinator_wall_s", "switch_processes_wall",
               "members"}


def _run(out, sets):
    path = REPO / "experiments" / "incast-ib.yaml"
    exp = experiment_from_dict(apply_sets(read_experiment_data(path),
                                          ["time=virtual", *SMALLER, *sets]), path)
    exp = time_mode.resolve_time(exp, "embedded")
    assert exp.time_mode == time_mode.VIRTUAL
    return run_experiment(exp, out, pcap=True, plots=False)


def _stripped(x):
    if isinstance(x, dict):
        return {k: _stripped(v) for k, v in x.items() if k not in NOT_THE_RUN}
    if isinstance(x, list):
        return [_stripped(v) for v in x]
    return x


def test_incast_ib_in_virtual_time_is_the_same_run_twice_however_packed(tmp_path):
    a, b = tmp_path / "packed", tmp_path / "one-per-process"
    sa = _run(a, [])
    sb = _run(b, ["switch.per_process=1", "agents.per_process=1"])
    assert sa["complete"] and not sa["fell_behind"]
    assert sa["virtual_time"]["lookahead_ns"] == 1001    # the delay and a link packet (1.92 ns)
    assert sa["virtual_time"]["members"] < sb["virtual_time"]["members"]
    # credit did its work: the spine's port into leaf1 waited for it
    assert sum(v["stalls"] for p in sa["ports"] for v in p["vls"]) > 0
    assert _stripped(json.loads((a / "summary.json").read_text())) == \
        _stripped(json.loads((b / "summary.json").read_text()))
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.suffix in (".csv", ".pcap"))
    assert sum(f.suffix == ".pcap" for f in files) >= 14     # every switch port's
    differ = [str(f) for f in files if not filecmp.cmp(a / f, b / f, shallow=False)]
    assert differ == []
