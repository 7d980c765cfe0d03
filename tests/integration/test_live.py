"""``emulator.Fabric``: a live fabric from Python -- hosts, P4Runtime reads and
writes between runs, teardown on exceptions -- and ``emulator.run``'s Result."""
from __future__ import annotations

import pytest

import emulator as fe
from emulator.pytest_plugin import leftovers
from tests.conftest import REPO

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]
TOPOLOGY = REPO / "topologies" / "clos-2x2.yaml"
INCAST = REPO / "experiments" / "incast-pfc.yaml"


def _kmin(fab, switch="leaf1") -> set[int]:
    """The kmin_bytes of every ecn_config entry of a switch (its first action parameter)."""
    return {int.from_bytes(e.action.action.params[0].value, "big")
            for e in fab.table_entries(switch, "ecn_config")}


def test_a_topology_file_comes_up_routed_and_reads_over_p4runtime(target):
    with fe.Fabric(TOPOLOGY, target=target, dilation=10000) as fab:
        before = fab.port_counters()[("leaf1", 1)]["rx_packets"]
        assert fab.ping("h1", "h4")
        assert fab.port_counters()[("leaf1", 1)]["rx_packets"] > before
        assert len(fab.table_entries("leaf1", "ipv4_lpm")) == 3      # as `topo show` says
        assert "10.0.1.1" in fab.cmd("h1", "ip -4 -br addr")


def test_qos_changes_over_p4runtime_between_runs(target):
    with fe.Fabric(INCAST, target=target, dilation=10000) as fab:
        assert _kmin(fab) == set()                                   # incast-pfc: ECN off
        fab.set_qos({"ecn": {"enabled": True, "kmin_bytes": 20_000}})
        assert _kmin(fab) == {20_000}
        fab.set_qos({"ecn": {"kmin_bytes": 40_000}})                  # modified in place
        assert _kmin(fab) == {40_000}
        with pytest.raises(ValueError, match="pfc.enabled"):
            fab.set_qos({"pfc": {"enabled": False}})


def test_an_exception_inside_tears_the_fabric_down():
    with pytest.raises(ZeroDivisionError):
        with fe.Fabric(TOPOLOGY, dilation=10000):
            assert leftovers()["interfaces"]
            1 / 0
    assert leftovers() == {"interfaces": [], "processes": []}


def test_run_returns_a_typed_result(tmp_path):
    res = fe.run(fe.load_experiment(INCAST, set={"traffic[0].size_bytes": 65536,
                                                 "hpcc.dport": 100}),
                 tmp_path, dilation=4000, quiet=True, plots=False)
    assert res.complete and res.summary["experiment"] == "incast-pfc"
    assert len(res.flows) == 5 and res.flows[0].bytes == 65536
    assert res.lossless_priorities == [3]
    assert res.lossless_drops() == res.drops(priority=3)
    assert res.pauses(node="leaf1") == sum(
        q["pause_tx"] for p in res.summary["ports"] if p["node"] == "leaf1"
        for q in p["priorities"])
    assert res.fct_us(100) == max(f.fct_us for f in res.flows)
    assert fe.Result.load(tmp_path).summary == res.summary
    # HPCC's fct_analysis.py keeps dport 100: every completed flow is there
    fct = [line.split() for line in (tmp_path / "fct.txt").read_text().splitlines()]
    assert len(fct) == 5 and {f[3] for f in fct} == {"100"}


def _incast(senders, size=131_072):
    return [{"src": f"h{i}", "dst": "h1", "size_bytes": size} for i in senders]


