"""The egress queue serializes at the link rate, byte-accurately, and drops at its limit."""
from emulator.dataplane.egress import WIRE_OVERHEAD_BYTES, EgressQueue, Wire


def _run(queue, wire, until_ns, step_ns=1000):
    sent = []
    for now in range(0, until_ns, step_ns):
        queue.serve(now, wire, lambda f: None)
        wire.release(now, lambda f, now=now: sent.append((now, f)), late_threshold_ns=10**12)
    return sent


def test_back_to_back_frames_leave_at_the_link_rate():
    rate_bps = 10_000_000                       # 1000-byte frame + 24 B overhead = 819.2 us
    q, w = EgressQueue(rate_bps, 100_000), Wire(delay_ns=50_000)
    for _ in range(5):
        assert q.enqueue(0, b"x" * 1000)
    sent = _run(q, w, 6_000_000)
    times = [t for t, _ in sent]
    per_frame_ns = (1000 + WIRE_OVERHEAD_BYTES) * 8 * 1e9 / rate_bps
    assert len(times) == 5
    # First frame: serialization + propagation; then one frame per serialization time.
    assert abs(times[0] - (per_frame_ns + 50_000)) <= 1000
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(abs(g - per_frame_ns) <= 1000 for g in gaps), gaps


def test_late_service_keeps_fabric_time():
    """Serving late does not stretch the schedule: start times stay back to back."""
    q, w = EgressQueue(8_000_000, 100_000), Wire(0)   # 1 byte per us
    q.enqueue(0, b"x" * 976)                          # 1000 us on the wire
    q.enqueue(0, b"x" * 976)
    q.serve(5_000_000, w, lambda f: None)            # served 5 ms late: both start
    due = [t for t, _ in w.in_flight]
    assert due == [1_000_000, 2_000_000]


def test_buffer_limit_drops_and_counts():
    q = EgressQueue(1_000_000, 2500)
    assert q.enqueue(0, b"a" * 1000) and q.enqueue(0, b"b" * 1000)
    assert not q.enqueue(0, b"c" * 1000)
    assert (q.drops, q.drop_bytes, q.depth_bytes) == (1, 1000, 2000)


def test_idle_link_starts_when_the_frame_arrives():
    q, w = EgressQueue(8_000_000, 10_000), Wire(0)
    q.enqueue(7_000_000, b"x" * 976)
    q.serve(7_000_000, w, lambda f: None)
    assert [t for t, _ in w.in_flight] == [8_000_000]


def test_wire_reports_lateness():
    w = Wire(0)
    w.put(1_000, b"x")
    w.release(3_000_000, lambda f: None, late_threshold_ns=1_000_000)
    assert w.late_frames == 1 and w.max_lateness_ns == 3_000_000 - 1_000
