"""Tree all_reduce and PXN on the rails (rail-2x4, virtual time), end to
end: the shipped allreduce-rail-tree is exactly right, on rail 0 alone;
alltoall-rail-pxn's collectives leave the spines idle with PXN and cross
them without it, both exactly right. (That a collective workload's rerun
is the same run is test_training_step's.)"""
from __future__ import annotations

import pytest

from emulator.experiment.dilation import run_with_dilation
from emulator.experiment.model import experiment_from_dict, read_experiment_data
from tests.conftest import REPO

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]
LINK_GBPS = 12.5                        # a 100 Gbps NIC, GB/s


def _run(out, name: str, **workload) -> dict:
    path = REPO / "experiments" / f"{name}.yaml"
    data = read_experiment_data(path)
    data["workload"].update(workload)
    data["time"] = "virtual"
    return run_with_dilation(experiment_from_dict(data, path), out, plots=False)


def _spine_bytes(summary: dict) -> int:
    return sum(p.get("tx_bytes", 0) for p in summary["ports"] if p["node"].startswith("spine"))


def test_tree_all_reduce_on_the_rails_is_exact_on_rail_0(tmp_path):
    first = _run(tmp_path, "allreduce-rail-tree")
    assert first["complete"] and not first["fell_behind"] and first["time"] == "virtual"
    rows = first["collectives"]["results"]
    assert [r["size_bytes"] for r in rows] == [65536, 262144, 1048576]
    assert all(r["algorithm"] == "tree" and r["wrong"] == 0 and r["inplace_wrong"] == 0
               for r in rows)
    # both trees' inter-server edge is rail 0, which carries the whole buffer
    # each way: algbw at most one NIC's (1 MiB measured 10.85 GB/s)
    assert all(r["algbw_GBps"] <= LINK_GBPS for r in rows)
    assert rows[-1]["algbw_GBps"] > 0.7 * LINK_GBPS
    assert _spine_bytes(first) == 0


def test_pxn_keeps_the_collectives_off_the_spines(tmp_path):
    # each test timed once after its warm-up (the file's 2 iterations: 11.8 s of the
    # suite's wall, 8.3 s so); every iteration's data is checked as before
    tests = read_experiment_data(REPO / "experiments" / "alltoall-rail-pxn.yaml")["workload"]["tests"]
    tests = [{**t, "iters": 1} for t in tests]
    on = _run(tmp_path / "on", "alltoall-rail-pxn", tests=tests)
    off = _run(tmp_path / "off", "alltoall-rail-pxn", tests=tests, pxn=False)
    for s in (on, off):
        assert s["complete"] and not s["fell_behind"]
        assert all(r["wrong"] == 0 for r in s["collectives"]["results"])
    # measured 0 with PXN, 6.5 MB over the spines without (10.9 MB at 2 iterations)
    assert _spine_bytes(on) == 0
    assert _spine_bytes(off) > 5_000_000
