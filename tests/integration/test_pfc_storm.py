"""A PFC storm and the PFC watchdog end to end (docs/faults.md), in virtual
time: the shipped experiments/pfc-storm.yaml (watchdog off) and
pfc-storm-wd.yaml (on, drop). h1's NIC storms PAUSE on priority 3 from 20
to 1020 us; h3 writes to h1, the victims h4 -> h2 and h2 -> h4 send it nothing.

* off: the pause spreads leaf1 -> spine1 -> leaf2 -> h3, h4 and lasts the
  storm: the victims finish after it;
* on: leaf1 finds the storm exactly the detection time after the first
  PAUSE, ends it the restoration time after the last; the spread pauses end
  then, and the victims finish in a fraction of that;
* a rerun with the watchdog is the same run;
* experiments/cpu-stall.yaml: a host that stops reading pauses the fabric
  through its NIC for the stall, and nothing is lost."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from emulator.dataplane.pfc import pause_ns
from emulator.experiment.dilation import run_with_dilation
from emulator.experiment.model import load_experiment
from tests.conftest import REPO
from tests.reruns import without_wall

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]

STORM_NS = (20_000, 1_020_000)
DETECT_NS, RESTORE_NS = 100_000, 400_000
VICTIMS = (1, 2)                              # flow ids: h4 -> h2, h2 -> h4


def _run(name: str, out: Path) -> tuple[dict, Path]:
    return run_with_dilation(load_experiment(REPO / "experiments" / f"{name}.yaml"), out, plots=False), out


@pytest.fixture(scope="module")
def off(tmp_path_factory):
    return _run("pfc-storm", tmp_path_factory.mktemp("off") / "out")


@pytest.fixture(scope="module")
def on(tmp_path_factory):
    return _run("pfc-storm-wd", tmp_path_factory.mktemp("on") / "out")


def _paused_ns(s: dict, node: str, peer: str) -> int:
    port = next(p for p in s["ports"] if p["node"] == node and p["peer"] == peer)
    return port["priorities"][3]["paused_ns"]


def _rows(out: Path, name: str) -> list[dict]:
    with open(out / name) as f:
        return list(csv.DictReader(f))


def _fct_us(s: dict, flow_id: int) -> float:
    return s["flows"][flow_id]["fct_ns"] / 1000


def test_without_the_watchdog_the_pause_spreads_over_the_fabric_for_the_whole_storm(off):
    s, out = off
    assert s["complete"] and not s["fell_behind"]
    storm_us = (STORM_NS[1] - STORM_NS[0]) / 1000
    for node, peer in (("leaf1", "h1"), ("spine1", "leaf1"), ("leaf2", "spine1")):
        assert _paused_ns(s, node, peer) / 1000 > storm_us, (node, peer)
    paused = {r["node"] for r in _rows(out, "pfc_events.csv") if r["event"] == "pause_rx"}
    assert paused >= {"leaf1", "spine1", "leaf2", "h3", "h4"}
    assert all(_fct_us(s, f) > storm_us for f in VICTIMS)
    (end,) = s["faults"]["ends"]
    refresh = pause_ns(0xFFFF, 100_000_000_000) // 2
    assert end["direction"] == "h1->leaf1"
    assert end["pfc_storm_frames"] == len(range(STORM_NS[0], STORM_NS[1], refresh))
    assert not (out / "pfcwd_events.csv").exists()
    assert all("pfc_watchdog" not in sw for sw in s["switches"])


def test_the_watchdog_finds_the_storm_at_its_times_and_contains_it(on):
    s, out = on
    assert s["complete"] and not s["fell_behind"]
    pauses = [int(r["time_ns"]) for r in _rows(out, "pfc_events.csv")
              if r["node"] == "leaf1" and r["peer"] == "h1" and r["event"] == "pause_rx"]
    events = _rows(out, "pfcwd_events.csv")
    assert [(r["node"], r["peer"], r["priority"], r["event"], r["action"]) for r in events] == [
        ("leaf1", "h1", "3", "storm_detected", "drop"), ("leaf1", "h1", "3", "storm_restored", "drop")]
    assert [int(r["time_ns"]) for r in events] == [pauses[0] + DETECT_NS, pauses[-1] + RESTORE_NS]
    (leaf1,) = [sw["pfc_watchdog"] for sw in s["switches"] if sw["node"] == "leaf1"]
    (queue,) = leaf1["queues"]
    assert (queue["port"], queue["peer"], queue["priority"]) == (1, "h1", 3)
    assert (queue["storms_detected"], queue["storms_restored"]) == (1, 1)
    assert queue["tx_drops"] > 0 and leaf1["dropped_frames"] == queue["tx_drops"] + queue["rx_drops"]
    assert [e["time_ns"] for e in leaf1["events"]] == [int(r["time_ns"]) for r in events]
    # the spread pauses end with the storm's detection; the victims run then
    for node, peer in (("spine1", "leaf1"), ("leaf2", "spine1")):
        assert _paused_ns(s, node, peer) <= DETECT_NS, (node, peer)
    assert _paused_ns(s, "leaf1", "h1") == DETECT_NS
    assert all(_fct_us(s, f) < 2.5 * DETECT_NS / 1000 for f in VICTIMS)
    # h3's frames into the storm were dropped: go-back-N brings them after the restoration
    assert s["flows"][0]["retransmitted_packets"] > 0
    assert s["flows"][0]["fct_ns"] > pauses[-1] + RESTORE_NS


def test_a_rerun_with_the_watchdog_is_the_same_run(on, tmp_path):
    s1, out1 = on
    s2, out2 = _run("pfc-storm-wd", tmp_path / "out")
    assert without_wall({**s2, "source": ""}) == without_wall({**s1, "source": ""})
    for name in ("pfcwd_events.csv", "pfc_events.csv", "queue_depth.csv", "flow_rate.csv", "drops.csv"):
        assert (out1 / name).read_bytes() == (out2 / name).read_bytes(), name


def test_a_stalled_host_pauses_the_fabric_for_the_stall_and_loses_nothing(tmp_path):
    """experiments/cpu-stall.yaml: h1 stops taking data from 20 us for 300 us."""
    s, out = _run("cpu-stall", tmp_path / "out")
    assert s["complete"] and not s["fell_behind"]
    (end,) = s["faults"]["ends"]
    stall = end["cpu_stall"]
    assert stall["held_max_bytes"] >= 65_536 and stall["resume_tx"] == 1
    h1_pfc = [(int(r["time_ns"]), r["event"]) for r in _rows(out, "pfc_events.csv")
              if r["node"] == "leaf1" and r["peer"] == "h1"]
    assert [e for _, e in h1_pfc] == ["pause_rx"] * stall["pause_tx"] + ["resume_rx"]
    assert 320_000 < h1_pfc[-1][0] < 322_000               # XON when the host takes it: 320 us + the link
    for node, peer in (("spine1", "leaf1"), ("leaf2", "spine1")):
        assert 200_000 < _paused_ns(s, node, peer) < 320_000, (node, peer)
    assert all(f["retransmitted_packets"] == 0 for f in s["flows"])
    assert all(_fct_us(s, f) > 200 for f in VICTIMS)
