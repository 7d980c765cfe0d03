"""gNMI on live embedded switches: a run's telemetry.csv (virtual time, a
link down and up), a client of the generated stubs while the run goes, and
Get against a live fabric's counters."""
from __future__ import annotations

import csv
import json
import threading
import time
from collections import defaultdict
from pathlib import Path

import grpc
import pytest
from gnmi import gnmi_pb2 as pb
from gnmi import gnmi_pb2_grpc as pb_grpc

import emulator as fe
from emulator.dataplane.gnmi_server.encode import decode_value
from emulator.dataplane.gnmi_server.paths import format_path, parse_path
from emulator.rundir import RawDir
from tests.conftest import REPO

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]
TOPOLOGY = REPO / "topologies" / "clos-2x2.yaml"
SAMPLE_NS = 10_000
EXPERIMENT = {
    "name": "gnmi", "topology": str(TOPOLOGY), "time": "virtual",
    "switch": {"buffer_bytes": 1_000_000},
    "traffic": [{"src": "h1", "dst": "h3", "size_bytes": 200_000},
                {"src": "h2", "dst": "h3", "size_bytes": 200_000}],
    # spine2 -> leaf2 down over [5, 15) us: spine2-eth2 sends on it, leaf2-eth4 receives
    "faults": [{"kind": "link_down", "at_us": 5, "link": "leaf2:spine2", "direction": "b_to_a"},
               {"kind": "link_up", "at_us": 15, "link": "leaf2:spine2", "direction": "b_to_a"}],
    "telemetry": {"sample_us": SAMPLE_NS / 1000},
}
IF_LEAVES = {"in-pkts": "rx_packets", "in-octets": "rx_bytes", "out-pkts": "tx_packets",
             "out-octets": "tx_bytes", "in-discards": "pipeline_drops", "out-discards": "drops"}
Q_LEAVES = {"transmit-pkts": "tx_packets", "transmit-octets": "tx_bytes", "dropped-pkts": "drops",
            "fabric-emu/ecn-marked-pkts": "ecn_marks", "fabric-emu/pfc-pause-sent": "pause_tx",
            "fabric-emu/pfc-pause-received": "pause_rx", "fabric-emu/pfc-paused-ns": "paused_ns",
            "fabric-emu/max-depth-octets": "max_depth_bytes",
            "fabric-emu/headroom-dropped-pkts": "headroom_drops"}


def _run(out: Path, **change) -> dict:
    from emulator.experiment.dilation import run_with_dilation
    from emulator.experiment.model import experiment_from_dict
    return run_with_dilation(experiment_from_dict({**json.loads(json.dumps(EXPERIMENT)), **change},
                                                  out.parent / "gnmi.yaml"), out, plots=False)


def _client(run_dir: Path, stop: threading.Event, seen: dict) -> None:
    """Each switch's gNMI server, found in RUN/<sw>.switch.json, asked while the run goes."""
    while not stop.is_set() and len(seen) < 4:
        for cfg in sorted(run_dir.glob("*.switch.json")):
            name = cfg.name.split(".")[0]
            listen = json.loads(cfg.read_text()).get("gnmi_listen")
            if name in seen or not listen:
                continue
            try:
                with grpc.insecure_channel(listen) as ch:
                    stub = pb_grpc.gNMIStub(ch)
                    caps = stub.Capabilities(pb.CapabilityRequest(), timeout=5)
                    get = stub.Get(pb.GetRequest(path=[parse_path("/interfaces/interface/state")],
                                                 encoding=pb.JSON_IETF), timeout=5)
                    try:
                        stub.Get(pb.GetRequest(path=[parse_path("/nonexistent")],
                                               encoding=pb.PROTO), timeout=5)
                        bad = None
                    except grpc.RpcError as e:
                        bad = (e.code(), e.details())
                seen[name] = (caps.gNMI_version, len(get.notification[0].update), bad)
            except grpc.RpcError:       # not listening yet
                pass
        time.sleep(0.01)


@pytest.fixture(scope="module")
def first(tmp_path_factory) -> tuple[dict, Path, dict]:
    out = tmp_path_factory.mktemp("gnmi") / "out"
    stop, seen = threading.Event(), {}
    client = threading.Thread(target=_client, args=(out / "run", stop, seen), daemon=True)
    client.start()
    try:
        summary = _run(out)
    finally:
        stop.set()
        client.join(10)
    return summary, out, seen


def _last_values(path: Path) -> tuple[dict, list]:
    last, rows = {}, []
    with path.open() as f:
        r = csv.reader(f)
        assert next(r) == ["fabric_ns", "switch", "path", "value"]
        for t, sw, p, v in r:
            rows.append((int(t), sw, p, v))
            last[(sw, p)] = v
    return last, rows


