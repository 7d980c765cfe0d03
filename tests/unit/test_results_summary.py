"""summary.json: per-priority port counters, flow priority and FCT slowdown, and
the table ``render_summary`` makes of it."""
from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

from emulator.experiment.ideal_fct import flow_priority, standalone_fct_ns
from emulator.experiment.summary import (
    SUMMARY_VERSION,
    build_summary,
    priority_totals,
    render_summary,
)
from tests.unit.test_results import D, make_experiment, make_run

PORT_KEYS = {"node", "role", "port", "ifname", "peer", "rx_packets", "rx_bytes", "tx_packets",
             "tx_bytes", "drops", "pipeline_drops", "rx_socket_drops", "priorities"}
FLOW_KEYS = {"flow_id", "src", "dst", "op", "bytes", "delivered_bytes", "intact", "complete",
             "fct_ns", "start_ns", "src_qpn", "dst_qpn", "udp_sport", "priority",
             "standalone_fct_ns", "fct_slowdown", "retransmitted_packets", "timeouts", "naks",
             "status", "failed", "failed_ns"}
PRIO_KEYS = {"priority", "tx_packets", "tx_bytes", "drops", "headroom_drops", "ecn_marks",
             "pause_tx", "pause_rx", "paused_ns", "max_depth_bytes"}


def agent_results(fct_fabric_ns: int) -> dict:
    return {
        "h1": {"send": [{"flow_id": 0, "complete": True, "fct_ns": fct_fabric_ns * D,
                         "post_unix_ns": 10**18, "complete_unix_ns": 10**18 + fct_fabric_ns * D}]},
        "h3": {"expect": [{"flow_id": 0, "complete": True, "intact": True,
                           "delivered_bytes": 40960}]},
    }


def summary_of(tmp_path, fct_fabric_ns=20_000):
    """The experiment and its summary, as summary.json has it."""
    exp = make_experiment()
    run_dir = make_run(tmp_path / "run")
    counters = {("leaf2", 1): {"rx_packets": 1, "tx_packets": 62, "enq_packets": 63}}
    return exp, build_summary(exp, "embedded", agent_results(fct_fabric_ns), counters, run_dir,
                              wall_s=2.5).as_dict()


def table(summary: dict) -> tuple[str, dict[str, str]]:
    """What ``render_summary`` shows: its title on one line, and {metric: value}."""
    from rich.console import Console
    console = Console(record=True, width=250)
    console.print(render_summary(summary))
    lines = console.export_text().splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    rows = dict((cell.strip() for cell in line.strip("│").split("│"))
                for line in lines if line.startswith("│"))
    return " ".join(line.strip() for line in lines[:top]), rows


def test_top_level_and_existing_keys_kept(tmp_path):
    exp, s = summary_of(tmp_path)
    assert s["summary_version"] == SUMMARY_VERSION == 6
    assert s["time"] == "dilated"          # never resolved (run_experiment called directly)
    assert s["dilation"] == D and s["fabric_ns"] == 20_000
    # leaf2 released 2 of its 68 frames 3 us (fabric) late, over 2 % of them: its
    # p99 is 3 us, beyond 2 hops (2 x (1102 B at 100 Gbps + 1 us) = 2.18 us)
    assert s["fell_behind"] is True and s["fidelity"]["behind"] == ["leaf2"]
    leaf2 = next(sw for sw in s["switches"] if sw["node"] == "leaf2")
    assert leaf2["released_frames"] == 68 and leaf2["hop_fabric_ns"] == 1090
    assert leaf2["max_lateness_fabric_ns"] == 3000
    assert 3000 <= leaf2["p99_lateness_fabric_ns"] <= 3000 * 9 / 8     # a bucket's top
    assert leaf2["late_fraction"] == round(2 / 68, 5)
    assert s["fidelity"]["worst_ratio"] == leaf2["ratio"] > 1
    assert all(set(p) == PORT_KEYS for p in s["ports"])
    assert all(set(f) == FLOW_KEYS for f in s["flows"])
    leaf2_1 = next(p for p in s["ports"] if p["node"] == "leaf2" and p["port"] == 1)
    assert leaf2_1["tx_packets"] == 62 and leaf2_1["drops"] == 1 and leaf2_1["peer"] == "h3"


