"""The PFC watchdog of the embedded traffic manager (``emulator.dataplane.pfcwd``),
a NIC's PFC storm (``emulator.nic.pfc.PfcStormer``) and a stalled host's NIC
(``emulator.nic.rx_stall.RxStall``), on the manual clock.

Port 1 faces the storming peer; lossless frames of priority 3 come in on
port 2 and go out of port 1. A PAUSE of the most quanta lasts 335.5 us at
100 Gbps: the peer refreshes it every 100 us, as a stuck NIC does."""
from __future__ import annotations

from emulator.clock import NEVER_NS, ManualClock
from emulator.dataplane.pfc import XOFF_QUANTA, pause_ns
from emulator.dataplane.pfcwd import RESTORE_EVENT, STORM_EVENT
from emulator.experiment.pfcwd_results import add_watchdog_events, watchdog_totals
from emulator.link_faults import LinkFaults
from emulator.nic.pfc import STORM_QUANTA, PfcStormer
from emulator.nic.rx_stall import RxStall
from emulator.report.build import watchdog_table
from emulator.schema.faults import EndFaults
from emulator.wire import PFC_DST_MAC
from tests.unit.test_tm_helpers import ROCE_PRIO, attach, make_tm, roce, verdict

RATE_BPS = 100_000_000_000
DETECT_NS, RESTORE_NS = 50_000, 120_000
LOSSLESS = (200_000, 180_000, 100_000)           # xoff, xon, headroom bytes
STORM_CELL = 1 << 3 | ROCE_PRIO


class Rig:
    """A TM with the watchdog on, driven by a manual clock; its event log kept."""

    def __init__(self, action: str = "drop"):
        self.clock = ManualClock(0)
        self.events: list[tuple] = []
        self.tm, _, _ = make_tm([(1, RATE_BPS, 1000), (2, RATE_BPS, 1000)],
                                log=lambda *e: self.events.append(e))
        self.tm.enable_watchdog(DETECT_NS, RESTORE_NS, action)
        self.out = attach(self.tm)

    def until(self, t_ns: int, step_ns: int = 1000) -> None:
        """Timers and wires at every step up to ``t_ns`` (the clock's now)."""
        while self.clock.now_ns() < t_ns:
            self.clock.advance(min(step_ns, t_ns - self.clock.now_ns()))
            now = self.clock.now_ns()
            for c in self.out.values():
                c.now = now
            self.tm.poll(now)
            self.tm.transmit(now)

    def pause(self, port: int = 1, quanta: int = XOFF_QUANTA) -> None:
        timers = [0] * 8
        timers[ROCE_PRIO] = quanta
        self.tm.pfc_received(self.clock.now_ns(), port, 1 << ROCE_PRIO, timers)

    def send(self, n: int, egress: int = 1, ingress: int = 2, prio: int = ROCE_PRIO) -> list[bool]:
        return [self.tm.enqueue(self.clock.now_ns(), roce(1000, ident=i),
                                verdict(egress, ingress, prio, pfc=LOSSLESS if prio else None))
                for i in range(n)]

    def wd_events(self) -> list[tuple]:
        return [(t, port, prio, ev) for t, port, prio, ev, _ in self.events
                if ev in (STORM_EVENT, RESTORE_EVENT)]

    def counters(self, port: int = 1) -> dict:
        return self.tm.port_stats(port, self.clock.now_ns())["priorities"][ROCE_PRIO]


def storm(rig: Rig, from_ns: int, until_ns: int, every_ns: int = 100_000) -> None:
    """The peer on port 1 pauses at ``from_ns`` and again every ``every_ns`` before ``until_ns``."""
    rig.until(from_ns)
    while rig.clock.now_ns() < until_ns:
        rig.pause()
        rig.until(min(until_ns, rig.clock.now_ns() + every_ns))


def test_a_queue_held_paused_with_frames_is_a_storm_at_exactly_the_detection_time_and_drop_empties_it():
    rig = Rig("drop")
    rig.until(1000)
    rig.pause()
    assert rig.send(5) == [True] * 5
    rig.until(1000 + DETECT_NS - 1000)
    assert rig.wd_events() == [] and rig.tm.ports[1].depth[ROCE_PRIO] == 5000
    rig.until(1000 + DETECT_NS)
    assert rig.wd_events() == [(1000 + DETECT_NS, 1, ROCE_PRIO, STORM_EVENT)]
    port, buf = rig.tm.ports[1], rig.tm.buffer
    assert port.depth[ROCE_PRIO] == 0 and not port.queues[ROCE_PRIO]
    assert buf.ingress_bytes[2 << 3 | ROCE_PRIO] == 0 and buf.shared_used == 0
    assert port.paused_ns_at(ROCE_PRIO, rig.clock.now_ns()) == DETECT_NS   # held until the storm
    # in the storm: frames for the queue, and frames of its priority arriving on
    # its port, are dropped; other classes pass; PAUSE is counted but ignored
    assert rig.send(2) == [False, False]
    assert rig.send(1, egress=2, ingress=1) == [False]
    assert rig.send(1, prio=0) == [True]
    rig.pause()
    assert not rig.tm.ports[1].paused
    c = rig.counters()
    assert (c["pfcwd_storms"], c["pfcwd_tx_drops"], c["pfcwd_rx_drops"]) == (1, 7, 1)
    assert c["pfcwd_storming"] and c["pause_rx"] == 2 and c["drops"] == 0   # not the TM's drops
    assert not any(f[1][12:14] == b"\x08\x00" and f[1][15] >> 2 == 26 for f in rig.out[1].frames)


