"""An MTU of 2048 or 4096 bytes (``nic.mtu_bytes``, as RoCE NICs offer)
makes frames larger than a veth's 1500-byte MTU: the fabric's interfaces
take jumbo frames (``FabricNet._jumbo_frames``) and the run completes."""
from __future__ import annotations

import json

import pytest

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]


def test_a_4096_byte_mtu_runs_on_jumbo_frames(tmp_path):
    out = tmp_path / "out"
    r = run_cli("run", REPO / "experiments" / "demo.yaml", "--out", out,
                "--set", "nic.mtu_bytes=4096", "--no-plots")
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["complete"] and all(f["complete"] and f["intact"] for f in s["flows"])
    assert sum(p["drops"] for p in s["ports"]) == 0
    # frames of over 1514 bytes crossed the fabric: a data frame carries 4096 bytes
    busiest = max(s["ports"], key=lambda p: p["tx_bytes"])
    assert busiest["tx_bytes"] / busiest["tx_packets"] > 1514, busiest
    # --no-plots: the results but no figure, nor report.html
    assert (out / "queue_depth.csv").exists() and (out / "flow_rate.csv").exists()
    assert not list(out.rglob("*.png")) and not (out / "report.html").exists()
