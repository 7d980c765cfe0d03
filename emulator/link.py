"""A link beyond a port (a switch port or a NIC): frames in flight for the link's propagation delay.

htsim-style: ``tm.PriorityPort`` serializes frames byte-accurately at the
port's rate and hands each one, when its serialization ends, to ``Wire``,
which gives it to the veth after the link's propagation delay. Nothing is
shaped by the kernel: the only queues between this switch and the next hop
are the traffic manager's.

Times are wall nanoseconds of the emulation, passed in by the caller (read
from the switch's clock, ``emulator.clock``); the delays given here are
already dilated by the runner.
"""
from __future__ import annotations

from bisect import insort
from collections import deque
from operator import itemgetter


_DUE = itemgetter(0)


class Wire:
    """Frames in flight on a link: released ``delay_ns`` after serialization ends.

    Frames are kept in release order. They normally arrive in that order (one
    serializer per link); one put out of order (e.g. a MAC control frame
    scheduled ahead of data) is inserted in place, after frames due at the
    same time.
    """

    __slots__ = ("delay_ns", "in_flight", "max_lateness_ns", "late_frames")

    def __init__(self, delay_ns: int):
        self.delay_ns = delay_ns
        self.in_flight: deque[tuple[int, bytes]] = deque()
        self.max_lateness_ns = 0
        self.late_frames = 0

    def put(self, serialized_at_ns: int, frame) -> None:
        due = serialized_at_ns + self.delay_ns
        in_flight = self.in_flight
        if in_flight and due < in_flight[-1][0]:
            insort(in_flight, (due, frame), key=_DUE)
        else:
            in_flight.append((due, frame))

    def next_release_ns(self) -> int | None:
        return self.in_flight[0][0] if self.in_flight else None

    def release(self, now_ns: int, send, late_threshold_ns: int) -> int:
        """Send every frame due by ``now_ns``; returns how many were sent."""
        sent = 0
        in_flight = self.in_flight
        while in_flight and in_flight[0][0] <= now_ns:
            due_ns, frame = in_flight.popleft()
            lateness = now_ns - due_ns
            if lateness > late_threshold_ns:
                self.late_frames += 1
                if lateness > self.max_lateness_ns:
                    self.max_lateness_ns = lateness
            send(frame)
            sent += 1
        return sent
