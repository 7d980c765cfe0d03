"""experiments/training-3d.yaml end to end (issue 38): a training step
shaped by tp 2 x pp 2 x dp 2 (ep 2) on rail-2x4, in virtual time. Every
phase is there, the phases tile the step, every piece's data is right, and
a rerun is the same run: training.csv and training.json byte for byte, the
agents' raw results and summary.json but for its wall-time fields. This is
the suite's one rerun of a collective workload (the engine's every phase:
compute, tp, ep, pp, dp); the other collective files run theirs once."""
from __future__ import annotations

import csv

import pytest

from emulator.experiment.dilation import run_with_dilation
from emulator.experiment.model import experiment_from_dict, read_experiment_data
from tests.conftest import REPO
from tests.reruns import agent_result, without_wall

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]


def _run(out) -> dict:
    path = REPO / "experiments" / "training-3d.yaml"
    data = read_experiment_data(path)
    data["time"] = "virtual"
    return run_with_dilation(experiment_from_dict(data, path), out, plots=False)


def test_training_3d_phases_tile_the_step_and_rerun_identically(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    first, second = _run(a), _run(b)
    for s in (first, second):
        assert s["complete"] and s["time"] == "virtual" and s["collectives"]["complete"]
    tr = first["collectives"]["training"]
    assert tr["wrong"] == 0 and tr["nranks"] == 8 and tr["steps"] == 2
    assert tr["parallelism"]["tp"] == tr["parallelism"]["pp"] == tr["parallelism"]["dp"] == 2
    ph = tr["phases"]
    # compute: 2 microbatches x 2 layers x (20 us forward + 40 us backward), exactly
    assert ph["compute"]["time_us"] == pytest.approx(240.0)
    for phase in ("tp", "ep", "pp"):
        assert ph[phase]["time_us"] > 0, phase
    assert sum(p["time_us"] for p in ph.values()) == pytest.approx(tr["step_time_us"]["mean"])
    assert sum(p["share"] for p in ph.values()) == pytest.approx(1.0)
    rows = list(csv.DictReader(open(a / "training.csv")))
    assert [r["phase"] for r in rows] == ["compute", "tp", "ep", "pp", "dp", "step"]
    assert without_wall(first) == without_wall(second)
    for name in ("training.csv", "training.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    for server in ("server1", "server2"):
        ra, rb = (agent_result(d, server) for d in (a, b))
        assert ra["complete"] and ra == rb