def test_traffic_runs_one_after_another_on_a_live_fabric(target, tmp_path):
    """Two runs on one fabric, a QoS change between them over P4Runtime: each
    run's summary counts its own traffic only (counter differences)."""
    with fe.Fabric(INCAST, target=target, dilation=16000, out=tmp_path) as fab:
        first = fab.run(_incast(range(2, 7)), quiet=True, plots=False)   # 5-to-1, PFC, no ECN
        assert first.complete and not first.fell_behind, first
        assert first.lossless_drops() == 0 and first.retransmissions() == 0
        assert first.pauses(node="leaf1") > 0 and first.ecn_marks() == 0
        fab.set_qos({"ecn": {"enabled": True, "kmin_bytes": 5000, "kmax_bytes": 20000,
                             "pmax": 1.0}})
        second = fab.run(_incast(range(2, 4)), quiet=True)          # 2-to-1, ECN on
        assert second.complete and not second.fell_behind, second
        assert second.ecn_marks(node="leaf1") > 0
        (to_h1,) = [p for p in second.summary["ports"] if p["node"] == "leaf1" and p["peer"] == "h1"]
        data_packets = 2 * 131_072 // 1024
        assert data_packets <= to_h1["tx_packets"] < 1.2 * data_packets   # not the first run's
        assert (tmp_path / "traffic-2" / "summary.json").exists()
        # a live run draws its figures as a run does, unless asked not to
        pngs = list((tmp_path / "traffic-2").glob("*.png"))
        assert pngs and all(p.read_bytes()[:4] == b"\x89PNG" for p in pngs)
        assert not list((tmp_path / "traffic-1").glob("*.png"))
    if target == "embedded":
        _switch_stats_are_each_runs_own(first, tmp_path / "traffic-1")
        _switch_stats_are_each_runs_own(second, tmp_path / "traffic-2")
        assert first.summary["switches"][0]["p99_lateness_fabric_ns"] is not None
        assert sum(q["paused_ns"] for p in first.summary["ports"] for q in p["priorities"]) > 0


def _switch_stats_are_each_runs_own(res, out) -> None:
    """The embedded switches' own per-queue counters (their stats window)
    agree exactly with fabric.p4's counters read as differences around the
    same run, and the run's raw event log holds exactly its pauses."""
    for p in res.summary["ports"]:
        assert sum(q["tx_packets"] for q in p["priorities"]) == p["tx_packets"], p
    for sw in ("leaf1", "spine1", "spine2"):
        rows = (out / "run" / f"{sw}.events.csv").read_text().splitlines()[1:]
        logged = sum(1 for r in rows if r.split(",")[3] == "pause_tx")
        assert logged == res.pauses(node=sw), sw


def test_another_client_taking_primary_is_one_line_and_undone_only_on_request(target, caplog):
    """A P4Runtime client with a higher election id (p4runtime-shell, say)
    takes leaf1: the controller says so in one line naming its id, set_qos
    is refused in one line, and the controller is primary again only after
    take_primary()."""
    import logging
    import time

    from emulator.control.p4rt_client import NotPrimaryError, SwitchConnection
    caplog.set_level(logging.WARNING)
    with fe.Fabric(INCAST, target=target, dilation=10000) as fab:
        conn = fab.controller.conns["leaf1"]
        with SwitchConnection(conn.address, conn.device_id, (1, 2), timeout=10):
            for _ in range(300):                       # the advisory reaches the controller
                if conn.lost_to is not None:
                    break
                time.sleep(0.01)
            with pytest.raises(NotPrimaryError) as e:
                fab.set_qos({"ecn": {"enabled": True, "kmin_bytes": 20_000}})
            assert "\n" not in str(e.value) and "leaf1" in str(e.value)
            assert "lost primary to election id 1,2 (ours: 1,1)" in str(e.value)
            assert not conn.is_primary                                  # not taken back
        warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warned) == 1 and warned[0].startswith("leaf1 (") and "election id 1,2" in warned[0]
        assert _kmin(fab) == set()                                      # nothing written
        # The other client gone: P4Runtime (spec 5.4) leaves the switch without a
        # primary until an id at least the highest seen arbitrates -- the embedded
        # server; BMv2's PI (v0.1.2, proto/docs/arbitration.md) makes the highest
        # client still connected its primary again, and tells it so.
        if target == "bmv2":
            for _ in range(300):
                if conn.is_primary:
                    break
                time.sleep(0.01)
        assert conn.is_primary == (target == "bmv2")
        # what take_primary re-took, with the id it took it with (none on BMv2: it is primary)
        assert fab.take_primary() == ({} if target == "bmv2" else {"leaf1": (1 << 64) + 3})
        fab.set_qos({"ecn": {"enabled": True, "kmin_bytes": 20_000}})
        assert _kmin(fab) == {20_000}
