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
