"""One clock, injected: every timed part of the emulator asks it for the time
and waits through it, so that tests can drive time by hand.

* ``MonotonicClock`` -- real runs: ``CLOCK_MONOTONIC`` in ns, shared by every
  process of a run (switches, agents and the runner stamp their logs with
  it; results convert it to fabric time).
* ``ManualClock`` -- tests: time moves only when the test (or a wait that
  would otherwise block) moves it. A wait on file descriptors polls them
  without blocking and, when nothing is ready, jumps to the deadline: a
  part driven by a manual clock never sleeps and never races the machine.
* ``TimerHeap`` -- the one event-timer structure (htsim's event list): a heap
  of (deadline, sequence, item). Ties keep insertion order, so equal
  deadlines fire first-in first-out and runs are deterministic.

Times here are *wall* (emulation) nanoseconds, ``wall_ns``: in a dilated run
a fabric time is ``(wall_ns - t0) / D``. Code that reports fabric time
converts at its edge; the clock itself knows nothing of dilation.
"""
from __future__ import annotations

import heapq
import itertools
import select
import time
from typing import Any, Iterator, Protocol, Sequence

NEVER_NS = 1 << 62                # a fabric time no event reaches


class Clock(Protocol):
    """What a timed part needs from time."""

    def now_ns(self) -> int:
        """Monotonic time, ns."""

    def unix_ns(self) -> int:
        """Wall-clock time (Unix epoch), ns: for stamps users correlate with
        other tools (pcaps, logs), never for intervals."""

    def sleep_until_ns(self, deadline_ns: int) -> None:
        """Return at or after ``deadline_ns``."""

    def wait_readable(self, fds: Sequence[int], deadline_ns: int) -> Sequence[int]:
        """Wait until one of ``fds`` is readable or ``deadline_ns``; the
        readable ones (empty at the deadline)."""


class MonotonicClock:
    """The real clock of a run: ``time.monotonic_ns``.

    ``spin_ns``: a wait ends by polling for its last ``spin_ns`` instead of
    sleeping through them. A timed wake-up from ``select`` comes ~16 us
    late on this project's VM (its timer interrupt through the hypervisor,
    with the PM QoS request of ``net/wake_latency.py`` held), and a NIC's
    frame is sent that late. Polling costs the CPU it spins, so only a
    process with a core of its own spins (``net/packing.wake_spin_ns``):
    incast-pfc at D = 1000, NIC lateness ratio 0.32-0.40 -> 0.25-0.32."""

    __slots__ = ("spin_ns",)
    # bound once: hot paths call ``clock.now_ns()`` per packet
    now_ns = staticmethod(time.monotonic_ns)
    unix_ns = staticmethod(time.time_ns)

    def __init__(self, spin_ns: int = 0):
        self.spin_ns = int(spin_ns)

    def sleep_until_ns(self, deadline_ns: int) -> None:
        while True:
            left = deadline_ns - time.monotonic_ns()
            if left <= 0:
                return
            time.sleep(left / 1e9)

    def wait_readable(self, fds: Sequence[int], deadline_ns: int) -> Sequence[int]:
        left = deadline_ns - time.monotonic_ns()
        spin = self.spin_ns
        try:
            if left <= 0 or not spin:
                return select.select(fds, (), (), max(0.0, left / 1e9))[0]
            if left > spin:
                r = select.select(fds, (), (), (left - spin) / 1e9)[0]
                if r:
                    return r
            while True:                # the last spin_ns: poll, never sleep
                r = select.select(fds, (), (), 0)[0]
                if r or time.monotonic_ns() >= deadline_ns:
                    return r
        except InterruptedError:
            return ()


MONOTONIC = MonotonicClock()


def ceil_ns(t: float) -> int:
    """A fractional event time (a paced frame's, an NVLink arrival's, a
    staging copy's end) as the whole ns to wake at: the event is due then,
    not a ns later when ``t`` is whole; never a ns before, where nothing
    would be due and the loop would wait again at once -- forever on a
    clock that moves only when a wait asks it to (``ManualClock``, virtual
    time's)."""
    w = int(t)
    return w if w >= t else w + 1


