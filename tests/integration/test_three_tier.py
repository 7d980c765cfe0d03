"""A three-tier fabric end to end: pods joined by super spines
(``topologies/pods-2x2x2.yaml``) carrying ``experiments/pods-incast.yaml``."""
from __future__ import annotations

import pytest

from tests.integration.test_lossless import _prio, _ports, _run
from tests.losses import assert_no_drops_no_retransmissions

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]


def test_an_incast_across_pods_is_lossless_and_pauses_climb_the_tiers(tmp_path, target):
    s = _run("pods-incast", tmp_path, target)
    assert s["complete"] and all(f["intact"] for f in s["flows"]), s["flows"]
    assert sum(p["drops"] for p in s["ports"]) == 0
    assert_no_drops_no_retransmissions(s, tmp_path)
    # The four cross-pod flows' data (512 packets each) crossed the super spines.
    supers = [p for p in s["ports"] if p["role"] == "superspine"]
    assert sum(p["tx_packets"] for p in supers) >= 4 * 512
    if target == "embedded":   # BMv2 relays pauses to the senders (docs/explanation/switch-pipeline.md)
        # leaf1's congestion paused pod 1's spines, which paused a super spine,
        # which paused pod 2's spines: PFC crossed the third tier both ways.
        assert sum(_prio(p)["pause_tx"] for p in _ports(s) if p["role"] == "spine"
                   and p["peer"].startswith("super")) > 0
        assert sum(_prio(p)["pause_tx"] for p in supers) > 0
        assert sum(_prio(p)["paused_ns"] for p in _ports(s) if p["role"] == "superspine") > 0
