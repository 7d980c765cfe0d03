"""A management network is used only once its bridge forwards on every port
(``net.management._wait_forwarding``): the kernel may report a veth's
carrier to the bridge up to a second after it came up, and the bridge drops
what arrives before. Driven by a stand-in for the bridge's shell, which
answers ``bridge -j link show`` as the kernel would."""
from __future__ import annotations

import json

import pytest

from emulator.net import management
from emulator.topo import load_fabric
from emulator.topo.addressing import MGMT_BRIDGE
from tests.conftest import REPO

FABRIC = load_fabric(REPO / "topologies" / "clos-2x2-mgmt.yaml")


class _Bridge:
    """A bridge namespace's shell whose ports in ``late`` forward only
    after ``late_polls`` looks."""

    def __init__(self, ports: list[str], late: set[str], late_polls: int):
        self.ports, self.late, self.late_polls, self.polls = ports, late, late_polls, 0

    def cmd(self, line: str) -> str:
        assert line == "bridge -j link show"
        self.polls += 1
        return json.dumps([{"ifname": p, "master": "br0",
                            "state": "disabled" if p in self.late and self.polls <= self.late_polls
                            else "forwarding"} for p in self.ports])


class _Net:
    def __init__(self, late: dict[str, set[str]], late_polls: int):
        self.nodes = {MGMT_BRIDGE[m.kind]: _Bridge(
            [x.bridge_ifname for x in FABRIC.addresses.management_members(m.kind)],
            late.get(m.kind, set()), late_polls) for m in FABRIC.management}

    def get(self, name: str):
        return self.nodes[name]


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch):
    monkeypatch.setattr(management.time, "sleep", lambda s: None)


def test_the_run_waits_for_a_port_the_kernel_reports_late():
    net = _Net({"in_band": {"inband-eth2"}}, late_polls=3)
    management._wait_forwarding(net, FABRIC)
    assert net.get("inband").polls == 4          # three looks at it disabled, then forwarding
    assert net.get("oob").polls == 1


def test_a_port_that_never_forwards_is_an_error_naming_it(monkeypatch):
    monkeypatch.setattr(management, "BRIDGE_FORWARDING_S", 0.0)
    net = _Net({"out_of_band": {"oob-eth3"}}, late_polls=10**9)
    with pytest.raises(RuntimeError, match=r"out_of_band: bridge port\(s\) oob-eth3 not forwarding"):
        management._wait_forwarding(net, FABRIC)