def test_a_flow_whose_qp_failed_is_failed_with_its_status_and_time(tmp_path):
    """Flow 1 (h2 -> h3, from 1 us): its QP failed 750 us (fabric) after the post."""
    exp = make_experiment()
    results = agent_results(20_000)
    results["h2"] = {"send": [{"flow_id": 1, "complete": False, "status": "RETRY_EXC_ERR",
                               "fct_ns": None, "failed_after_ns": 750_000 * D,
                               "timeouts": 8}]}
    s = build_summary(exp, "embedded", results, {}, make_run(tmp_path / "run"),
                      wall_s=1.0).as_dict()
    ok, bad = s["flows"]
    assert (ok["complete"], ok["failed"], ok["failed_ns"]) == (True, False, None)
    assert (bad["complete"], bad["failed"], bad["status"]) == (False, True, "RETRY_EXC_ERR")
    assert bad["failed_ns"] == 1_000 + 750_000 and bad["fct_ns"] is None and bad["timeouts"] == 8


def test_the_table_says_what_the_summary_holds(tmp_path):
    """The title and each row, as a reader of ``fabric-emu run``/``show`` sees them."""
    _, s = summary_of(tmp_path)
    title, rows = table(s)
    assert title == ("unit on embedded: 1/2 flows complete, wall 2.5 s, fabric 20.0 µs "
                     "(dilation 1000), FELL BEHIND")
    assert rows["worst lateness / its limit (behind above 1)"] == \
        f"{s['fidelity']['worst_ratio']:.2f} (leaf2)"
    assert rows["bytes delivered"] == "40,960 of 61,440"          # flow 1 never arrived
    assert rows["FCT min / median / max (fabric µs)"] == "20.0 / 20.0 / 20.0"
    slowdown = s["flows"][0]["fct_slowdown"]
    assert rows["FCT slowdown median / max (vs alone)"] == f"{slowdown:.2f} / {slowdown:.2f}"
    assert rows["retransmitted packets / ACK timeouts / NAKs"] == "0 / 0 / 0"
    assert rows["switch drops (queue / pipeline)"] == "1 / 0"   # leaf2 port 1: 63 in, 62 out
    assert rows["ECN marks / PFC pauses sent / headroom drops"] == "1 / 2 / 0"
    assert rows["max queue depth (bytes)"] == "2,500"
    assert rows["packets via each spine"] == "spine1 0, spine2 0"
    assert "frames dropped at a socket, unread (emulator losses)" not in rows


def test_a_virtual_run_says_so_and_nothing_about_lateness(tmp_path):
    _, s = summary_of(tmp_path)
    s = s | {"time": "virtual", "dilation": 1.0, "fell_behind": False}
    title, rows = table(s)
    assert title.endswith("fabric 20.0 µs (virtual time)")
    assert rows["fidelity"] == "virtual time: nothing late by construction"
    assert not any("lateness" in metric for metric in rows)
    bmv2 = s | {"target": "bmv2"}
    assert table(bmv2)[1]["max queue depth (bytes)"] == "not measured on BMv2 (counters only)"


