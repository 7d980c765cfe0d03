"""PFC in the traffic manager: the frames, pausing on reception, generating XOFF/refresh/XON,
and a lossless class that never drops while the pauses are honoured."""
from __future__ import annotations

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.l2 import Ether

from emulator.dataplane.pfc import (
    XOFF_QUANTA, build_pfc_frame, parse_mac_control, pause_frame, pause_ns,
)
from emulator.link import Wire
from emulator.wire import PFC_DST_MAC, PFC_OPCODE, WIRE_OVERHEAD_BYTES
from tests.unit.test_tm_helpers import ROCE_PRIO, ROUTER_MAC, attach, make_tm, roce, run, verdict

MBPS8 = 8_000_000          # 1 byte per microsecond: easy arithmetic


def _pfc_frames(collected):
    return [f for _, f in collected.frames if f[12:14] == b"\x88\x08"]


def _quanta(frame, prio=ROCE_PRIO):
    _, ce, timers = parse_mac_control(frame)
    assert ce == 1 << prio
    return timers[prio]


# ---------------------------------------------------------------- frames

def test_pause_frame_bytes():
    f = pause_frame(ROUTER_MAC, 3, 0xFFFF)
    assert len(f) == 60
    assert f[0:6] == PFC_DST_MAC == bytes.fromhex("0180c2000001")
    assert f[6:12] == ROUTER_MAC
    assert f[12:14] == b"\x88\x08"
    assert f[14:16] == b"\x01\x01"                  # opcode: PFC
    assert f[16:18] == b"\x00\x08"                  # class-enable: bit 3
    assert f[18:34] == bytes(6) + b"\xff\xff" + bytes(8)   # timer 3 only
    assert f[34:] == bytes(26)                      # padding to the Ethernet minimum
    assert parse_mac_control(f) == (PFC_OPCODE, 0x08, (0, 0, 0, 0xFFFF, 0, 0, 0, 0))
    assert parse_mac_control(f[:33]) is None


def test_scapy_dissects_pfc_frames():
    timers = (0, 7, 0, 0xFFFF, 0, 0, 300, 0)
    for frame, enabled in ((pause_frame(ROUTER_MAC, 3, 0xFFFF), {3}),
                           (pause_frame(ROUTER_MAC, 6, 0), {6}),
                           (build_pfc_frame(ROUTER_MAC, 0b01001010, timers), {1, 3, 6})):
        p = Ether(frame)
        assert p.dst == "01:80:c2:00:00:01" and p.src == "02:00:00:00:01:01" and p.type == 0x8808
        pfc = p[MACControlClassBasedFlowControl]
        got = {i for i in range(8) if getattr(pfc, f"c{i}_enabled")}
        assert got == enabled
        _, _, want = parse_mac_control(frame)
        assert [getattr(pfc, f"c{i}_pause_time") for i in range(8)] == list(want)
    assert Ether(pause_frame(ROUTER_MAC, 3, 0xFFFF))[MACControlClassBasedFlowControl].c3_pause_time == 0xFFFF


