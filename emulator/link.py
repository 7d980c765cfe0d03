"""A link beyond a port (a switch port or a NIC): frames in flight for the link's propagation delay.

htsim-style: ``priority_port.PriorityPort`` serializes frames byte-accurately at the
port's rate and hands each one, when its serialization ends, to ``Wire``,
which gives it to the veth after the link's propagation delay. Nothing is
shaped by the kernel: the only queues between this switch and the next hop
are the traffic manager's.

Times are wall nanoseconds of the emulation, passed in by the caller (read
from the switch's clock, ``emulator.clock``); the delays given here are
already dilated by the runner.

Lateness: every released frame's lateness (release time minus due time,
wall ns) goes into a log-scale histogram, ``LATE_SUB`` buckets per octave
(a bucket is at most 1/8 of its lower bound wide). The histogram is what
the run-fidelity verdict (``emulator.experiment.fidelity``) reads, in fabric
time; it costs a subtraction, a ``bit_length`` and an increment per frame.
"""
from __future__ import annotations

from bisect import insort
from collections import deque
from operator import itemgetter


_DUE = itemgetter(0)
LATE_SUB_BITS = 3                 # 2**3 = 8 buckets per octave
LATE_SUB = 1 << LATE_SUB_BITS
_SUB_MASK = LATE_SUB - 1
_EXACT_BELOW = 2 * LATE_SUB       # lateness below this has a bucket of its own
LATE_BUCKETS = 64 * LATE_SUB      # covers any 62-bit lateness


def lateness_bucket(late_ns: int) -> int:
    """The histogram bucket of a lateness (the formula ``Wire.release`` inlines)."""
    if late_ns < _EXACT_BELOW:
        return late_ns
    bl = late_ns.bit_length()
    return ((bl - LATE_SUB_BITS) << LATE_SUB_BITS) | ((late_ns >> (bl - LATE_SUB_BITS - 1)) & _SUB_MASK)


def bucket_bounds(bucket: int) -> tuple[int, int]:
    """The smallest and largest lateness (ns) of a bucket."""
    if bucket < _EXACT_BELOW:
        return bucket, bucket
    octave, sub = bucket >> LATE_SUB_BITS, bucket & _SUB_MASK
    shift = octave - 1
    return (LATE_SUB + sub) << shift, ((LATE_SUB + sub + 1) << shift) - 1


class Wire:
    """Frames in flight on a link: released ``delay_ns`` after serialization ends.

    Frames are kept in release order. They normally arrive in that order (one
    serializer per link); one put out of order (e.g. a MAC control frame
    scheduled ahead of data) is inserted in place, after frames due at the
    same time.
    """

    __slots__ = ("delay_ns", "in_flight", "max_lateness_ns", "late_hist")

    def __init__(self, delay_ns: int):
        self.delay_ns = delay_ns
        self.in_flight: deque[tuple[int, bytes]] = deque()
        self.max_lateness_ns = 0
        self.late_hist = [0] * LATE_BUCKETS     # frames released, by lateness bucket

    def put(self, serialized_at_ns: int, frame) -> None:
        due = serialized_at_ns + self.delay_ns
        in_flight = self.in_flight
        if in_flight and due < in_flight[-1][0]:
            insort(in_flight, (due, frame), key=_DUE)
        else:
            in_flight.append((due, frame))

    def next_release_ns(self) -> int | None:
        return self.in_flight[0][0] if self.in_flight else None

    def release(self, now_ns: int, send) -> int:
        """Send every frame due by ``now_ns``; returns how many were sent."""
        sent = 0
        in_flight = self.in_flight
        hist = self.late_hist
        while in_flight and in_flight[0][0] <= now_ns:
            due_ns, frame = in_flight.popleft()
            late = int(now_ns - due_ns)
            if late < _EXACT_BELOW:
                hist[late] += 1
            else:                                 # lateness_bucket, inlined
                bl = late.bit_length()
                hist[((bl - LATE_SUB_BITS) << LATE_SUB_BITS) | ((late >> (bl - LATE_SUB_BITS - 1)) & _SUB_MASK)] += 1
                if late > self.max_lateness_ns:
                    self.max_lateness_ns = late
            send(frame)
            sent += 1
        return sent

    def clear_stats(self) -> None:
        """Start a new lateness window (a live fabric's next run)."""
        self.max_lateness_ns = 0
        self.late_hist[:] = [0] * len(self.late_hist)

    def lateness_stats(self) -> dict:
        """Frames released, the largest lateness and the histogram's non-empty
        buckets as ``[lowest_ns, highest_ns, frames]`` (wall ns)."""
        hist = self.late_hist
        return {"released_frames": sum(hist), "max_lateness_ns": self.max_lateness_ns,
                "lateness_hist": [[*bucket_bounds(b), n] for b, n in enumerate(hist) if n]}


class CommitWire(Wire):
    """Virtual time (``emulator.vtime``): a frame goes to the veth as soon as
    it is committed to the link, stamped with its arrival time, instead of
    being held for the propagation delay -- the receiver holds it until
    then. ``sink(frame, arrival_ns)`` sends it. ``put`` hands over at once
    (the NIC's transmitter, InfiniBand); a switch port's ``serve`` appends
    to ``in_flight`` itself, and ``release`` hands those over whatever their
    due time. Lateness is zero by construction. ``flush(in_flight)``, if
    given, hands over (and empties) all of ``in_flight`` at once instead
    (``vtime.VirtualPort.send_flight``: one call, not two, per frame)."""

    __slots__ = ("sink", "flush")

    def __init__(self, delay_ns: int, sink=None, flush=None):
        super().__init__(delay_ns)
        self.sink = sink
        self.flush = flush

    def put(self, serialized_at_ns: int, frame) -> None:
        self.late_hist[0] += 1
        self.sink(frame, serialized_at_ns + self.delay_ns)

    def next_release_ns(self) -> int | None:
        return None

    def release(self, now_ns: int, send=None) -> int:
        in_flight = self.in_flight
        sent = len(in_flight)
        if self.flush is not None:
            self.flush(in_flight)
        else:
            sink = self.sink
            while in_flight:
                due_ns, frame = in_flight.popleft()
                sink(frame, due_ns)
        self.late_hist[0] += sent
        return sent
