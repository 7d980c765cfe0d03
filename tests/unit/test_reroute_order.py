"""The controller handles port reports in fabric order, whatever order they
reach it in (``control/reroute.py``, ``Rerouter.ordered``/``release``), over
real gRPC to the embedded target's P4Runtime servers of a clos-2x2 on a
manual clock; and a port's status follows one rule, IEEE 802.3's local and
remote fault (``dataplane/port_status.py``), for the controller and gNMI."""
from __future__ import annotations

import contextlib
import itertools

from emulator.clock import NEVER_NS
from emulator.dataplane.gnmi_server.leaves import DOWN, UP, port_down_windows
from emulator.dataplane.port_status import PortEvent, PortStatusWatch, no_signal_windows
from emulator.experiment.fault_results import reroutes_by_run_end
from emulator.schema.switch import PortConfig
from tests.unit.test_reroute import FABRIC, REACTION_NS, held, port_to, report, rerouting_fabric


@contextlib.contextmanager
def ordered_fabric():
    """clos-2x2's switches on one manual clock, the controller installed and
    rerouting in fabric order (as in virtual time)."""
    with rerouting_fabric() as (servers, ctl, _, rerouter):
        yield servers, ctl, rerouter.ordered()


def queued(servers) -> dict[str, list]:
    """Every switch's timed writes, in the order it will apply them."""
    return {n: [(at, req.SerializeToString(deterministic=True))
                for at, _, req in sorted(s.port_events._queued)] for n, s in servers.items()}


# two links' reports less than a window apart: leaf1-spine1 at 2.0 us (both
# ends), leaf2-spine2 at 2.3 us (leaf2's end only)
REPORTS = [("leaf1", "spine1", 2_000), ("spine1", "leaf1", 2_000), ("leaf2", "spine2", 2_300)]


def run_order(order) -> tuple:
    with ordered_fabric() as (servers, ctl, release):
        for sw, peer, at in order:
            assert report(servers[sw], port_to(sw, peer), False, at) is True
        # held, not handled: nothing written yet
        assert all(s.state.next_write_ns == NEVER_NS for s in servers.values())
        release(2_001)               # no report before 2.001 us can come any more
        first = ctl.rerouter.results()["reroutes"]
        release(10_000)
        writes = queued(servers)
        for s in servers.values():
            s.port_events.apply_due(10_000 + REACTION_NS)
        return first, ctl.rerouter.results(), writes, held(servers)


def test_reports_are_handled_in_fabric_order_whatever_order_they_arrive_in():
    runs = [run_order(order) for order in itertools.permutations(REPORTS)]
    first, results, writes, tables = runs[0]
    # release(2_001) handled the 2.0 us reports only, as one change
    assert [(r["detected_ns"], r["links_down"]) for r in first] == [(2_000, [("leaf1", "spine1")])]
    assert [(r["detected_ns"], r["converged_ns"], r["links_down"]) for r in results["reroutes"]] == [
        (2_000, 2_000 + REACTION_NS, [("leaf1", "spine1")]),
        (2_300, 2_300 + REACTION_NS, [("leaf1", "spine1"), ("leaf2", "spine2")])]
    assert {at for w in writes.values() for at, _ in w} == {2_000 + REACTION_NS, 2_300 + REACTION_NS}
    for other in runs[1:]:
        assert other[1:] == (results, writes, tables)


def test_writes_to_a_switch_that_goes_down_later_in_the_same_release_are_dropped():
    with ordered_fabric() as (servers, ctl, release):
        spine1 = servers["spine1"]
        # spine1 goes down at 2.2 us, inside the window of leaf1's report at
        # 2.0 us, whose reroute writes spine1 too (for 2.0 us + the reaction)
        spine1.state.wipe()
        assert spine1.state.switch_status_handler(False, 2_200) is True
        assert report(servers["leaf1"], port_to("leaf1", "spine1"), False, 2_000) is True
        release(3_000)
        rr = ctl.rerouter.results()["reroutes"]
        # spine1 took none of the reroute's writes: the record says so
        assert rr[0]["detected_ns"] == 2_000 and "spine1" not in rr[0]["programmed"]
        assert rr[0]["programmed"] and rr[0]["converged_ns"] == 2_000 + REACTION_NS
        assert spine1.state.next_write_ns == NEVER_NS       # nothing for the wiped switch
        assert servers["leaf2"].state.next_write_ns == 2_000 + REACTION_NS
        queued_ops = sum(len(req.updates) for s in servers.values() for _, _, req in s.port_events._queued)
        assert rr[0]["changes"] == queued_ops


