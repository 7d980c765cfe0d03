"""The traffic manager: strict priority, shared-buffer admission, ECN marking, counters, logs."""
from __future__ import annotations

import math
import random

from scapy.layers.inet import IP
from scapy.layers.l2 import Ether

from emulator.link import Wire
from emulator.dataplane.pipeline import _ipv4_header_checksum
from emulator.dataplane.shared_buffer import SharedBuffer
from emulator.dataplane.tm import set_ce
from emulator.wire import WIRE_OVERHEAD_BYTES
from tests.unit.test_tm_helpers import ROCE_PRIO, attach, make_tm, roce, run, verdict

MBPS8 = 8_000_000


def _ident(frame) -> int:
    return frame[18] << 8 | frame[19]


def _csum_ok(frame) -> bool:
    s = sum((frame[i] << 8) | frame[i + 1] for i in range(14, 34, 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s == 0xFFFF


# ---------------------------------------------------------------- scheduling

def test_back_to_back_frames_take_their_exact_fractional_time():
    """An MTU frame at 100 Gb/s takes (1082 + 24) x 0.08 = 88.48 ns: ten
    queued at once leave 88.48 ns apart, not a rounded 88 (the link 0.5 %
    fast: in virtual time, where a ns is a ns, every switch-paced FCT short)."""
    fast = 100_000_000_000
    tm, _, _ = make_tm([(1, fast, 0), (2, fast, 0)])
    tm.ports[1].wire = Wire(10**9)               # nothing delivered: in_flight keeps each end
    for i in range(10):
        assert tm.enqueue(1_000, roce(1082, ident=i), verdict(1, 2, ROCE_PRIO))
    tm.transmit(10_000)
    ends = [due - 10**9 for due, _ in tm.ports[1].wire.in_flight]
    frame_ns = (1082 + WIRE_OVERHEAD_BYTES) * 8e9 / fast
    assert frame_ns == 88.48
    assert len(ends) == 10
    for k, end in enumerate(ends):
        assert math.isclose(end, 1_000 + (k + 1) * frame_ns, abs_tol=1e-6), (k, end)


def test_strict_priority_order():
    tm, _, _ = make_tm([(1, MBPS8, 0), (2, MBPS8, 0)])
    out = attach(tm)
    for ident, prio in ((1, 0), (2, 3), (3, 7), (4, 3), (5, 6), (6, 0)):
        assert tm.enqueue(0, roce(100, ident=ident), verdict(1, 2, prio))
    run(tm, out, 2_000_000)
    assert [_ident(f) for _, f in out[1].frames] == [3, 5, 2, 4, 1, 6]


def test_higher_priority_waits_for_the_frame_being_serialized_only():
    tm, _, _ = make_tm([(1, MBPS8, 10**9), (2, MBPS8, 0)])
    tm.enqueue(0, roce(1000, ident=1), verdict(1, 2, 0))
    tm.enqueue(0, roce(1000, ident=2), verdict(1, 2, 0))
    tm.transmit(0)                            # frame 1 starts at 0
    tm.enqueue(500_000, roce(1000, ident=3), verdict(1, 2, 7))
    tm.transmit(5_000_000)
    got = [(_ident(f), t - 10**9) for t, f in tm.ports[1].wire.in_flight]
    per = (1000 + WIRE_OVERHEAD_BYTES) * 1000
    assert got == [(1, per), (3, 2 * per), (2, 3 * per)]


def test_idle_link_starts_when_the_frame_arrives_and_serves_back_to_back():
    tm, _, _ = make_tm([(1, MBPS8, 0), (2, MBPS8, 0)])
    tm.ports[1].wire = Wire(10**9)
    tm.enqueue(7_000_000, roce(976, ident=1), verdict(1, 2, 0))
    tm.enqueue(7_000_000, roce(976, ident=2), verdict(1, 2, 3))
    tm.transmit(9_500_000)                   # served late: schedule kept
    assert [(_ident(f), t - 10**9) for t, f in tm.ports[1].wire.in_flight] == \
        [(2, 8_000_000), (1, 9_000_000)]


def test_wire_keeps_release_order():
    w = Wire(100)
    for t, f in ((10, b"a"), (30, b"b"), (20, b"c"), (30, b"d"), (5, b"e")):
        w.put(t, f)
    assert [f for _, f in w.in_flight] == [b"e", b"a", b"c", b"b", b"d"]


# ---------------------------------------------------------------- admission

def test_shared_buffer_dynamic_threshold_for_lossy():
    buf = SharedBuffer(10_000)
    assert buf.admit_lossy(0, 1000, 0)
    assert not buf.admit_lossy(0, 1000, 9000)         # depth 9000 >= free 9000
    assert buf.admit_lossy(0, 1000, 4000)
    buf.reserve_headroom(6000)                        # pool 4000, 2000 used
    assert not buf.admit_lossy(0, 1000, 2000)         # 2000 >= free 2000
    assert buf.admit_lossy(0, 1000, 1000)
    assert not buf.admit_lossy(0, 1001, 0)            # more than the free 1000
    assert buf.ingress_bytes[0] == 3000
    assert buf.release(0, 1000) == 2000 and buf.shared_used == 2000


def test_one_lossy_queue_gets_about_half_the_buffer_and_others_still_get_in():
    tm, _, _ = make_tm([(1, MBPS8, 0), (2, MBPS8, 0), (3, MBPS8, 0)], buffer_bytes=100_000)
    ok = sum(tm.enqueue(0, roce(1000, ident=i), verdict(1, 2, 0)) for i in range(200))
    assert ok == 50 and tm.ports[1].drops[0] == 150 and tm.ports[1].drop_bytes[0] == 150_000
    assert tm.enqueue(0, roce(1000), verdict(3, 2, 0))   # another queue: free 49 KB
    assert tm.buffer.max_shared_used == 51_000


def test_lossless_uses_pool_then_headroom_and_released_headroom_first():
    buf = SharedBuffer(100_000)
    cell = 11
    for _ in range(3):
        assert buf.admit_lossless(cell, 1000, 2500, 2000)
    assert (buf.ingress_bytes[cell], buf.headroom_used[cell], buf.shared_used) == (3000, 0, 3000)
    assert buf.admit_lossless(cell, 1000, 2500, 2000)    # above XOFF: headroom
    assert buf.admit_lossless(cell, 1000, 2500, 2000)
    assert not buf.admit_lossless(cell, 1000, 2500, 2000)
    assert (buf.headroom_used[cell], buf.shared_used) == (2000, 3000)
    assert buf.release(cell, 1000) == 4000 and buf.headroom_used[cell] == 1000
    assert buf.release(cell, 1500) == 2500 and (buf.headroom_used[cell], buf.shared_used) == (0, 2500)


def test_inlined_admission_and_release_match_the_shared_buffer_model():
    """TrafficManager.enqueue / PriorityPort.serve inline SharedBuffer's methods: same state."""
    rng = random.Random(5)
    tm, _, _ = make_tm([(p, MBPS8, 0) for p in (1, 2, 3, 4)], buffer_bytes=60_000)
    tm.buffer.reserve_headroom(12_000)
    model = SharedBuffer(60_000)
    model.reserve_headroom(12_000)
    pfc = {1: (6000, 3000, 4000), 2: None, 3: (9000, 8000, 8000)}
    fifo = {p: [] for p in (1, 2, 3, 4)}              # the model's queues: (cell, size, prio)
    now = 0
    for step in range(6000):
        now += rng.choice((0, 0, 50, 400))
        ingress = rng.choice((1, 2, 3))
        egress = 4 if rng.random() < 0.8 else rng.choice((1, 2, 3))
        prio = rng.choice((0, 3, 3, 3, 6))
        size = rng.choice((64, 500, 1000, 1500))
        p = pfc[ingress] if prio == 3 else None
        cell = ingress * 8 + prio
        depth = sum(s for _, s, q in fifo[egress] if q == prio)
        ok = model.admit_lossy(cell, size, depth) if p is None else \
            model.admit_lossless(cell, size, p[0], p[2])
        assert tm.enqueue(now, roce(size, ident=step & 0xFFFF), verdict(egress, ingress, prio, pfc=p)) == ok
        if ok:
            fifo[egress].append((cell, size, prio))
        if rng.random() < 0.3:
            before = {no: sum(port.tx_packets) for no, port in tm.ports.items()}
            tm.transmit(now)
            for no, port in tm.ports.items():
                for _ in range(sum(port.tx_packets) - before[no]):
                    top = max(q for _, _, q in fifo[no])          # strict priority, FIFO within
                    i = next(i for i, e in enumerate(fifo[no]) if e[2] == top)
                    c, s, _ = fifo[no].pop(i)
                    model.release(c, s)
        for attr in ("shared_used", "max_shared_used", "ingress_bytes", "headroom_used",
                     "max_headroom_used"):
            assert getattr(tm.buffer, attr) == getattr(model, attr), (step, attr)
    assert max(model.max_headroom_used) > 0 and sum(sum(p.drops) for p in tm.port_list) > 0


# ---------------------------------------------------------------- ECN

def test_set_ce_updates_the_checksum_incrementally():
    for tos in (0b01, 0b10, (26 << 2) | 0b10, (48 << 2) | 1):
        for ident in range(0, 65536, 4099):
            f = bytearray(roce(200, ecn=tos & 3, dscp=tos >> 2, ident=ident))
            set_ce(f)
            assert f[15] & 3 == 3 and f[15] >> 2 == tos >> 2
            assert _csum_ok(f)
            assert (f[24] << 8 | f[25]) == _ipv4_header_checksum(f)   # what update_checksum gives
            assert IP(bytes(f[14:])).chksum == Ether(bytes(f))[IP].chksum


KMIN, KMAX, PMAX = 100_000, 900_000, 500     # pmax 50 %


def _fill_and_collect(seed, ecn_bits=0b10, n=10_000, size=100):
    tm, state, pipe = make_tm([(1, MBPS8, 0), (2, MBPS8, 0)], buffer_bytes=4_000_000, seed=seed)
    v = verdict(1, 2, ROCE_PRIO, ecn=(KMIN, KMAX, PMAX))
    found = []
    for i in range(n):
        found.append(tm.ports[1].depth[ROCE_PRIO])
        assert tm.enqueue(0, roce(size, ecn=ecn_bits, ident=i & 0xFFFF), v)
    frames = [f for f, _ in tm.ports[1].queues[ROCE_PRIO]]
    return tm, state, pipe, found, frames


def test_ecn_marking_follows_red_on_the_depth_found_at_enqueue():
    tm, state, pipe, found, frames = _fill_and_collect(seed=7)
    marked = [f[15] & 3 == 3 for f in frames]
    assert not any(m for d, m in zip(found, marked) if d <= KMIN)
    assert all(m for d, m in zip(found, marked) if d >= KMAX)
    # In between: P = pmax (d - kmin) / (kmax - kmin); per bin, within 4 sigma.
    edges = [KMIN + i * (KMAX - KMIN) // 4 for i in range(5)]
    for lo, hi in zip(edges, edges[1:]):
        ps = [PMAX / 1000 * (d - KMIN) / (KMAX - KMIN) for d in found if lo < d < hi]
        got = sum(m for d, m in zip(found, marked) if lo < d < hi)
        mean, sd = sum(ps), math.sqrt(sum(p * (1 - p) for p in ps))
        assert abs(got - mean) <= 4 * sd + 1, (lo, hi, got, mean)
    assert all(_csum_ok(f) for f in frames)
    assert all(f[15] >> 2 == 26 for f in frames)
    n_marks = sum(marked)
    assert tm.ports[1].ecn_marks[ROCE_PRIO] == n_marks
    c = state.counters[pipe.ids.ecn_mark_counter]
    assert (c.packets[1 * 8 + ROCE_PRIO], c.bytes[1 * 8 + ROCE_PRIO]) == (n_marks, 100 * n_marks)


def test_ecn_marking_is_reproducible_with_a_seed():
    marks = lambda seed: [f[15] & 3 == 3 for f in _fill_and_collect(seed, n=3000)[4]]  # noqa: E731
    assert marks(3) == marks(3) != marks(4)


def test_not_ect_is_never_marked():
    _, _, _, found, frames = _fill_and_collect(seed=7, ecn_bits=0, n=10_000)
    assert max(found) > KMAX
    assert all(f[15] & 3 == 0 for f in frames)


def test_no_ecn_config_no_marks():
    tm, _, _ = make_tm([(1, MBPS8, 0), (2, MBPS8, 0)], buffer_bytes=4_000_000)
    for i in range(2000):
        tm.enqueue(0, roce(1000, ident=i), verdict(1, 2, ROCE_PRIO))
    assert tm.ports[1].depth[ROCE_PRIO] > KMAX
    assert all(f[15] & 3 == 0b10 for f, _ in tm.ports[1].queues[ROCE_PRIO])


# ---------------------------------------------------------------- counters, logs, stats

def test_counters_readable_through_state_counters():
    tm, state, pipe = make_tm([(1, MBPS8, 0), (2, MBPS8, 0), (3, MBPS8, 0)])
    out = attach(tm)
    sizes = {0: [100, 200], 3: [300, 400, 500], 6: [600]}
    for prio, ss in sizes.items():
        for s in ss:
            tm.enqueue(0, roce(s), verdict(3, 1, prio))
    tm.enqueue(0, roce(1000), verdict(1, 2, 3))
    run(tm, out, 10_000_000)
    ids = pipe.ids
    tx, txp = state.counters[ids.tx_port_counter], state.counters[ids.tx_prio_counter]
    all3 = [s for ss in sizes.values() for s in ss]
    assert (tx.packets[3], tx.bytes[3]) == (len(all3), sum(all3))
    assert (tx.packets[1], tx.bytes[1]) == (1, 1000)
    for prio, ss in sizes.items():
        assert (txp.packets[3 * 8 + prio], txp.bytes[3 * 8 + prio]) == (len(ss), sum(ss))
    assert (txp.packets[1 * 8 + 3], txp.bytes[1 * 8 + 3]) == (1, 1000)
    assert sum(txp.packets) == len(all3) + 1
    st = tm.port_stats(3, 10_000_000)
    assert [p["tx_packets"] for p in st["priorities"]] == [2, 0, 0, 3, 0, 0, 1, 0]
    assert st["priorities"][3]["max_depth_bytes"] == 1200
    assert st["tx_bytes"] == sum(all3)


def test_events_and_queue_depth_samples():
    events = []
    tm, _, _ = make_tm([(1, MBPS8, 0), (2, MBPS8, 0)], buffer_bytes=5000,
                       log=lambda *row: events.append(row))
    rows = []
    tm.sample(0, rows.append)
    assert rows == []
    for i in range(4):
        tm.enqueue(100, roce(1000, ident=i), verdict(1, 2, 0))     # DT: the 4th is dropped
    tm.enqueue(100, roce(1000, ident=9), verdict(1, 2, ROCE_PRIO, ecn=(0, 0, 1000)))   # at Kmax: marked
    tm.sample(150, rows.append)
    assert rows == ["150,1,0,3000\n", "150,1,3,1000\n"]
    tm.pfc_received(200, 1, 1 << 5, (0, 0, 0, 0, 0, 10, 0, 0))      # serves up to 200 first
    tm.sample(300, rows.append)
    tm.sample(400, rows.append)                                    # nothing changed
    assert rows[2:] == ["300,1,3,0\n"]                             # priority 3 went first
    assert (100, 1, 0, "drop", 1000) in events
    assert (100, 1, ROCE_PRIO, "ecn_mark", 0) in events
    assert (200, 1, 5, "pause_rx", 10) in events
    tm.transmit(10**9)
    assert (200 + 640_000, 1, 5, "resume_rx", 0) in events
    assert [e[3] for e in events] == ["drop", "ecn_mark", "pause_rx", "resume_rx"]
