"""An InfiniBand CLOS end to end: a topology file with ``link_layer:
infiniband`` brings up embedded IB switches (``python -m emulator.ib.switch``,
forked by the run's fork server), the controller plays the subnet manager
(LIDs and up/down LFTs from ``ib.sm.sweep``, written over P4Runtime with
ib.p4's P4Info), and the experiment's host agents drive ``IbNic``s whose
path records come from the same sweep. Three hosts write to a fourth
across the spines: every byte arrives, nothing is resent, no switch buffer
overruns, and the leaf spreads the two remote destinations over its two
uplinks as the SM balanced them.
"""
from __future__ import annotations

import json
import time

import pytest
import yaml

from emulator.experiment.agents import AgentGroup, start_together
from emulator.experiment.model import experiment_from_dict, load_experiment
from emulator.experiment.runner import fabric_net
from emulator.ib.sm import path_records, sweep
from tests.conftest import REPO, run_shipped
from tests.losses import assert_no_drops_no_retransmissions


DILATION = 2000
FLOW_BYTES = 128 * 1024


@pytest.fixture
def ib_topology(tmp_path):
    spec = yaml.safe_load((REPO / "topologies/clos-2x2.yaml").read_text())
    spec["link_layer"] = "infiniband"
    path = tmp_path / "clos-2x2-ib.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_an_infiniband_clos_runs_rdma_writes_on_the_subnet_managers_routes(tmp_path, ib_topology):
    exp = experiment_from_dict({
        "name": "ib-incast", "topology": str(ib_topology), "dilation": DILATION,
        "traffic": [{"src": h, "dst": "h4", "op": "write", "size_bytes": FLOW_BYTES}
                    for h in ("h1", "h2", "h3")],
        "limits": {"wall_s": 60},
    }, REPO / "experiments" / "inline.yaml")
    assert exp.fabric.link_layer == "infiniband"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with fabric_net(exp, run_dir) as fnet:
        agents = AgentGroup(fnet, exp, run_dir, None)
        try:
            agents.launch_all()
            start_together(agents)
            # as the runner waits (``_wait_with_progress``): until every
            # agent says it is done (its sends ACKed, its expects placed)
            deadline = time.monotonic() + 60
            while agents.running() and agents.progress()[1] < len(agents.procs):
                assert time.monotonic() < deadline, "the agents never said they were done"
                time.sleep(0.05)
        finally:
            agents.stop()
        results = agents.results()
    sent = [f for h in ("h1", "h2", "h3") for f in results[h]["send"]]
    assert len(sent) == 3 and all(f["complete"] and f["status"] == "SUCCESS" for f in sent)
    received = results["h4"]["expect"]
    assert len(received) == 3 and all(e["complete"] and e["intact"] for e in received)
    nics = {h: results[h]["nic"] for h in results}
    assert sum(n["tx_retransmits"] + n["timeouts"] for n in nics.values()) == 0
    assert nics["h4"]["fc_tx"] > 0 and nics["h1"]["fc_rx"] > 0      # credit both ways
    stats = {sw.name: json.loads((run_dir / f"{sw.name}.stats.json").read_text())
             for sw in exp.fabric.switches()}
    assert all(s["link_layer"] == "infiniband" for s in stats.values())
    # the switches ran packed as "auto" cuts them for this machine's cores
    # (dataplane/pack.py), each with its own stats
    from emulator.net.packing import switch_packs
    groups = [g for g in switch_packs([sw.name for sw in exp.fabric.switches()], "auto")
              if len(g) > 1]
    packs = {p.name: json.loads(p.read_text())["members"] for p in run_dir.glob("*.pack.json")}
    assert {n: m for n, m in packs.items() if isinstance(m[0], str)} == \
        {f"{g[0]}+{len(g) - 1}.pack.json": [str(run_dir / f"{sw}.switch.json") for sw in g]
         for g in groups}
    vls = [vl for s in stats.values() for p in s["ports"] for vl in p["vls"]]
    assert sum(vl["overruns"] for vl in vls) == 0
    # leaf1's LFT: h4's LID (and h3's) up through the uplink the SM chose;
    # h1 and h2 sent to h4 over that one spine -- IB spreads per destination
    subnet = sweep(exp.fabric)
    lid_h4 = path_records(exp.fabric)[exp.fabric.addresses.host_ip("h4")]
    up = subnet.lft["leaf1"][lid_h4]
    by_port = {p["port"]: p for p in stats["leaf1"]["ports"]}
    assert by_port[up]["vls"][0]["tx_packets"] >= 2 * FLOW_BYTES // 1024


def test_the_incast_on_infiniband_is_lossless_and_its_senders_stall_for_credit(tmp_path):
    """experiments/incast-ib.yaml as users run it: incast-pfc's 5 -> 1 on the
    same fabric as InfiniBand. No drop anywhere, nothing resent; where PFC
    would pause, ports stall for want of credit: leaf1's uplinks and h1's
    neighbours wait, and the summary says how long (fabric ns)."""
    exp = load_experiment(REPO / "experiments" / "incast-ib.yaml")
    s = run_shipped(exp, tmp_path)
    assert not s["fell_behind"], f"fell behind at dilation {s['dilation']:g}"
    assert s["link_layer"] == "infiniband" and s["lossless_priorities"] == []
    assert s["complete"], [f for f in s["flows"] if not f["complete"]]
    assert all(f["delivered_bytes"] == f["bytes"] and f["intact"] for f in s["flows"])
    assert sum(p["drops"] for p in s["ports"]) == 0
    assert_no_drops_no_retransmissions(s, tmp_path)
    # the spines and leaf2 hold packets for leaf1 while its buffers are full:
    # ports toward leaf1 stall, and the flows take longer than alone
    toward_leaf1 = [p for p in s["ports"] if p["peer"] == "leaf1"]
    assert sum(p["credit_stalled_ns"] for p in toward_leaf1) > 0
    assert all(f["fct_slowdown"] > 1.5 for f in s["flows"])


def test_ib_congestion_control_marks_fecn_and_the_senders_step_their_ccti(tmp_path):
    """experiments/fairness-ib.yaml: four long flows into h1 under IB CC.
    h1's leaf marks FECN (one eligible packet in marking_rate + 1), h1
    returns BECNs, and every sender's CCTI rises with them and falls on
    its timer; nothing is lost on the way."""
    exp = load_experiment(REPO / "experiments" / "fairness-ib.yaml")
    s = run_shipped(exp, tmp_path)
    assert not s["fell_behind"], f"fell behind at dilation {s['dilation']:g}"
    assert s["complete"] and sum(p["drops"] for p in s["ports"]) == 0
    assert_no_drops_no_retransmissions(s, tmp_path)
    marks = {(p["node"], p["peer"]): p["fecn_marks"] for p in s["ports"] if p["fecn_marks"]}
    assert marks.get(("leaf1", "h1"), 0) > 0, marks
    run = tmp_path / "run"
    h1 = json.loads((run / "h1.result.json").read_text())["nic"]
    assert h1["ecn_ce_rx"] > 0 and h1["cnp_tx"] == h1["ecn_ce_rx"]   # a BECN for every FECN
    for host in ("h2", "h4", "h5", "h6"):
        rows = (run / f"{host}.qp.csv").read_text().splitlines()[1:]
        events = [r.split(",")[4] for r in rows]
        cctis = [float(r.split(",")[3]) for r in rows]
        assert "cnp" in events and "rate_timer" in events, host
        assert max(cctis) >= 1 and cctis[-1] < max(cctis), host      # up with BECNs, down on the timer