def test_frames_dropped_at_sockets_are_in_ports_nics_and_the_verdict(tmp_path):
    """A switch port's socket drops (its stats.json) and a NIC's (its
    result's NicStats) are summary counts and put the run behind, named by
    node and port; a port whose stats do not count them (BMv2) reads null."""
    exp = make_experiment()
    run_dir = make_run(tmp_path / "run")
    stats = json.loads((run_dir / "leaf2.stats.json").read_text())
    stats["ports"][0]["rx_socket_drops"] = 4224            # port 1: from h3
    stats["ports"][1]["rx_socket_drops"] = 0
    (run_dir / "leaf2.stats.json").write_text(json.dumps(stats))
    results = agent_results(20_000)
    results["h1"]["nic"] = {"tx_packets": 10, "rx_socket_drops": 7}
    s = build_summary(exp, "embedded", results, {}, run_dir, wall_s=2.5).as_dict()
    ports = {(p["node"], p["port"]): p for p in s["ports"]}
    assert ports[("leaf2", 1)]["rx_socket_drops"] == 4224
    assert ports[("leaf2", 3)]["rx_socket_drops"] == 0
    assert ports[("spine1", 2)]["rx_socket_drops"] is None       # its stats do not count them
    assert next(n for n in s["nics"] if n["node"] == "h1")["rx_socket_drops"] == 7
    assert s["socket_drops"] == [{"node": "leaf2", "port": 1, "rx_socket_drops": 4224},
                                 {"node": "h1", "port": 0, "rx_socket_drops": 7}]
    assert s["fell_behind"] and {"socket leaf2:1", "socket h1:0"} <= set(s["fidelity"]["behind"])
    assert table(s)[1]["frames dropped at a socket, unread (emulator losses)"] == \
        "leaf2:1 4,224, h1:0 7"


def test_ports_per_priority_from_stats(tmp_path):
    _, s = summary_of(tmp_path)
    ports = {(p["node"], p["port"]): p for p in s["ports"]}
    prios = ports[("leaf2", 1)]["priorities"]
    assert [q["priority"] for q in prios] == [3, 6]
    assert all(set(q) == PRIO_KEYS for q in prios)
    assert prios[0]["tx_packets"] == 60 and prios[0]["ecn_marks"] == 1
    assert prios[0]["max_depth_bytes"] == 2500
    assert [q["priority"] for q in ports[("leaf2", 3)]["priorities"]] == [0, 3]   # dict layout
    sp = ports[("spine1", 2)]["priorities"]
    assert sp[0]["pause_rx"] == 2
    assert sp[0]["paused_ns"] == 700          # 700 fabric ns: stats give wall ns (x D)
    assert sp[0]["ecn_marks"] == 0            # missing counters are 0
    assert ports[("leaf1", 1)]["priorities"] == []     # no stats for leaf1
    tot = priority_totals(s)
    assert tot["pause_tx"] == 2 and tot["ecn_marks"] == 1 and tot["max_depth_bytes"] == 2500


def test_flow_priority_and_slowdown(tmp_path):
    exp, s = summary_of(tmp_path, fct_fabric_ns=20_000)
    f0, f1 = s["flows"]
    ideal = standalone_fct_ns(exp, exp.flows[0])
    assert f0["priority"] == 3 and f0["standalone_fct_ns"] == ideal
    assert f0["fct_ns"] == 20_000
    assert f0["fct_slowdown"] == round(20_000 / ideal, 4)
    assert f1["fct_ns"] is None and f1["fct_slowdown"] is None and f1["standalone_fct_ns"] > 0


def test_flow_priority_follows_qos():
    assert flow_priority(make_experiment()) == 3
    assert flow_priority(make_experiment(qos={"roce_priority": 5})) == 5
    exp = make_experiment()

    def with_qos(qos):
        return replace(exp, spec=SimpleNamespace(qos=qos, nic=exp.spec.nic))

    assert flow_priority(with_qos(None)) == 3
    assert flow_priority(with_qos(SimpleNamespace(roce_priority=4))) == 4
    assert flow_priority(with_qos({"roce_dscp": 10, "dscp_to_priority": {10: 2}})) == 2


def test_a_workload_run_counts_its_collectives_and_the_whole_run_s_fabric_time(tmp_path):
    """A workload has no flows: the title says whether its collectives
    completed and how long the virtual-time run lasted, not "0/0 flows"."""
    _, s = summary_of(tmp_path)
    s = s | {"flows": [], "fabric_ns": 0, "time": "virtual", "dilation": 1.0,
             "fell_behind": False, "virtual_time": {"fabric_ns": 1_147_812},
             "collectives": {"complete": True, "results": []}}
    title, _ = table(s)
    assert title.startswith("unit on embedded: collectives complete, wall 2.5 s, "
                            "fabric 1147.8 µs in all (virtual time)")
    title, _ = table(s | {"collectives": {"complete": False, "results": []}})
    assert "collectives INCOMPLETE" in title
