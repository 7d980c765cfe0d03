"""Virtual time end to end (``emulator.vtime``, docs/virtual-time.md): a
rerun of incast-pfc is the same run -- summary.json but for its wall-time
fields, every CSV, every pcap byte for byte -- and stays the same with one
core kept busy and a client reading every counter of every switch over
P4Runtime in a loop while it runs. Its last FCT is its analytic value:
five 512 KiB flows, one after the other through h1's link."""
from __future__ import annotations

import json
import multiprocessing
import threading
import time
from pathlib import Path

import pytest

from emulator.experiment.ideal_fct import frame_sizes
from emulator.experiment.model import experiment_from_dict, read_experiment_data
from tests.conftest import REPO, run_incast_pfc_virtual
from tests.reruns import without_wall

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]
COUNTERS = ("FabricIngress.rx_port_counter", "FabricIngress.enq_port_counter",
            "FabricIngress.enq_prio_counter", "FabricIngress.pfc_rx_counter",
            "FabricEgress.tx_port_counter", "FabricEgress.tx_prio_counter",
            "FabricEgress.ecn_mark_counter", "FabricEgress.pfc_tx_counter")


def _files(out: Path) -> dict[str, bytes]:
    names = [p for p in out.rglob("*") if p.suffix in (".csv", ".pcap", ".pcapng")]
    return {str(p.relative_to(out)): p.read_bytes() for p in names}


@pytest.fixture(scope="module")
def first(incast_pfc_virtual) -> tuple[dict, Path]:
    return incast_pfc_virtual            # test_lossless asserts on it too


def test_incast_pfc_in_virtual_time_is_exact(first):
    s, out = first
    assert s["time"] == "virtual" and s["complete"] and not s["fell_behind"]
    assert s["fidelity"]["rule"] == "virtual"
    vt = s["virtual_time"]
    assert vt["windows"] > 0 and vt["early_frames"] == 0 and vt["foreign_frames"] == 0
    # lossless: nothing dropped, nothing resent; PFC paused the senders
    assert sum(p["drops"] for p in s["ports"]) == 0
    assert all(f["retransmitted_packets"] == 0 for f in s["flows"])
    assert sum(q["pause_tx"] for p in s["ports"] for q in p["priorities"]) > 0
    # The last flow ends when h1's link has carried all five: the slowest
    # flow alone, plus the other four flows' frames at that link's rate.
    exp = experiment_from_dict(read_experiment_data(REPO / "experiments" / "incast-pfc.yaml"),
                               REPO / "experiments" / "incast-pfc.yaml")
    n, a, b, c = frame_sizes(524288, exp.spec.nic.mtu_bytes)
    flow_wire_bytes = a + b * (n - 2) + c
    rate = exp.fabric.links[exp.fabric.port("h1", 0).link_index].rate_bps
    analytic = max(f["standalone_fct_ns"] for f in s["flows"]) + 4 * flow_wire_bytes * 8e9 / rate
    last = max(f["fct_ns"] for f in s["flows"])
    assert abs(last - analytic) / analytic < 0.01, (last, analytic)
    assert (out / "pcap" / "leaf1-eth1.pcap").stat().st_size > 0


def _busy(stop) -> None:
    while not stop.is_set():
        pass


def _monitor(run_dir: Path, stop: threading.Event, reads: list) -> None:
    """Every counter of every switch, over P4Runtime (a backup client), again and again."""
    from emulator.control.p4rt_client import SwitchConnection
    clients: dict[str, SwitchConnection] = {}
    try:
        while not stop.is_set():
            for cfg in sorted(run_dir.glob("*.switch.json")):
                if cfg.name in clients:
                    continue
                c = json.loads(cfg.read_text())
                try:          # its server may not listen yet
                    clients[cfg.name] = SwitchConnection(f"127.0.0.1:{c['grpc_port']}",
                                                         c["device_id"], election_id=(0, 7),
                                                         require_primary=False)
                except Exception:
                    pass
            for client in list(clients.values()):
                for name in COUNTERS:
                    try:
                        reads.append(len(client.read_counter(name)))
                    except Exception:           # the switch went at the end of the run
                        pass
            time.sleep(0.001)
    finally:
        for client in clients.values():
            client.close()


def test_a_rerun_is_the_same_run_with_a_busy_core_and_a_counter_reader(first, tmp_path):
    s1, out1 = first
    out2 = tmp_path / "second"
    stop = multiprocessing.Event()
    hog = multiprocessing.Process(target=_busy, args=(stop,), daemon=True)
    hog.start()
    tstop, reads = threading.Event(), []
    reader = threading.Thread(target=_monitor, args=(out2 / "run", tstop, reads), daemon=True)
    reader.start()
    try:
        s2 = run_incast_pfc_virtual(out2)
    finally:
        stop.set()
        tstop.set()
        hog.join(10)
        reader.join(10)
    assert reads, "the monitoring client read nothing while the run went"
    assert without_wall(s2) == without_wall(s1)
    f1, f2 = _files(out1), _files(out2)
    assert sorted(f1) == sorted(f2) and any(n.endswith(".pcap") for n in f1)
    for name in f1:
        assert f1[name] == f2[name], name
