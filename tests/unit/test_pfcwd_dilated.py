"""The PFC watchdog on the dilated path (a dilated run's switch, not virtual
time), on the manual clock: the switch's clock runs in wall ns, D of them a
fabric ns; its ports' rates are the fabric's over D (``net.mininet_topo.
dilated_link``) and its watchdog's times the experiment's times D
(``experiment.faults.watchdog_config``). A storm is found, dropped and
restored at the same fabric times as in virtual time, through the results'
own conversion of the raw events (``experiment.timeseries.load_results``)."""
from __future__ import annotations

import pytest

from emulator.clock import ManualClock
from emulator.dataplane.pfc import XOFF_QUANTA
from emulator.experiment.faults import watchdog_config
from emulator.experiment.model import experiment_from_dict
from emulator.experiment.results_io import HOST_LOGS, SWITCH_LOGS, RawLogs
from emulator.experiment.timeseries import load_results
from tests.conftest import REPO
from tests.unit.test_tm_helpers import ROCE_PRIO, attach, make_tm, roce, verdict

RATE_BPS = 100_000_000_000
LOSSLESS = (200_000, 180_000, 100_000)           # xoff, xon, headroom bytes
T0_NS = 7_000_000_000_000                        # the agents' start on the monotonic clock


def experiment(dilation: float):
    return experiment_from_dict({
        "name": "wd", "topology": str(REPO / "topologies" / "clos-2x2.yaml"),
        **({"time": "virtual"} if dilation == 1 else {"dilation": dilation}),
        "qos": {"pfc": {"enabled": True}},
        "switch": {"pfc_watchdog": {"enabled": True, "detection_time_us": 50,
                                    "restoration_time_us": 120, "action": "drop"}},
        "traffic": [{"src": "h1", "dst": "h3", "size_bytes": 1000}],
    }, REPO / "experiments" / "inline.yaml")


def storm(dilation: float) -> tuple[list[dict], dict]:
    """leaf1's queue to h1 (port 1) holds 5 frames and is paused from 1 us,
    the PAUSE refreshed every 100 us until 301 us (fabric time); the
    watchdog's rows of pfcwd_events.csv, and the queue's counters."""
    exp = experiment(dilation)
    wd = watchdog_config(exp.spec.switch.pfc_watchdog, exp.dilation)
    d = exp.dilation
    clock = ManualClock(T0_NS)
    events = []
    tm, _, _ = make_tm([(1, int(RATE_BPS / d), 1000), (2, int(RATE_BPS / d), 1000)],
                       log=lambda *e: events.append(e))
    tm.enable_watchdog(wd.detection_ns, wd.restoration_ns, wd.action)   # as the switch does
    out = attach(tm)

    def until(fabric_ns: int) -> None:           # a step of 1 fabric us
        while clock.now_ns() < T0_NS + fabric_ns * d:
            clock.advance(int(min(1000 * d, T0_NS + fabric_ns * d - clock.now_ns())))
            for c in out.values():
                c.now = clock.now_ns()
            tm.poll(clock.now_ns())
            tm.transmit(clock.now_ns())

    def pause() -> None:
        timers = [0] * 8
        timers[ROCE_PRIO] = XOFF_QUANTA
        tm.pfc_received(clock.now_ns(), 1, 1 << ROCE_PRIO, timers)

    until(1000)
    pause()
    for i in range(5):
        assert tm.enqueue(clock.now_ns(), roce(1000, ident=i), verdict(1, 2, ROCE_PRIO, pfc=LOSSLESS))
    for t in (101_000, 201_000):
        until(t)
        pause()
    until(400_000)
    raw = RawLogs(switch={sw.name: {k: [] for k in SWITCH_LOGS} for sw in exp.fabric.switches()},
                  host={h.name: {k: [] for k in HOST_LOGS} for h in exp.fabric.hosts()})
    raw.switch["leaf1"]["events"] = [{"t_ns": t, "port": port, "priority": prio, "event": ev,
                                      "value": value} for t, port, prio, ev, value in events]
    res = load_results(exp, None, T0_NS, raw=raw)
    return res.pfcwd_events, tm.port_stats(1, clock.now_ns())["priorities"][ROCE_PRIO]


@pytest.mark.parametrize("dilation", [50, 1000])
def test_a_dilated_switch_finds_and_restores_a_storm_at_the_virtual_fabric_times(dilation):
    virtual, v_counts = storm(1)
    dilated, d_counts = storm(dilation)
    # detection 50 us after the first PAUSE (1 us); restored 120 us after the last (201 us)
    assert [(r["time_ns"], r["event"]) for r in virtual] == [(51_000, "storm_detected"),
                                                              (321_000, "storm_restored")]
    assert dilated == virtual
    assert [r["peer"] for r in dilated] == ["h1", "h1"]
    keys = ("pfcwd_storms", "pfcwd_restores", "pfcwd_tx_drops", "pause_rx")
    assert [d_counts[k] for k in keys] == [v_counts[k] for k in keys] == [1, 1, 5, 3]
    assert not d_counts["pfcwd_storming"]


def test_the_watchdogs_times_are_dilated_for_the_switch_clock():
    wd = watchdog_config(experiment(1000).spec.switch.pfc_watchdog, 1000)
    assert (wd.detection_ns, wd.restoration_ns, wd.action) == (50_000_000, 120_000_000, "drop")
