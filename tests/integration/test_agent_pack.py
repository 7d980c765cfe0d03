"""Host agents packed several to a process (emulator/agents/pack.py) on the
real fabric: each member's NIC in its own host's namespace, one loop."""
from __future__ import annotations

import json

import pytest

from emulator.experiment.model import experiment_from_dict
from tests.conftest import REPO, run_shipped
from tests.losses import assert_no_drops_no_retransmissions

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]


def test_an_all_to_all_with_two_hosts_per_process_is_intact_and_lossless(tmp_path):
    exp = experiment_from_dict({
        "name": "pack-a2a", "topology": "../topologies/clos-2x2.yaml", "dilation": 8000,
        "qos": {"pfc": {"enabled": True}, "ecn": {"enabled": True}},
        "traffic": [{"pattern": "all-to-all", "op": "write", "size_bytes": 131072}],
        "agents": {"per_process": 2},
        "limits": {"wall_s": 60},
    }, REPO / "experiments" / "inline.yaml")
    s = run_shipped(exp, tmp_path)
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
