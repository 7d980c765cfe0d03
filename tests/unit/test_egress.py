"""The wire releases frames after the propagation delay and reports lateness.

Serialization and queueing are tested with the traffic manager (test_tm.py)."""
from emulator.link import LATE_BUCKETS, Wire, bucket_bounds, lateness_bucket


def test_wire_reports_lateness():
    w = Wire(0)
    w.put(1_000, b"x")
    w.put(2_999_990, b"y")
    w.release(3_000_000, lambda f: None)
    st = w.lateness_stats()
    assert st["released_frames"] == 2 and st["max_lateness_ns"] == 3_000_000 - 1_000
    # 10 ns has a bucket of its own; 2 999 000 ns one of [2 883 584, 3 145 727]
    assert st["lateness_hist"] == [[10, 10, 1], [2_883_584, 3_145_727, 1]]


def test_lateness_buckets_tile_and_hold_their_values():
    prev_hi = -1
    for b in range(LATE_BUCKETS):
        lo, hi = bucket_bounds(b)
        assert lo == prev_hi + 1 and hi >= lo
        assert hi - lo + 1 <= max(1, lo / 8)          # 8 buckets per octave
        prev_hi = hi
    for late in (0, 15, 16, 17, 1000, 999_999, 10**9 + 7, (1 << 61) - 1):
        lo, hi = bucket_bounds(lateness_bucket(late))
        assert lo <= late <= hi