def test_a_reroute_already_queued_at_a_switch_that_goes_down_did_not_program_it():
    with ordered_fabric() as (servers, ctl, release):
        assert report(servers["leaf1"], port_to("leaf1", "spine1"), False, 2_000) is True
        release(3_000)               # the writes sit in the switches' queues, due 2.0 us + reaction
        before = ctl.rerouter.results()["reroutes"][0]
        assert "leaf2" in before["programmed"]
        leaf2 = servers["leaf2"]
        leaf2.state.wipe()
        assert leaf2.state.switch_status_handler(False, 5_000) is True
        release(6_000)
        after = ctl.rerouter.results()["reroutes"][0]
        assert after["programmed"] == [s for s in before["programmed"] if s != "leaf2"]
        assert after["changes"] < before["changes"]
        assert leaf2.state.next_write_ns == NEVER_NS


def _port(**kw) -> PortConfig:
    return PortConfig(port_no=1, ifname="s-eth1", rate_bps=10**9, delay_ns=1_000, **kw)


def test_no_signal_is_a_local_fault_a_delay_after_and_a_remote_fault_two_delays_after():
    way_in = {"rx_down": [{"from_ns": 5_000, "until_ns": 9_000}]}
    way_out = {"faults": {"sender": "s", "receiver": "t",
                          "down": [{"from_ns": 20_000, "until_ns": 30_000}]}}
    assert no_signal_windows(_port(**way_in)) == [(6_000, 10_000)]           # local fault
    assert no_signal_windows(_port(**way_out)) == [(22_000, 32_000)]         # remote fault
    both = _port(rx_down=[{"from_ns": 20_000, "until_ns": 30_000}], faults=way_out["faults"])
    # both ways down over [20, 30) us: local fault from 21, the partner's
    # remote fault still heard until 32 (sent while it had no signal, up to 31)
    assert no_signal_windows(both) == [(21_000, 32_000)]
    forever = _port(rx_down=[{"from_ns": 5_000, "until_ns": NEVER_NS}])
    assert no_signal_windows(forever) == [(6_000, NEVER_NS)]


def test_the_controllers_reports_and_gnmis_oper_status_follow_the_same_windows():
    port = _port(rx_down=[{"from_ns": 5_000, "until_ns": 9_000}],
                 faults={"sender": "s", "receiver": "t", "down": [{"from_ns": 20_000, "until_ns": 30_000}]})
    watch = PortStatusWatch([port])
    events = watch.due(NEVER_NS - 1)
    assert events == [PortEvent(6_000, 1, False), PortEvent(10_000, 1, True),
                      PortEvent(22_000, 1, False), PortEvent(32_000, 1, True)]
    oper = port_down_windows(port)
    assert [(e.at_ns, DOWN if not e.up else UP) for e in events] == oper.changes(0, NEVER_NS - 1)


def test_a_links_reroute_is_detected_at_its_first_ends_down_and_its_last_ends_up():
    from types import SimpleNamespace

    from emulator.experiment.fault_results import _reroute_times
    from emulator.schema.faults import LinkUp
    up = LinkUp(kind="link_up", link="leaf1:spine1", at_us=100, direction="a_to_b")
    # leaf1 -> spine1 back at 100 us: spine1's local fault clears a delay
    # (1 us) after, leaf1 hears no remote fault two delays after
    rr = {"reaction_ns": 5_000, "reports": [
        {"switch": "spine1", "port": 1, "peer": "leaf1", "oper_status": "UP", "detected_ns": 101_000},
        {"switch": "leaf1", "port": 3, "peer": "spine1", "oper_status": "UP", "detected_ns": 102_000}],
        "reroutes": [{"detected_ns": 102_000, "converged_ns": 107_000, "programmed": ["leaf1"]}]}
    (t,) = _reroute_times(SimpleNamespace(fabric=FABRIC), up, [100_000], [], rr)["reroute"]
    assert (t["detected_ns"], t["converged_ns"], t["programmed"]) == (102_000, 107_000, ["leaf1"])


def test_a_reroute_is_converged_if_the_switches_ran_past_it_even_with_no_flows():
    """A workload has no flows (the flows' end is 0): whether a timed write
    took effect is told by how long the switches ran too (their stats'
    ``until_ns``), not by the flows alone."""
    from pathlib import Path
    from emulator.experiment.model import load_experiment
    from emulator.experiment.summary import _fabric_end_ns
    from emulator.experiment.time_mode import resolve_time
    exp = load_experiment(Path(__file__).parents[2] / "experiments" / "link-flap-allreduce.yaml")
    virtual = resolve_time(exp, "embedded")
    assert virtual.spec.time == "virtual"
    stats = {"leaf1": {"until_ns": 1_877_184}, "leaf4": {"until_ns": 20_000}, "spine1": {}}
    assert _fabric_end_ns(virtual, stats, 0) == 1_877_184            # an idle switch stops early
    assert _fabric_end_ns(virtual, stats, 1_900_000) == 1_900_000    # flows ending later
    assert _fabric_end_ns(virtual, {"leaf1": {}}, 5) == 5           # no switch stats: the flows'
    rr = reroutes_by_run_end({"reroutes": [{"detected_ns": 501_000, "converged_ns": 1_501_000}]},
                             _fabric_end_ns(virtual, stats, 0))
    assert rr["reroutes"][0]["converged_ns"] == 1_501_000