def test_pause_time_is_quanta_times_512_bit_times():
    assert pause_ns(1, 1_000_000_000) == 512
    assert pause_ns(0xFFFF, 100_000_000_000) == -(-0xFFFF * 512 * 10**9 // 10**11)   # 335.5 us
    assert pause_ns(100, MBPS8) == 6_400_000
    assert pause_ns(1, 3_000_000_000) == 171       # rounded up: never resume early


# ---------------------------------------------------------------- reception

def test_paused_queue_is_not_served_and_resumes_after_exactly_the_quanta():
    far = 10**9                  # wire delay: nothing is released, the schedule stays visible
    tm, _, _ = make_tm([(1, MBPS8, far), (2, MBPS8, far)])
    until = 1000 + pause_ns(100, MBPS8)                # 1000 + 6.4 ms
    tm.pfc_received(1000, 1, 1 << ROCE_PRIO, (0, 0, 0, 100, 0, 0, 0, 0))
    assert tm.ports[1].paused == 1 << ROCE_PRIO
    assert tm.enqueue(2000, roce(1000), verdict(1, 2, ROCE_PRIO))
    assert tm.enqueue(2000, roce(500), verdict(1, 2, 0))      # another class is not paused
    tm.transmit(until - 1)
    starts = lambda: [(t - far - (len(f) + WIRE_OVERHEAD_BYTES) * 1000, len(f))  # noqa: E731
                      for t, f in tm.ports[1].wire.in_flight]
    assert starts() == [(2000, 500)]
    assert tm.ports[1].paused == 1 << ROCE_PRIO
    tm.transmit(until)
    assert starts() == [(2000, 500), (until, 1000)]    # starts exactly at expiry
    assert tm.ports[1].paused == 0
    assert tm.ports[1].paused_ns[ROCE_PRIO] == until - 1000
    assert tm.ports[1].pause_rx[ROCE_PRIO] == 1


def test_pause_expiry_wakes_the_switch_and_zero_timer_resumes_at_once():
    far = 10**9
    tm, _, _ = make_tm([(1, MBPS8, far), (2, MBPS8, far)])
    tm.pfc_received(0, 1, 1 << ROCE_PRIO, (0, 0, 0, 0xFFFF, 0, 0, 0, 0))
    tm.enqueue(10, roce(1000), verdict(1, 2, ROCE_PRIO))
    assert tm.next_wake_ns() == pause_ns(0xFFFF, MBPS8)
    tm.pfc_received(50_000, 1, 1 << ROCE_PRIO, (0,) * 8)        # XON
    assert tm.ports[1].paused == 0 and tm.ports[1].paused_ns[ROCE_PRIO] == 50_000
    assert tm.next_wake_ns() == 50_000                          # the frame starts now
    tm.transmit(50_000)
    assert [t for t, _ in tm.ports[1].wire.in_flight] == [50_000 + 1024_000 + far]


def test_refreshed_pause_extends_and_paused_time_counts_once():
    tm, _, _ = make_tm([(1, MBPS8, 0)])
    q = (0, 0, 0, 10, 0, 0, 0, 0)                 # 10 quanta = 640 us
    tm.pfc_received(0, 1, 0x08, q)
    tm.pfc_received(600_000, 1, 0x08, q)          # before expiry: until 1.24 ms
    tm.transmit(5_000_000)
    assert tm.ports[1].paused == 0
    assert tm.ports[1].paused_ns[ROCE_PRIO] == 600_000 + 640_000
    assert tm.ports[1].pause_rx[ROCE_PRIO] == 2


def test_strict_priority_serves_lower_classes_during_a_pause_of_a_higher_one():
    tm, _, _ = make_tm([(1, MBPS8, 10**9), (2, MBPS8, 0)])
    tm.pfc_received(0, 1, 1 << 7, (0,) * 7 + (5,))          # pause 7 for 320 us
    tm.enqueue(0, roce(100, ident=7), verdict(1, 2, 7))
    tm.enqueue(0, roce(100, ident=0), verdict(1, 2, 0))
    tm.transmit(10_000_000)
    order = [f[18:20] for _, f in tm.ports[1].wire.in_flight]
    assert order == [b"\x00\x00", b"\x00\x07"]


# ---------------------------------------------------------------- generation

PFC = (3000, 1000, 20_000)      # xoff, xon, headroom


def test_xoff_out_of_the_ingress_port_refresh_while_above_xon_then_xon():
    fast, slow = 100_000_000_000, MBPS8    # ingress 100 Gbps (pause 335 us); egress 1 byte/us
    tm, _, _ = make_tm([(1, fast, 0), (2, slow, 0)])
    out = attach(tm)
    lossless = verdict(2, 1, ROCE_PRIO, pfc=PFC)
    for i in range(2):
        assert tm.enqueue(0, roce(1000, ident=i), lossless)
    assert not tm.ports[1].ctrl                      # 2000 < XOFF
    assert tm.enqueue(0, roce(1000, ident=2), lossless)
    assert tm.buffer.ingress_bytes[1 * 8 + ROCE_PRIO] == 3000
    run(tm, out, 1000)
    pauses = _pfc_frames(out[1])
    assert len(pauses) == 1 and _quanta(pauses[0]) == XOFF_QUANTA
    assert Ether(pauses[0]).src == "02:00:00:00:01:01"
    assert not _pfc_frames(out[2])                   # not out of the egress port
    refresh = pause_ns(XOFF_QUANTA, fast) // 2       # 167.8 us
    run(tm, out, refresh - 1000, start_ns=2000)
    assert len(_pfc_frames(out[1])) == 1
    run(tm, out, refresh + 1000, start_ns=refresh)
    assert [_quanta(f) for f in _pfc_frames(out[1])] == [XOFF_QUANTA] * 2
    # Drain (a frame leaves the buffer when its serialization starts): 3000 at 0 ->
    # 2000, then at 1.024 ms -> 1000 = XON: resume; refreshes every 167.8 us until then.
    run(tm, out, 3_500_000, start_ns=refresh + 2000)
    quanta = [_quanta(f) for f in _pfc_frames(out[1])]
    assert quanta[-1] == 0 and all(q == XOFF_QUANTA for q in quanta[:-1])
    xon_at = [t for t, f in out[1].frames if f[12:14] == b"\x88\x08"][-1]
    second_departure = (1000 + WIRE_OVERHEAD_BYTES) * 1000
    assert second_departure <= xon_at <= second_departure + 2000
    assert len(quanta) - 1 == 1 + second_departure // refresh
    assert tm.ports[1].pause_tx[ROCE_PRIO] == len(quanta) - 1
    assert tm.ports[1].resume_tx[ROCE_PRIO] == 1
    # No more refreshes after XON.
    run(tm, out, 20_000_000, step_ns=100_000, start_ns=3_600_000)
    assert len(_pfc_frames(out[1])) == len(quanta)


def test_pause_frame_goes_out_before_queued_data():
    tm, _, _ = make_tm([(1, MBPS8, 0), (2, 8 * MBPS8, 0)])
    out = attach(tm)
    for i in range(5):                    # data queued on port 1 (from port 2)
        tm.enqueue(0, roce(1000, ident=i), verdict(1, 2, 0))
    tm.transmit(0)                # the first data frame is on the wire
    for i in range(3):                    # lossless traffic from port 1 crosses XOFF
        tm.enqueue(10, roce(1000, ident=10 + i), verdict(2, 1, ROCE_PRIO, pfc=PFC))
    run(tm, out, 6_000_000, step_ns=1000, start_ns=1000)
    kinds = ["pfc" if f[12:14] == b"\x88\x08" else "data" for _, f in out[1].frames]
    assert kinds[:2] == ["data", "pfc"] and kinds.count("data") == 5
    wire_times = [t for t, _ in out[1].frames]
    assert wire_times == sorted(wire_times)


def test_xoff_when_lossless_spills_into_headroom_below_xoff():
    """A shared pool filled by lossy traffic: lossless goes to headroom, and pauses."""
    tm, _, _ = make_tm([(1, MBPS8, 0), (2, MBPS8, 0), (3, MBPS8, 0)], buffer_bytes=30_000)
    tm.buffer.reserve_headroom(20_000)              # shared pool: 10 KB
    assert tm.enqueue(0, roce(4000), verdict(3, 2, 0))
    assert tm.enqueue(0, roce(3000), verdict(1, 2, 0))   # each queue below DT: 7 KB shared used
    ok = [tm.enqueue(0, roce(1500, ident=i), verdict(3, 1, ROCE_PRIO, pfc=(9000, 5000, 20_000)))
          for i in range(4)]
    assert ok == [True] * 4
    cell = 1 * 8 + ROCE_PRIO
    assert tm.buffer.ingress_bytes[cell] == 6000 < 9000
    assert tm.buffer.headroom_used[cell] == 6000 - 1500 * 2     # two fit in the pool
    assert tm.buffer.xoff[cell] and tm.ports[1].pause_tx[ROCE_PRIO] == 1


def test_headroom_exhausted_is_a_headroom_drop():
    tm, _, _ = make_tm([(1, MBPS8, 0), (2, MBPS8, 0)])
    v = verdict(2, 1, ROCE_PRIO, pfc=(2000, 1000, 3000))
    got = [tm.enqueue(0, roce(1000, ident=i), v) for i in range(6)]
    assert got == [True] * 5 + [False]               # 2000 in the pool + 3000 of headroom
    assert tm.ports[2].drops[ROCE_PRIO] == 1         # at the egress queue
    assert tm.ports[1].headroom_drops[ROCE_PRIO] == 1   # the ingress headroom was short


# ---------------------------------------------------------------- lossless under load

RATE = 1_000_000_000          # hosts and ingress links: 1 Gbps
DELAY_NS = 10_000             # 10 us each way
FRAME = 1000


def _incast(lossless: bool, frames_per_host: int = 100):
    """Three hosts blast into one egress port four times slower, honouring pauses."""
    hosts = (1, 2, 3)
    buffer_bytes = 40_000
    xoff, xon = 5000, 3000
    headroom = 2 * RATE * DELAY_NS // 8 // 10**9 + 3 * (FRAME + 24)   # 2 x BDP + 3 frames
    tm, state, pipe = make_tm([(p, RATE, DELAY_NS) for p in hosts] + [(4, RATE // 4, DELAY_NS)],
                              buffer_bytes=buffer_bytes)
    if lossless:
        tm.buffer.reserve_headroom(3 * headroom)
    pfc = (xoff, xon, headroom) if lossless else None
    frame_ns = (FRAME + 24) * 8 * 10**9 // RATE
    paused_until = {h: 0 for h in hosts}
    next_send = {h: h * 100 for h in hosts}
    sent = {h: 0 for h in hosts}
    arrivals = []            # (arrive_ns, host, frame): the host -> switch wire
    delivered = []

    class HostRx:            # what a switch port's wire hands to the host behind it
        def __init__(self, host):
            self.host = host

        def __call__(self, frame):
            if frame[12:14] == b"\x88\x08":
                q = _quanta(bytes(frame))
                paused_until[self.host] = now + pause_ns(q, RATE) if q else 0
            else:
                delivered.append(bytes(frame))

    for h in hosts:
        tm.ports[h].send = HostRx(h)
    tm.ports[4].send = lambda f: delivered.append(bytes(f))
    total = frames_per_host * len(hosts)
    now = 0
    while len(delivered) < total and now < 100_000_000:
        for h in hosts:
            if sent[h] < frames_per_host and now >= next_send[h] and now >= paused_until[h]:
                f = roce(FRAME, ident=sent[h], sport=49152 + h)
                arrivals.append((now + frame_ns + DELAY_NS, h, f))
                sent[h] += 1
                next_send[h] = now + frame_ns
        while arrivals and arrivals[0][0] <= now:
            _, h, f = arrivals.pop(0)
            tm.enqueue(now, f, verdict(4, h, ROCE_PRIO, pfc=pfc))
        tm.poll(now)
        tm.transmit(now)
        if not lossless and all(sent[h] == frames_per_host for h in hosts) and not arrivals \
                and not tm.ports[4].nonempty and not tm.ports[4].wire.in_flight:
            break
        now += 1000
    return tm, delivered, total


def test_lossless_class_never_drops_while_headroom_holds():
    tm, delivered, total = _incast(lossless=True)
    assert total * FRAME > 5 * tm.buffer.buffer_bytes          # far more than the buffer
    assert len(delivered) == total
    assert sum(tm.ports[4].drops) == 0
    assert sum(p.headroom_drops[ROCE_PRIO] for p in tm.port_list) == 0
    assert all(tm.ports[h].pause_tx[ROCE_PRIO] > 0 for h in (1, 2, 3))
    assert all(tm.ports[h].resume_tx[ROCE_PRIO] > 0 for h in (1, 2, 3))
    assert tm.buffer.shared_used == 0 and sum(tm.buffer.ingress_bytes) == 0
    assert max(tm.buffer.max_headroom_used) > 0                # the headroom did its job


def test_lossy_class_under_the_same_load_drops():
    tm, delivered, total = _incast(lossless=False)
    drops = tm.ports[4].drops[ROCE_PRIO]
    assert drops > 0 and len(delivered) == total - drops
    assert sum(p.pause_tx[ROCE_PRIO] for p in tm.port_list) == 0


@pytest.mark.parametrize("quanta", [1, 0xFFFF])
def test_pfc_tx_counter_counts_every_pause_frame(quanta):
    tm, state, pipe = make_tm([(1, MBPS8, 0), (2, MBPS8, 0)])
    tm._send_pfc(0, 1 * 8 + 5, quanta)
    tm._send_pfc(0, 1 * 8 + 5, 0)
    c = state.counters[pipe.ids.pfc_tx_counter]
    assert (c.packets[13], c.bytes[13]) == (2, 120)


def test_cleared_stats_count_a_pause_in_force_from_the_clear_only():
    """``clear_stats`` (a live fabric's next run): a pause that spans the
    clear counts its time after it; one that ran out before the clear but
    was not yet expired by the loop adds nothing; counters restart at 0."""
    q = (0, 0, 0, 10, 0, 0, 0, 0)                 # 10 quanta = 640 us
    spans, _, _ = make_tm([(1, MBPS8, 0)])
    spans.pfc_received(0, 1, 0x08, q)
    spans.transmit(500_000)
    spans.clear_stats(500_000)
    assert spans.ports[1].pause_rx[ROCE_PRIO] == 0
    assert spans.ports[1].paused_ns_at(ROCE_PRIO, 500_000) == 0
    spans.transmit(5_000_000)
    assert spans.ports[1].paused_ns[ROCE_PRIO] == 140_000        # 640 - 500 us
    ran_out, _, _ = make_tm([(1, MBPS8, 0)])
    ran_out.pfc_received(0, 1, 0x08, q)
    ran_out.clear_stats(700_000)                  # 60 us after it ran out, not yet expired
    assert ran_out.ports[1].paused_ns_at(ROCE_PRIO, 700_000) == 0
    ran_out.transmit(5_000_000)
    assert ran_out.ports[1].paused == 0 and ran_out.ports[1].paused_ns[ROCE_PRIO] == 0


FAR_NS = 10**9               # a wire that delivers nothing during a test


def test_a_frame_for_an_idle_port_with_a_pause_of_this_instant_waiting_starts_now_not_before():
    """An arrival that triggers an XOFF out of port 1 and a frame for port 1,
    idle since long ago, at the same instant: the pause goes first, at that
    instant, and the frame after it -- never from the port's old idle time,
    which would send it before it arrived (in virtual time: into a window
    already closed; found by a tree all-reduce on 64 GPUs under PFC)."""
    fast = 100_000_000_000
    tm, _, _ = make_tm([(1, fast, 0), (2, fast, 0)])
    tm.ports[1].wire = Wire(FAR_NS)          # nothing delivered: in_flight keeps every frame
    lossless = verdict(2, 1, ROCE_PRIO, pfc=PFC)
    assert tm.enqueue(1_000, roce(1000, ident=9), verdict(1, 2, 0))   # port 1 busy, then idle
    tm.transmit(1_000)
    now = 5_000_000
    for i in range(3):                                               # the third: XOFF out of port 1
        assert tm.enqueue(now, roce(1000, ident=i), lossless)
    assert [t for t, _ in tm.ports[1].ctrl] == [now]
    assert tm.enqueue(now, roce(1000, ident=7), verdict(1, 2, 0))     # for port 1, at the same instant
    tm.transmit(now + 1_000)
    ends = [t - FAR_NS for t, _ in tm.ports[1].wire.in_flight]     # serializations' ends
    # (fractional ns: a frame's time at 100 Gb/s is 0.08 ns a byte, not rounded)
    pause_end = now + (len(tm.ports[1].wire.in_flight[1][1]) + WIRE_OVERHEAD_BYTES) * 0.08
    assert len(ends) == 3 and _quanta(tm.ports[1].wire.in_flight[1][1]) == XOFF_QUANTA
    assert ends[1] == pytest.approx(pause_end, abs=1e-6)             # the pause, from now
    assert ends[2] == pytest.approx(pause_end + (1000 + WIRE_OVERHEAD_BYTES) * 0.08, abs=1e-6)