def test_the_storm_ends_a_restoration_time_after_the_last_pause_and_pfc_is_honoured_again():
    rig = Rig("drop")
    rig.until(1000)
    rig.pause()
    rig.send(3)
    storm(rig, 1000, 301_000)                     # PAUSEs at 1, 101, 201 us; the last at 201 us
    rig.until(201_000 + RESTORE_NS - 1000)
    assert [e[3] for e in rig.wd_events()] == [STORM_EVENT]
    rig.until(201_000 + RESTORE_NS)
    assert rig.wd_events()[-1] == (201_000 + RESTORE_NS, 1, ROCE_PRIO, RESTORE_EVENT)
    c = rig.counters()
    assert (c["pfcwd_storms"], c["pfcwd_restores"], c["pfcwd_storming"]) == (1, 1, False)
    rig.pause()                                   # paused again: held, not sent
    assert rig.send(2) == [True, True]            # admitted again
    rig.until(rig.clock.now_ns() + 10_000)
    assert rig.tm.ports[1].depth[ROCE_PRIO] == 2000
    assert rig.tm.ports[1].paused >> ROCE_PRIO & 1


def test_forward_sends_the_paused_queue_and_drops_nothing():
    rig = Rig("forward")
    rig.until(1000)
    rig.pause()
    rig.send(4)
    rig.until(1000 + DETECT_NS - 1000)
    assert rig.out[1].frames == []                # held by the pause
    rig.until(1000 + DETECT_NS + 5000)
    assert rig.wd_events() == [(1000 + DETECT_NS, 1, ROCE_PRIO, STORM_EVENT)]
    sent = [t for t, f in rig.out[1].frames]
    assert len(sent) == 4 and min(sent) >= 1000 + DETECT_NS
    rig.pause()                                   # ignored in the storm
    assert rig.send(1) == [True]
    rig.until(rig.clock.now_ns() + 5000)
    assert len(rig.out[1].frames) == 5
    c = rig.counters()
    assert (c["pfcwd_storms"], c["pfcwd_tx_drops"], c["pfcwd_rx_drops"]) == (1, 0, 0)


def test_no_storm_for_a_pause_that_ends_in_time_or_a_paused_queue_that_holds_nothing():
    rig = Rig("drop")
    rig.until(1000)
    rig.pause()
    rig.send(2)
    rig.until(20_000)
    rig.pause(quanta=0)                           # XON before the detection time: a pause, not a storm
    rig.until(1000 + 3 * DETECT_NS)
    assert rig.wd_events() == [] and len(rig.out[1].frames) == 2
    rig.pause()                                   # paused for long, but nothing waits in the queue
    rig.until(rig.clock.now_ns() + 3 * DETECT_NS)
    assert rig.wd_events() == []
    held_from = rig.clock.now_ns()
    rig.send(1)                                   # now a frame waits: found at the next look
    rig.until(held_from + DETECT_NS)
    assert [e[3] for e in rig.wd_events()] == [STORM_EVENT]


def test_a_pause_that_ran_out_does_not_count_towards_the_next_ones_detection():
    rig = Rig("drop")
    rig.until(1000)
    short = pause_ns(1000, RATE_BPS)              # 5.12 us
    rig.pause(quanta=1000)
    rig.send(1, prio=ROCE_PRIO)
    rig.until(40_000)                             # it ran out long ago; the frame went
    rig.pause()                                   # a new pause: detection counts from here
    rig.send(1)
    rig.until(40_000 + DETECT_NS - 1000)
    assert rig.wd_events() == []
    assert rig.tm.ports[1].paused_ns_at(ROCE_PRIO, rig.clock.now_ns()) == short + DETECT_NS - 1000
    rig.until(40_000 + DETECT_NS)
    assert [e[0] for e in rig.wd_events()] == [40_000 + DETECT_NS]


