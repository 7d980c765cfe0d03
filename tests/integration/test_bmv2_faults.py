"""Link faults on the BMv2 target (docs/faults.md, "On BMv2"): h1's link goes
down 50 us into a WRITE to h3 and is back at 550 us (fabric time, dilated):
its veth pair is set down and up in its namespaces, the frames sent
meanwhile are lost, and go-back-N brings them after. Skips where BMv2 is not
installed (the embedded target runs the same faults in virtual time:
tests/integration/test_faults.py)."""
from __future__ import annotations

import pytest

from emulator.experiment.dilation import run_with_dilation
from emulator.experiment.model import experiment_from_dict
from tests.conftest import REPO

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]


def _write_under_faults(tmp_path_factory, name: str, faults: list[dict], **data) -> dict:
    """A 1 MiB WRITE h1 -> h3 on the two-tier fabric on BMv2 (D = 10000)
    under ``faults``; skips where BMv2 is not installed."""
    from emulator.net.bmv2 import bmv2_unavailable_reason
    if bmv2_unavailable_reason():
        pytest.skip(f"BMv2 target: {bmv2_unavailable_reason()}")
    exp = experiment_from_dict({
        "name": name, "topology": str(REPO / "topologies/clos-2x2.yaml"),
        "target": "bmv2", "time": "dilated", "dilation": 10_000,
        "traffic": [{"src": "h1", "dst": "h3", "op": "write", "size_bytes": 1_048_576}],
        "faults": faults, "limits": {"wall_s": 300}, **data,
    }, REPO / "experiments" / "inline.yaml")
    return run_with_dilation(exp, tmp_path_factory.mktemp(name) / "out", plots=False)


@pytest.fixture(scope="module")
def bmv2_run(tmp_path_factory):
    return _write_under_faults(tmp_path_factory, "bmv2-faults",
                               [{"kind": "link_down", "link": "h1:leaf1", "at_us": 50},
                                {"kind": "link_up", "link": "h1:leaf1", "at_us": 550}],
                               nic={"rto_us": 200})


def test_a_link_down_on_bmv2_loses_what_was_sent_meanwhile_and_the_flow_recovers(bmv2_run):
    s = bmv2_run
    (flow,) = s["flows"]
    assert flow["complete"] and flow["intact"]
    assert flow["retransmitted_packets"] > 0 and flow["fct_ns"] > 550_000


def test_the_frames_a_down_link_lost_are_counted_by_the_kernel_as_the_nic_counted_them(bmv2_run):
    """summary.json's faults on BMv2: h1's lost frames are what it sent less
    what leaf1's veth got (the kernel's count); the NIC counted the same
    frames itself as refused by its downed veth (ENETDOWN). They are the
    fault's, not the emulation's: the run is not behind for them."""
    s = bmv2_run
    ends = {e["direction"]: e for e in s["faults"]["ends"]}
    h1 = next(n for n in s["nics"] if n["node"] == "h1")
    assert ends["h1->leaf1"]["reported"] and ends["h1->leaf1"]["dropped_down_frames"] > 0
    assert ends["h1->leaf1"]["dropped_down_frames"] == h1["tx_link_down"]
    assert s["faults"]["lost_frames"] >= ends["h1->leaf1"]["dropped_down_frames"]
    assert not s["fell_behind"] and not s["fidelity"]["behind"]
    down, up = (f["applied_ns"][0] for f in s["faults"]["faults"])
    assert 50_000 <= down < up and 550_000 <= up     # when the player ran them, fabric ns


@pytest.fixture(scope="module")
def bmv2_degrade_run(tmp_path_factory):
    return _write_under_faults(tmp_path_factory, "bmv2-degrade",
                               [{"kind": "link_degrade", "link": "h3:leaf2", "direction": "b_to_a",
                                 "at_us": 0, "rate_fraction": 0.25}])


def test_a_link_degraded_on_bmv2_delivers_at_its_degraded_rate(bmv2_degrade_run):
    """leaf2 -> h3 at 25 of 100 Gb/s (leaf2's port queues over Thrift) from
    the start: the 1 MiB WRITE takes at least its 25 Gb/s serialization
    (335 us of payload alone; 84 us at the link's rate), arrives intact, and
    the degrade is recorded when the player set the rate."""
    s = bmv2_degrade_run
    (flow,) = s["flows"]
    assert flow["complete"] and flow["intact"]
    payload_25g_ns = 1_048_576 * 8 / 25
    assert payload_25g_ns <= flow["fct_ns"] <= 2 * payload_25g_ns
    (fault,) = s["faults"]["faults"]
    assert len(fault["applied_ns"]) == 1 and 0 <= fault["applied_ns"][0] < flow["fct_ns"] / 10
