"""HPCC on the fabric, end to end (Mininet, switch processes, P4Runtime,
host agents): fabric.p4 writes INT records into the data packets, the
receivers echo them, the senders' HPCC keeps the queue near zero."""
from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

import pytest

from emulator.experiment.model import load_experiment
from tests.conftest import REPO, run_shipped
from tests.losses import assert_no_drops_no_retransmissions

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]


def _csv(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_incast_under_hpcc_keeps_the_queue_near_zero(tmp_path, target):
    exp = load_experiment(REPO / "experiments" / "incast-hpcc.yaml", target=target)
    s = run_shipped(exp, tmp_path, pcap=True)
    assert not s["fell_behind"], s["dilation"]
    assert s["complete"] and all(f["intact"] for f in s["flows"])
    assert_no_drops_no_retransmissions(s, tmp_path)
    # HPCC's point: after the first RTT the senders hold the bottleneck's queue
    # near empty (DCQCN's twin keeps ~130 KB at p95: docs/explanation/numbers.md)
    q = s["queue_depth_dist"]
    if q is not None:                          # the embedded switches sample their queues
        assert q["p95_bytes"] <= 20_000, q
    # every sender heard back from every switch on its path: one record per
    # switch, written by the egress port its data took, at that link's rate
    rows = _csv(tmp_path / "int_hops.csv")
    assert {r["host"] for r in rows} == {f["src"] for f in s["flows"]}
    fabric = exp.fabric
    for r in rows:
        port = fabric.port(r["node"], int(r["port"]))
        assert float(r["rate_gbps"]) == fabric.links[port.link_index].rate_bps / 1e9
    hops = {(r["host"], int(r["hop"])) for r in rows}
    assert ("h2", 0) in hops and ("h2", 1) not in hops        # same leaf as h1: one switch
    assert {("h4", 0), ("h4", 1), ("h4", 2)} <= hops          # leaf, spine, leaf
    # and Wireshark reads the stacks in the capture (records, then RoCEv2)
    if shutil.which("tshark"):
        # leaf1's port to h1 (BMv2 writes what it sends apart: _out)
        pcap = next(p for p in (tmp_path / "pcap" / "leaf1-eth1.pcap",
                                tmp_path / "pcap" / "leaf1-eth1_out.pcap") if p.exists())
        out = subprocess.run(
            ["tshark", "-X", f"lua_script:{REPO / 'emulator' / 'wireshark' / 'int_hpcc.lua'}",
             "-r", str(pcap), "-Y", "int.kind == 1", "-T", "fields", "-e", "int.hop_count",
             "-e", "infiniband.bth.opcode"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        lines = [ln.split("\t") for ln in out.stdout.splitlines() if ln]
        assert lines and all(int(c) >= 1 for c, _ in lines)     # leaf1 wrote its record
