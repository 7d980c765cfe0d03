"""Host agents and switches packed several to a process on the real fabric
(emulator/agents/pack.py: each member's NIC in its own host's namespace;
emulator/dataplane/pack.py: each member switch its own P4Runtime server and
stats), one loop per process."""
from __future__ import annotations

import json

import pytest

from emulator.experiment.model import experiment_from_dict
from emulator.net.fabric import FabricNet
from emulator.topo import load_fabric
from tests.conftest import REPO, run_shipped
from tests.losses import assert_no_drops_no_retransmissions

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]


def _all_to_all(tmp_path, per_process: dict) -> dict:
    exp = experiment_from_dict({
        "name": "pack-a2a", "topology": "../topologies/clos-2x2.yaml", "dilation": 8000,
        "qos": {"pfc": {"enabled": True}, "ecn": {"enabled": True}},
        "traffic": [{"pattern": "all-to-all", "op": "write", "size_bytes": 131072}],
        **per_process,
        "limits": {"wall_s": 60},
    }, REPO / "experiments" / "inline.yaml")
    return run_shipped(exp, tmp_path)


def test_an_all_to_all_with_two_hosts_per_process_is_intact_and_lossless(tmp_path):
    s = _all_to_all(tmp_path, {"agents": {"per_process": 2}, "switch": {"per_process": 1}})
    assert not s["fell_behind"]
    assert s["complete"] and len(s["flows"]) == 12, s["flows"]
    assert all(f["intact"] and f["delivered_bytes"] == 131072 for f in s["flows"])
    assert_no_drops_no_retransmissions(s, tmp_path)
    run = tmp_path / "run"
    # Two processes of two hosts each, every member announced ready in its pack's log...
    packs = sorted(run.glob("*.pack.json"))
    assert [p.name for p in packs] == ["h1+1.pack.json", "h3+1.pack.json"]
    members = [json.loads(p.read_text())["members"] for p in packs]
    assert [[m["config"].rsplit("/", 1)[1] for m in ms] for ms in members] == \
        [["h1.agent.json", "h2.agent.json"], ["h3.agent.json", "h4.agent.json"]]
    assert len({m["netns_pid"] for ms in members for m in ms}) == 4   # a namespace per host
    # 2 agent packs and 4 switch processes: they spin before their timers only with 6 cores
    from emulator.net.packing import wake_spin_ns
    assert {json.loads(p.read_text())["wake_spin_ns"] for p in packs} == {wake_spin_ns(6)}
    for first, second in (("h1", "h2"), ("h3", "h4")):
        log = (run / f"{first}+1.agent.log").read_text()
        assert f"READY {first}\nREADY {second}\n" in log, log
        assert not (run / f"{second}.agent.log").exists()
    # ...and each host's NIC sent and received on its own veth: every host's
    # result counts the frames of its own flows.
    for h in ("h1", "h2", "h3", "h4"):
        r = json.loads((run / f"{h}.result.json").read_text())
        assert r["host"] == h and r["complete"]
        assert r["nic"]["tx_data_packets"] == 3 * 128 and r["nic"]["rx_data_packets"] == 3 * 128


def test_switches_two_to_a_process_forward_count_and_report_each_its_own(tmp_path):
    s = _all_to_all(tmp_path, {"switch": {"per_process": 2}, "agents": {"per_process": 1}})
    assert not s["fell_behind"]
    assert s["complete"] and all(f["intact"] for f in s["flows"]), s["flows"]
    assert_no_drops_no_retransmissions(s, tmp_path)
    run = tmp_path / "run"
    packs = {p.name: json.loads(p.read_text())["members"] for p in run.glob("*.pack.json")}
    assert len(packs) == 2 and sorted(len(m) for m in packs.values()) == [2, 2]
    members = sorted(m.rsplit("/", 1)[1] for ms in packs.values() for m in ms)
    assert members == sorted(f"{sw}.switch.json" for sw in ("leaf1", "leaf2", "spine1", "spine2"))
    for name in packs:                      # one log per pack, a ready line per member
        log = (run / name.replace(".pack.json", ".log")).read_text()
        assert log.count(": ready, P4Runtime on 127.0.0.1:") == 2, log
    # Each switch kept its own counters (a snapshot of one never cleared its
    # pack-mate's): what a port sent, the port at the other end of its link received.
    # (clos-2x2: one link per leaf and spine, so a port is named by its ends)
    by_ends = {(p["node"], p["peer"]): p for p in s["ports"]}
    links = [(p, by_ends[(p["peer"], p["node"])]) for p in s["ports"]
             if (p["peer"], p["node"]) in by_ends]
    assert len(links) == 8          # leaf <-> spine, both directions
    for a, b in links:
        assert a["tx_packets"] > 0 and a["tx_packets"] == b["rx_packets"], (a, b)


def test_a_snapshot_of_one_packed_switch_leaves_its_pack_mates_counters(tmp_path):
    fabric = load_fabric(REPO / "topologies/clos-2x2.yaml")
    with FabricNet(fabric, tmp_path, dilation=1000, switches_per_process=4) as fnet:
        procs = {sw.name: fnet.net.get(sw.name).proc for sw in fabric.switches()}
        assert len({id(p) for p in procs.values()}) == 1          # all four in one process
        assert fnet.net.pingAll(timeout="2") == 0
        first = fnet.snapshot_switch_stats()
        second = fnet.snapshot_switch_stats()
    assert sorted(first) == sorted(procs) and all(first[n]["name"] == n for n in first)
    # Every leaf forwarded the pings, and each kept them until its own snapshot
    # (requested one after the other, all to the same process)...
    for leaf in ("leaf1", "leaf2"):
        assert first[leaf]["rx_frames"] >= 12, first[leaf]
    # ...which then cleared them: the next window starts from nothing.
    for name, st in second.items():
        assert st["rx_frames"] <= 2 and st["since_ns"] >= first[name]["until_ns"], st
