"""The injected clock and the shared timer heap."""
import os
import socket

import pytest

from emulator.clock import MONOTONIC, ManualClock, MonotonicClock, TimerHeap


def test_manual_clock_moves_only_forward():
    c = ManualClock(100)
    assert c.now_ns() == 100
    assert c.advance(50) == 150
    assert c.set(120) == 150            # never backwards
    assert c.set(200) == 200
    with pytest.raises(ValueError):
        c.advance(-1)
    assert c.unix_ns() == c.unix_epoch_ns + 200


def test_manual_wait_jumps_to_deadline_when_nothing_is_readable():
    c = ManualClock(0)
    a, b = socket.socketpair()
    try:
        assert list(c.wait_readable([a.fileno()], 5_000)) == []
        assert c.now_ns() == 5_000
        b.send(b"x")
        assert list(c.wait_readable([a.fileno()], 9_000)) == [a.fileno()]
        assert c.now_ns() == 5_000      # data was there: no time passed
    finally:
        a.close()
        b.close()


def test_monotonic_wait_returns_readable_at_once():
    r, w = os.pipe()
    try:
        os.write(w, b"x")
        assert list(MONOTONIC.wait_readable([r], MONOTONIC.now_ns() + 10**9)) == [r]
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("spin_ns", [0, 20_000, 10**9])
def test_a_spinning_wait_never_ends_before_its_deadline_and_sees_frames_at_once(spin_ns):
    clock = MonotonicClock(spin_ns=spin_ns)
    r, w = os.pipe()
    try:
        for wait_ns in (0, 1_000, 50_000, 2_000_000):
            deadline = clock.now_ns() + wait_ns
            assert list(clock.wait_readable([r], deadline)) == []
            assert clock.now_ns() >= deadline          # polled to the deadline, not before
        os.write(w, b"x")                          # readable: at once, spinning or sleeping
        assert list(clock.wait_readable([r], clock.now_ns() + 10**10)) == [r]
        assert list(clock.wait_readable([], clock.now_ns() - 5)) == []      # already due
    finally:
        os.close(r)
        os.close(w)


def test_timer_heap_orders_by_deadline_then_insertion():
    h = TimerHeap()
    h.push(30, "c")
    h.push(10, "a1")
    h.push(10, "a2")
    h.push(20, "b")
    assert h.next_due_ns() == 10 and len(h) == 4
    assert list(h.pop_due(15)) == ["a1", "a2"]
    assert list(h.pop_due_with_time(100)) == [(20, "b"), (30, "c")]
    assert not h and h.next_due_ns() is None


def test_timer_heap_cancel_and_run_due():
    h = TimerHeap()
    out = []
    h1 = h.push(5, (out.append, ("x",)))
    h.push(7, (out.append, ("y",)))
    h.cancel(h1)
    h.cancel(h1)                        # twice is harmless
    assert len(h) == 1 and h.next_due_ns() == 7
    assert h.run_due(6) == 0
    assert h.run_due(7) == 1 and out == ["y"]
    assert len(h) == 0


def test_timer_heap_yields_items_pushed_while_draining():
    h = TimerHeap()
    h.push(1, "first")
    seen = []
    for item in h.pop_due(10):
        seen.append(item)
        if item == "first":
            h.push(2, "second")
    assert seen == ["first", "second"]