def test_telemetry_ends_with_the_summarys_counters_port_by_port_and_queue_by_queue(first):
    s, out, _ = first
    assert s["complete"] and s["time"] == "virtual"
    last, rows = _last_values(out / "telemetry.csv")
    checked = 0
    for port in s["ports"]:
        sw, ifname = port["node"], port["ifname"]
        for leaf, key in IF_LEAVES.items():
            assert int(last[(sw, f"/interfaces/interface[name={ifname}]/state/counters/{leaf}")]) \
                == port[key], (sw, ifname, leaf)
        for q in port["priorities"]:
            base = (f"/qos/interfaces/interface[interface-id={ifname}]/output/queues/"
                    f"queue[name={q['priority']}]/state/")
            for leaf, key in Q_LEAVES.items():
                assert int(last[(sw, base + leaf)]) == q[key], (sw, ifname, q["priority"], leaf)
                checked += 1
    assert checked == 12 * 8 * len(Q_LEAVES)
    assert sum(p["tx_packets"] for p in s["ports"]) > 0
    # samples on the grid, but each switch's last (as it stopped)
    times = defaultdict(list)
    for t, sw, p, _ in rows:
        if not p.endswith("oper-status"):
            times[sw].append(t)
    for sw, ts in times.items():
        grid = sorted(set(ts))
        assert all(t % SAMPLE_NS == 0 for t in grid[:-1]), sw
        assert grid[:3] == [0, SAMPLE_NS, 2 * SAMPLE_NS]


def test_oper_status_changes_at_the_local_and_remote_faults_exact_times_on_both_ends(first):
    _, out, _ = first
    _, rows = _last_values(out / "telemetry.csv")
    changes = [(t, sw, p.split("[name=")[1].split("]")[0], v) for t, sw, p, v in rows
               if p.endswith("oper-status") and t > 0]
    # IEEE 802.3 link fault signalling (docs/faults.md): leaf2 loses the signal a
    # link delay (1 us) after spine2's sending end went down, and spine2 hears
    # leaf2's remote fault a delay after that; each comes back as late
    assert changes == [(6000, "leaf2", "leaf2-eth4", "DOWN"), (7000, "spine2", "spine2-eth2", "DOWN"),
                       (16000, "leaf2", "leaf2-eth4", "UP"), (17000, "spine2", "spine2-eth2", "UP")]


def test_a_client_of_the_generated_stubs_reads_every_switch_while_the_run_goes(first):
    s, out, seen = first
    assert sorted(seen) == ["leaf1", "leaf2", "spine1", "spine2"]
    for name, (version, updates, bad) in seen.items():
        ports = 4 if name.startswith("leaf") else 2
        assert version == "0.10.0" and updates == ports * 7, name     # oper-status + 6 counters
        assert bad[0] == grpc.StatusCode.NOT_FOUND and "unknown path /nonexistent" in bad[1]
        stats = json.loads((out / "run" / f"{name}.stats.json").read_text())["gnmi"]
        assert stats["errors"] == {"NOT_FOUND": 1} and stats["requests"]["Subscribe"] == 1


def test_a_rerun_with_a_process_per_switch_writes_the_same_telemetry(first, tmp_path):
    _, out, _ = first          # the first: clos-2x2's four switches in one process
    _run(tmp_path / "again", switch={"buffer_bytes": 1_000_000, "per_process": 1})
    assert (tmp_path / "again" / "telemetry.csv").read_bytes() == (out / "telemetry.csv").read_bytes()


def _counters(address: str) -> dict:
    with grpc.insecure_channel(address) as ch:
        resp = pb_grpc.gNMIStub(ch).Get(pb.GetRequest(
            path=[parse_path("/interfaces/interface/state/counters")], encoding=pb.PROTO), timeout=10)
    return {format_path(u.path): decode_value(u.val) for u in resp.notification[0].update}


def test_get_on_a_live_fabric_counts_what_a_run_summarised():
    with fe.Fabric(TOPOLOGY, dilation=10000) as fab:
        cfg = json.loads(RawDir(fab.run_dir).switch_config("leaf1").read_text())
        before = _counters(cfg["gnmi_listen"])
        res = fab.run([{"src": "h1", "dst": "h3", "size_bytes": 50_000}], quiet=True, plots=False)
        after = _counters(cfg["gnmi_listen"])
    assert res.complete
    for port in res.summary["ports"]:
        if port["node"] != "leaf1":
            continue
        for leaf in ("in-pkts", "in-octets", "out-pkts", "out-octets"):
            path = f"/interfaces/interface[name={port['ifname']}]/state/counters/{leaf}"
            assert after[path] - before[path] == port[IF_LEAVES[leaf]], path
    assert sum(p["rx_packets"] for p in res.summary["ports"] if p["node"] == "leaf1") > 0


def test_a_telemetry_path_no_switch_serves_is_one_line_and_exit_2_before_anything(tmp_path):
    from tests.conftest import run_cli
    exp = tmp_path / "bad.yaml"
    exp.write_text(json.dumps({**EXPERIMENT, "telemetry": {"sample_us": 10,
                                                           "paths": ["/qos", "/interfaces/bogus"]}}))
    done = run_cli("run", exp, "--out", tmp_path / "out")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"fabric-emu: {exp}: telemetry.paths: /interfaces/bogus selects no leaf of any switch "
        "(the leaves: docs/telemetry.md)"]
    assert not (tmp_path / "out").exists()
