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


@pytest.fixture(scope="module")
def bmv2_run(tmp_path_factory):
    from emulator.net.bmv2 import bmv2_unavailable_reason
    if bmv2_unavailable_reason():
        pytest.skip(f"BMv2 target: {bmv2_unavailable_reason()}")
    exp = experiment_from_dict({
        "name": "bmv2-faults", "topology": str(REPO / "topologies/clos-2x2.yaml"),
        "target": "bmv2", "time": "dilated", "dilation": 10_000, "nic": {"rto_us": 200},
        "traffic": [{"src": "h1", "dst": "h3", "op": "write", "size_bytes": 1_048_576}],
        "faults": [{"kind": "link_down", "link": "h1:leaf1", "at_us": 50},
                   {"kind": "link_up", "link": "h1:leaf1", "at_us": 550}],
        "limits": {"wall_s": 300},
    }, REPO / "experiments" / "inline.yaml")
    out = tmp_path_factory.mktemp("bmv2-faults") / "out"
    return run_with_dilation(exp, out)


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
