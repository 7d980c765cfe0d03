"""The wire releases frames after the propagation delay and reports lateness.

Serialization and queueing are tested with the traffic manager (test_tm.py)."""
from emulator.link import Wire


def test_wire_reports_lateness():
    w = Wire(0)
    w.put(1_000, b"x")
    w.release(3_000_000, lambda f: None, late_threshold_ns=1_000_000)
    assert w.late_frames == 1 and w.max_lateness_ns == 3_000_000 - 1_000
