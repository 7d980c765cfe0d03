"""A host that stops taking what its NIC received (``faults: cpu_stall``).

From a stall's start to its end the host does not take received data: the
RoCE request packets for our QPs (WRITE, SEND, READ responses) stay in the
NIC's receive buffer instead of being placed and acknowledged. When what
the buffer holds reaches ``xoff_bytes`` the NIC pauses the data class with
802.1Qbb PAUSE (the most quanta, sent again every half pause time while
still above it), as a switch's ingress does; at the stall's end the host
takes everything held, in arrival order, and the NIC sends XON (quanta 0).

Times on the NIC's clock (fabric ns in virtual time); pure but for the
frames it hands back.
"""
from __future__ import annotations

from emulator.clock import NEVER_NS

from .pfc import STORM_QUANTA, pause_frame, pause_ns


class RxStall:
    """The stall windows of one NIC, what they hold, and the PAUSE they cause."""

    __slots__ = ("windows", "priority", "src_mac", "refresh_ns", "held", "held_bytes", "xoff",
                 "refresh_due_ns", "release_ns", "pause_tx", "resume_tx", "held_max_bytes", "held_packets")

    def __init__(self, windows: list[tuple[int, int, int]], priority: int, rate_bps: float,
                 mac: str):
        """``windows``: (from_ns, until_ns, xoff_bytes) each, in time order."""
        self.windows = windows
        self.priority = priority
        self.src_mac = bytes.fromhex(mac.replace(":", ""))
        self.refresh_ns = pause_ns(STORM_QUANTA, rate_bps) // 2
        self.held: list[bytes] = []
        self.held_bytes = 0
        self.xoff = False
        self.refresh_due_ns = NEVER_NS
        self.release_ns = NEVER_NS               # the end of the stall that holds data
        self.pause_tx = self.resume_tx = self.held_max_bytes = self.held_packets = 0

    def stalled(self, now: int) -> tuple[int, int] | None:
        """(its end, its XOFF threshold) of the stall in force at ``now`` (None: none)."""
        for start, until, xoff_bytes in self.windows:
            if start <= now < until:
                return until, xoff_bytes
        return None

    def hold(self, frame, now: int) -> bytes | None:
        """A data packet arrived in a stall: kept; a PAUSE to send if it
        brought the buffer to XOFF (None: nothing to send)."""
        data = bytes(frame)
        self.held.append(data)
        self.held_bytes += len(data)
        self.held_packets += 1
        self.held_max_bytes = max(self.held_max_bytes, self.held_bytes)
        until, xoff_bytes = self.stalled(now)
        self.release_ns = until
        if not self.xoff and self.held_bytes >= xoff_bytes:
            self.xoff = True
            return self._pause(now)
        return None

    def _pause(self, now: int) -> bytes:
        self.pause_tx += 1
        self.refresh_due_ns = now + self.refresh_ns
        return pause_frame(self.src_mac, 1 << self.priority, STORM_QUANTA)

    def next_ns(self) -> int:
        """When ``due`` has something to do: a refresh, or the end of a stall that holds data."""
        return min(self.refresh_due_ns, self.release_ns if self.held else NEVER_NS)

    def due(self, now: int) -> tuple[list[bytes], bytes | None]:
        """(the frames the host takes now, a PFC frame to send now or None)."""
        if self.held and self.stalled(now) is None:
            frames, self.held, self.held_bytes = self.held, [], 0
            self.release_ns = NEVER_NS
            out = None
            if self.xoff:
                self.xoff = False
                self.refresh_due_ns = NEVER_NS
                self.resume_tx += 1
                out = pause_frame(self.src_mac, 1 << self.priority, 0)
            return frames, out
        if self.xoff and now >= self.refresh_due_ns:
            return [], self._pause(now)
        return [], None

    def stats(self) -> dict:
        return {"held_packets": self.held_packets, "held_max_bytes": self.held_max_bytes,
                "pause_tx": self.pause_tx, "resume_tx": self.resume_tx}
