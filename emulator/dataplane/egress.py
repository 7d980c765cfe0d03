"""Egress side of one switch port: a finite queue served at the link's rate, then the wire.

htsim-style: ``EgressQueue`` holds frames and serializes them byte-accurately at
``rate_bps``; each frame that finishes serialization enters ``Wire``, which
hands it to the veth after the link's propagation delay. Nothing is shaped by
the kernel: the only queue between this switch and the next hop is this one.

The switch now uses ``tm.PriorityPort`` (8 priority queues, PFC, a shared
buffer) in front of the same ``Wire``; ``EgressQueue`` remains the single
FIFO model (one lossy class, a private buffer) for tools and tests.

Times are wall-clock nanoseconds of the emulation (``time.monotonic_ns``); the
rates and delays given here are already dilated by the runner.
"""
from __future__ import annotations

from bisect import insort
from collections import deque
from operator import itemgetter

# Preamble (7) + SFD (1) + FCS (4) + minimum inter-frame gap (12): bytes a
# frame occupies on the wire beyond what the socket carries.
WIRE_OVERHEAD_BYTES = 24


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


class EgressQueue:
    """A FIFO of at most ``buffer_bytes`` served at ``rate_bps``."""

    __slots__ = ("rate_bps", "buffer_bytes", "frames", "depth_bytes", "busy_until_ns",
                 "ns_per_byte", "drops", "drop_bytes", "max_depth_bytes")

    def __init__(self, rate_bps: int, buffer_bytes: int):
        self.rate_bps = rate_bps
        self.buffer_bytes = buffer_bytes
        self.ns_per_byte = 8e9 / rate_bps
        self.frames: deque = deque()
        self.depth_bytes = 0
        self.busy_until_ns = 0
        self.drops = 0
        self.drop_bytes = 0
        self.max_depth_bytes = 0

    def enqueue(self, now_ns: int, frame) -> bool:
        size = len(frame)
        if self.depth_bytes + size > self.buffer_bytes:
            self.drops += 1
            self.drop_bytes += size
            return False
        if not self.frames and self.busy_until_ns < now_ns:
            self.busy_until_ns = now_ns  # idle link: serialization starts now
        self.frames.append(frame)
        self.depth_bytes += size
        if self.depth_bytes > self.max_depth_bytes:
            self.max_depth_bytes = self.depth_bytes
        return True

    def next_start_ns(self) -> int | None:
        return self.busy_until_ns if self.frames else None

    def serve(self, now_ns: int, wire: Wire, on_dequeue) -> None:
        """Start serializing every frame whose turn has come by ``now_ns``.

        Back-to-back frames start exactly when the previous one ends, even if
        this call comes late: the model keeps fabric time, the wire reports
        how late the real send was.
        """
        frames = self.frames
        while frames and self.busy_until_ns <= now_ns:
            frame = frames.popleft()
            size = len(frame)
            self.depth_bytes -= size
            on_dequeue(frame)
            self.busy_until_ns += int((size + WIRE_OVERHEAD_BYTES) * self.ns_per_byte)
            wire.put(self.busy_until_ns, frame)
