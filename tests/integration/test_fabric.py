"""The demo fabric for real: Mininet namespaces, veths, embedded switches, P4Runtime, RoCE agents."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from emulator.experiment.model import experiment_from_dict, load_experiment
from emulator.experiment.runner import run_experiment
from emulator.net.fabric import FabricNet
from emulator.topo import load_fabric
from tests.conftest import FABRIC_EMU, REPO, run_cli, run_shipped
from tests.losses import assert_no_drops_no_retransmissions

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]


def test_every_host_reaches_every_other(tmp_path, target):
    fabric = load_fabric(REPO / "topologies/clos-2x2.yaml")
    with FabricNet(fabric, tmp_path, dilation=1000, target=target) as fnet:
        # ICMP crosses the P4 pipeline: LPM, ECMP, TTL, MAC rewrite.
        loss = fnet.net.pingAll(timeout="2")
        assert loss == 0
        out = fnet.host("h1").cmd("ping -c1 -W2 10.0.2.2")
        assert "ttl=61" in out, out   # 64 - leaf1 - spine - leaf2
        counters = fnet.controller.read_port_counters()
    # Every switch forwarded and counted: rx on every leaf host port.
    for sw in ("leaf1", "leaf2"):
        assert counters[(sw, 1)]["rx_packets"] > 0


def test_rdma_write_of_several_mb_arrives_intact(tmp_path, target):
    exp = experiment_from_dict({
        "name": "write-4mb", "topology": "../topologies/clos-2x2.yaml", "dilation": 5000, "target": target,
        "traffic": [{"src": "h1", "dst": "h4", "op": "write", "size_bytes": 4 * 1024 * 1024}],
        "limits": {"wall_s": 60},
    }, REPO / "experiments" / "inline.yaml")
    # lossy (no QoS): a run that fell behind bursts into the queues and
    # drops, so it is raised while behind, like a shipped experiment
    summary = run_shipped(exp, tmp_path)
    assert not summary["fell_behind"]
    (flow,) = summary["flows"]
    assert flow["complete"] and flow["intact"]
    assert flow["delivered_bytes"] == 4 * 1024 * 1024
    # At 100 Gbps, 4 MiB needs at least ~335 us of fabric time.
    assert flow["fct_ns"] >= 4 * 1024 * 1024 * 8 / 100
    assert sum(p["drops"] for p in summary["ports"]) == 0


def test_demo_flows_spread_over_both_spines(tmp_path, target):
    summary = run_shipped(load_experiment(REPO / "experiments/demo.yaml", target=target),
                                tmp_path)                # raised while the run falls behind
    assert summary["target"] == target and not summary["fell_behind"]
    assert summary["complete"], [f for f in summary["flows"] if not f["complete"]]
    assert all(f["delivered_bytes"] == f["bytes"] for f in summary["flows"])
    # No drops => no retransmissions: queueing is not taken for loss.
    assert_no_drops_no_retransmissions(summary, tmp_path)
    spine_tx = {}
    for p in summary["ports"]:
        if p["role"] == "spine":
            spine_tx[p["node"]] = spine_tx.get(p["node"], 0) + p["tx_packets"]
    total = sum(spine_tx.values())
    # 8 inter-leaf QPs hashed on their UDP source ports: neither spine idle.
    assert len(spine_tx) == 2 and min(spine_tx.values()) > 0.15 * total, spine_tx
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    for key in ("experiment", "target", "wall_s", "flows", "ports"):
        assert key in on_disk
    for key in ("src", "dst", "bytes", "delivered_bytes", "fct_ns", "complete"):
        assert key in on_disk["flows"][0]
    for key in ("node", "port", "tx_packets", "tx_bytes", "rx_packets", "drops"):
        assert key in on_disk["ports"][0]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_leaves_nothing(tmp_path, sig, target):
    # a fixed D: with 'auto' and no cached D, a first calibration would run
    # (quietly) before the fabric this test interrupts comes up; a high one,
    # so that the traffic lasts long after its first progress line
    proc = subprocess.Popen([*FABRIC_EMU, "run", "experiments/demo.yaml", "--out", str(tmp_path),
                             "--target", target, "--dilation", "40000"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            # as a background job of a shell without job control
                            # (make, CI) starts it: SIGINT ignored, inherited
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + 60
    seen = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen += line
        if not line and proc.poll() is not None:
            pytest.fail(f"the run ended before it could be interrupted: {seen}")
        if "flows delivered" in line and "agents running 0/" not in line:
            break             # traffic is flowing
    else:
        proc.kill()
        proc.wait(timeout=30)
        time.sleep(3)         # the lifeline takes the fabric down within 2 s
        pytest.fail(f"traffic never flowed: {seen}")
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "torn down" in out or "interrupted" in out, out


@pytest.mark.parametrize("dilation", [[], ["--dilation", "12000"]])
def test_cli_brings_the_fabric_up_and_prints_a_p4runtime_shell_line_per_switch(tmp_path, dilation):
    """`fabric-emu cli` (Mininet's CLI; here its stdin says `exit`): up at the
    cached D for `auto` (else the fallback) or the one asked for; one line
    per switch with its device id and gRPC address; nothing left after."""
    r = run_cli("cli", "experiments/demo.yaml", "--out", tmp_path / "out", *dilation, input="exit\n",
                env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"up at dilation {dilation[1] if dilation else 10000}" in r.stderr
    lines = [x for x in r.stderr.splitlines() if "python3 -m p4runtime_sh" in x]
    assert [x.split()[0] for x in lines] == ["leaf1", "leaf2", "spine1", "spine2"]
    assert all("--grpc-addr 127.0.0.1:" in x and "--device-id" in x for x in lines)