class ManualClock:
    """A clock that tests advance. ``unix_ns`` is ``unix_epoch_ns`` + now."""

    __slots__ = ("_now_ns", "unix_epoch_ns")

    def __init__(self, start_ns: int = 0, unix_epoch_ns: int = 1_700_000_000_000_000_000):
        self._now_ns = int(start_ns)
        self.unix_epoch_ns = unix_epoch_ns

    def now_ns(self) -> int:
        return self._now_ns

    def unix_ns(self) -> int:
        return self.unix_epoch_ns + self._now_ns

    def advance(self, delta_ns: int) -> int:
        """Move time forward by ``delta_ns`` (>= 0); the new time."""
        if delta_ns < 0:
            raise ValueError("a clock does not go backwards")
        self._now_ns += int(delta_ns)
        return self._now_ns

    def set(self, t_ns: int) -> int:
        """Move time forward to ``t_ns`` (no-op if it is already past)."""
        if t_ns > self._now_ns:
            self._now_ns = int(t_ns)
        return self._now_ns

    def sleep_until_ns(self, deadline_ns: int) -> None:
        self.set(deadline_ns)

    def wait_readable(self, fds: Sequence[int], deadline_ns: int) -> Sequence[int]:
        # what is there now is seen at once; else nothing arrives until the
        # test sends it, so time jumps to the deadline
        r, _, _ = select.select(fds, (), (), 0) if fds else ((), (), ())
        if not r:
            self.set(deadline_ns)
        return r


class TimerHeap:
    """Deadlines, earliest first, each with an item (anything: a callback,
    a frame, a queue cell). ``cancel`` is lazy: a cancelled entry is skipped
    when it reaches the top, so push and cancel are O(log n) and O(1)."""

    __slots__ = ("_heap", "_seq", "_cancelled")

    def __init__(self):
        self._heap: list[list] = []
        self._seq = itertools.count()
        self._cancelled = 0

    def __len__(self) -> int:
        return len(self._heap) - self._cancelled

    def __bool__(self) -> bool:
        return len(self._heap) > self._cancelled

    def push(self, due_ns: int, item: Any) -> list:
        """Schedule ``item`` at ``due_ns``; returns a handle for ``cancel``."""
        entry = [due_ns, next(self._seq), item, True]
        heapq.heappush(self._heap, entry)
        return entry

    def cancel(self, handle: list) -> None:
        if handle[3]:
            handle[3] = False
            self._cancelled += 1

    def _skip_cancelled(self) -> None:
        h = self._heap
        while h and not h[0][3]:
            heapq.heappop(h)
            self._cancelled -= 1

    def next_due_ns(self) -> int | None:
        """The earliest live deadline, or None."""
        if self._cancelled:
            self._skip_cancelled()
        return self._heap[0][0] if self._heap else None

    def pop_due_with_time(self, now_ns: int) -> Iterator[tuple[int, Any]]:
        """Remove and yield, in deadline order, ``(due_ns, item)`` for each item
        due by ``now_ns`` (items pushed meanwhile that are due are yielded too)."""
        h = self._heap
        while True:
            if self._cancelled:
                self._skip_cancelled()
            if not h or h[0][0] > now_ns:
                return
            entry = heapq.heappop(h)
            entry[3] = False            # fired: a later cancel is a no-op
            yield entry[0], entry[2]

    def pop_due(self, now_ns: int) -> Iterator[Any]:
        """As ``pop_due_with_time``, yielding the items only."""
        for _, item in self.pop_due_with_time(now_ns):
            yield item

    def run_due(self, now_ns: int) -> int:
        """Call each due item, which must be ``(fn, args)``; how many ran."""
        n = 0
        for fn, args in self.pop_due(now_ns):
            fn(*args)
            n += 1
        return n

    def clear(self) -> None:
        self._heap.clear()
        self._cancelled = 0
