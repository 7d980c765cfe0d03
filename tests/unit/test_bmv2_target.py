"""The BMv2 target's conversions and configuration (no BMv2 needed)."""
from __future__ import annotations

import pytest

from emulator.control.qos import (
    PFC_SESSION_BASE, PfcSpec, QosSpec, clone_sessions, pause_quanta, pfc_port_params, qos_entities,
)
from emulator.net.bmv2 import LOSSLESS_DEPTH_FACTOR, queue_commands, queue_depth_packets, queue_rate_pps
from emulator.p4.p4info import P4Info
from emulator.topo import load_fabric
from tests.conftest import REPO

FABRIC = load_fabric(REPO / "topologies/clos-2x2.yaml")


def test_queue_rate_is_the_link_rate_in_mtu_frames_per_second():
    # 100 Gb/s at D=10000 is 10 Mb/s; a 1024-byte MTU RoCE frame is 1098 bytes + 24 on the wire.
    assert queue_rate_pps(10_000_000, 1098) == round(10_000_000 / (1122 * 8))
    assert queue_rate_pps(1, 1098) == 1          # never 0: BMv2 reads 0 as "unlimited"
    assert queue_depth_packets(300_000, 1098) == 273


def test_queue_commands_cover_every_port_and_priority_lossless_deeper():
    cmds = queue_commands({1: (10_000_000, 0), 2: (5_000_000, 0)}, 1098, 300_000, lossless_priorities=(3,))
    assert len(cmds) == 2 * 8 * 2
    assert "set_queue_rate 1114 1 0" in cmds and "set_queue_rate 557 2 7" in cmds
    assert "set_queue_depth 273 2 0" in cmds
    assert f"set_queue_depth {273 * LOSSLESS_DEPTH_FACTOR} 1 3" in cmds
    assert all(not c.startswith("set_queue_depth") or c.split()[1] == "273"
               for c in cmds if not c.endswith(" 3"))


def test_pause_quanta_and_port_params():
    # 20 us at 100 Gb/s = 2e6 bits = 3906 quanta of 512 bits; capped at 0xFFFF.
    assert pause_quanta(100_000_000_000, 20_000) == 3906
    assert pause_quanta(100_000_000_000, 10_000_000) == 0xFFFF
    p = pfc_port_params(100_000_000_000, PfcSpec(pause_us=20.0), dilation=4000)
    assert p["pause_quanta"] == 3906
    assert p["refresh_us"] == 40_000               # half the pause, in wall us (x D)
    # A quantum at 25 Mb/s (100 Gb/s / 4000) lasts 20.48 us: 20972 in 1/1024 us.
    assert p["quantum_us_q10"] == round(20.48 * 1024)


def test_qos_entities_add_pause_sessions_and_pfc_port_only_with_pfc():
    p4 = P4Info.load()
    with_pfc = qos_entities(FABRIC, p4, "leaf1", QosSpec(), 1024, 0, dilation=1000)
    sessions = [e for e in with_pfc if type(e).__name__ == "PacketReplicationEngineEntry"]
    ports = [p.port_no for p in FABRIC.ports("leaf1")]
    assert [s.clone_session_entry.session_id for s in sessions] == [PFC_SESSION_BASE + p for p in ports]
    assert all(s.clone_session_entry.replicas[0].egress_port == p for s, p in zip(sessions, ports))
    pfc_port_id = p4.table_id("pfc_port")
    assert sum(1 for e in with_pfc if getattr(e, "table_id", None) == pfc_port_id) == len(ports)
    without = qos_entities(FABRIC, p4, "leaf1", QosSpec(pfc=PfcSpec(enabled=False)), 1024, 0)
    assert not any(type(e).__name__ == "PacketReplicationEngineEntry" for e in without)
    assert not any(getattr(e, "table_id", None) == pfc_port_id for e in without)
    assert clone_sessions(FABRIC, "spine1")[0].clone_session_entry.session_id == PFC_SESSION_BASE + 1


def test_pause_us_is_validated():
    with pytest.raises(Exception):
        PfcSpec(pause_us=0)


def test_p4_counter_stats_feed_the_summary_layout(tmp_path):
    """On BMv2 the per-(port, priority) results come from fabric.p4's counters:
    drops are what ingress enqueued minus what egress sent."""
    from emulator.experiment.results_io import read_stats, stats_by_port_priority
    from emulator.experiment.switch_stats import write_p4_counter_stats

    class Counters:               # the two things write_p4_counter_stats reads of a controller
        conns = {"leaf1": None, "spine1": None}

        @staticmethod
        def read_priority_counters():
            return {("leaf1", 1, 3): {"enq_packets": 10, "tx_packets": 7, "tx_bytes": 7000,
                                      "ecn_mark_packets": 2, "pause_tx_packets": 4},
                    ("leaf1", 2, 3): {"pause_rx_packets": 5}}

    write_p4_counter_stats(Counters, tmp_path)
    leaf = stats_by_port_priority(read_stats(tmp_path / "leaf1.stats.json"))
    assert leaf[(1, 3)] == {"tx_packets": 7, "tx_bytes": 7000, "drops": 3, "ecn_marks": 2,
                            "pause_tx": 4, "pause_rx": 0, "headroom_drops": 0,
                            "paused_ns": None, "max_depth_bytes": None}
    assert leaf[(2, 3)]["pause_rx"] == 5 and leaf[(2, 3)]["drops"] == 0
    assert stats_by_port_priority(read_stats(tmp_path / "spine1.stats.json")) == {}