# -- the storming NIC ------------------------------------------------------------------------------
def test_a_storming_nic_sends_max_quanta_pause_before_each_one_runs_out_and_stops_at_the_end():
    faults = LinkFaults(EndFaults(sender="h1", receiver="leaf1",
                                  storms=[{"from_ns": 20_000, "until_ns": 1_020_000, "priority": 3}]))
    stormer = PfcStormer(faults, RATE_BPS, "02:00:0a:00:01:01")
    clock = ManualClock(0)
    sent = []
    while stormer.next_ns < NEVER_NS:
        clock.advance(stormer.next_ns - clock.now_ns())
        frame = stormer.fire(clock.now_ns())
        if frame is not None:
            sent.append((clock.now_ns(), frame))
    refresh = pause_ns(STORM_QUANTA, RATE_BPS) // 2
    assert [t for t, _ in sent] == [20_000 + k * refresh for k in range(6)]   # 5 x 167.8 < 1000 us
    t, frame = sent[0]
    assert len(frame) == 60 and frame[:6] == PFC_DST_MAC and frame[6:12] == bytes.fromhex("02000a000101")
    assert frame[12:16] == b"\x88\x08\x01\x01" and frame[17] == 1 << 3
    assert int.from_bytes(frame[18 + 2 * 3:20 + 2 * 3], "big") == STORM_QUANTA
    assert faults.stats()["pfc_storm_frames"] == {"3": 6}


# -- the stalled host ------------------------------------------------------------------------------
def test_a_stalled_host_s_nic_holds_data_pauses_at_xoff_refreshes_and_resumes_at_the_end():
    stall = RxStall([(10_000, 310_000, 3000)], 3, RATE_BPS, "02:00:0a:00:01:01")
    clock = ManualClock(10_000)
    assert stall.stalled(9_999) is None and stall.stalled(10_000) == (310_000, 3000)
    assert stall.hold(roce(1000, ident=1), clock.now_ns()) is None
    assert stall.hold(roce(1000, ident=2), clock.now_ns()) is None
    pause = stall.hold(roce(1000, ident=3), clock.advance(500))          # 3000 bytes: XOFF
    assert pause[17] == 1 << 3 and int.from_bytes(pause[24:26], "big") == STORM_QUANTA
    assert stall.hold(roce(1000, ident=4), clock.now_ns()) is None       # already paused
    refresh = pause_ns(STORM_QUANTA, RATE_BPS) // 2
    assert stall.next_ns() == 10_500 + refresh
    clock.advance(refresh)
    frames, again = stall.due(clock.now_ns())
    assert frames == [] and again == pause
    assert stall.next_ns() == 310_000                                    # the next refresh is later
    clock.advance(310_000 - clock.now_ns())
    frames, xon = stall.due(clock.now_ns())
    assert [f[19] for f in frames] == [1, 2, 3, 4]                       # in arrival order
    assert xon[17] == 1 << 3 and xon[24:26] == b"\x00\x00"
    assert stall.next_ns() == NEVER_NS and stall.due(clock.now_ns()) == ([], None)
    assert stall.stats() == {"held_packets": 4, "held_max_bytes": 4000, "pause_tx": 2, "resume_tx": 1}


# -- in the results --------------------------------------------------------------------------------
def test_the_watchdogs_events_reach_the_summary_and_the_report():
    block = {"action": "drop", "storms_detected": 1, "storms_restored": 1, "dropped_frames": 7,
             "queues": [], "events": []}
    summary = RunSummaryStub([{"node": "leaf1", "pfc_watchdog": dict(block)},
                              {"node": "leaf2", "pfc_watchdog": {**block, "dropped_frames": 2}},
                              {"node": "spine1"}])
    add_watchdog_events(summary, [
        {"time_ns": 1259852.0, "node": "leaf1", "port": 1, "peer": "h1", "priority": 3,
         "event": "storm_restored", "action": "drop"},
        {"time_ns": 121007.0, "node": "leaf1", "port": 1, "peer": "h1", "priority": 3,
         "event": "storm_detected", "action": "drop"}])
    s = {"switches": summary.switches}
    assert [e["time_ns"] for e in s["switches"][0]["pfc_watchdog"]["events"]] == [1259852, 121007]
    assert s["switches"][1]["pfc_watchdog"]["events"] == []
    assert watchdog_totals(s) == (2, 2, 9) and watchdog_totals({"switches": [{"node": "x"}]}) is None
    table = watchdog_table(s)
    assert table.index("121.007 µs") < table.index("1,259.852 µs")      # by time, not as text
    assert "leaf1 port 1 (to h1) priority 3: storm detected (drop)" in table
    assert watchdog_table({"switches": [{"node": "x"}]}) == ""


class RunSummaryStub:
    def __init__(self, switches):
        self.switches = switches
