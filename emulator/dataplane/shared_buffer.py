"""The shared buffer of the embedded target's traffic manager: one pool, per-cell accounting.

One pool of ``buffer_bytes`` per switch (``docs/lossless.md``). Every
admitted packet is accounted to its (ingress port, priority) "cell" until it
leaves. Lossy admission: room in the shared pool (buffer minus the headroom
that ``pfc_config`` reserves) and Broadcom-style dynamic threshold on the
egress queue (depth below alpha × free shared bytes, alpha = 1: one
congested queue gets at most half of the free pool). Lossless admission: the
shared pool while the cell's counter is below XOFF, then the cell's own
headroom; a drop only when the headroom is exhausted.

A module of its own because it is the model: ``SharedBuffer``'s methods say
what admission and release do, and the per-packet code
(``TrafficManager.enqueue``, ``PriorityPort.serve``) inlines them, reading
and writing the same fields (``tests/unit/test_tm.py`` keeps both in step).
The per-cell PFC state (``xoff``, ``xon_bytes``, ``refresh_due``) lives here
too: it is per cell, like the counters it is decided on.
"""
from __future__ import annotations

from emulator.wire import CPU_PORT, NUM_PRIORITIES

MAX_PORTS = CPU_PORT + 1       # port numbers index the cells; front-panel ports are below CPU_PORT
CELLS = MAX_PORTS * NUM_PRIORITIES


class SharedBuffer:
    """Shared pool + per-(ingress port, priority) counters and headroom.

    The admission and release methods are the model; ``TrafficManager.enqueue``
    and ``PriorityPort.serve`` inline them on the per-packet path (a unit test
    keeps both in step).
    """

    __slots__ = ("buffer_bytes", "reserved_bytes", "limit", "shared_used", "max_shared_used",
                 "ingress_bytes", "headroom_used", "max_headroom_used", "xoff", "xon_bytes",
                 "refresh_due")

    def __init__(self, buffer_bytes: int):
        self.buffer_bytes = buffer_bytes
        self.reserved_bytes = 0        # sum of the pfc_config headrooms
        self.limit = buffer_bytes      # shared pool size: buffer - reserved
        self.shared_used = 0
        self.max_shared_used = 0
        self.ingress_bytes = [0] * CELLS
        self.headroom_used = [0] * CELLS
        self.max_headroom_used = [0] * CELLS
        self.xoff = [False] * CELLS     # a pause is in force for this cell
        self.xon_bytes = [0] * CELLS    # its XON threshold (from the XOFF's verdict)
        self.refresh_due = [0] * CELLS  # when its pause is refreshed

    def reserve_headroom(self, reserved_bytes: int) -> None:
        self.reserved_bytes = reserved_bytes
        self.limit = max(0, self.buffer_bytes - reserved_bytes)

    @property
    def used_bytes(self) -> int:
        return self.shared_used + sum(self.headroom_used)

    def admit_lossy(self, cell: int, size: int, queue_depth: int) -> bool:
        """Room in the pool, and dynamic threshold (Broadcom DT, alpha = 1): the
        egress queue must hold less than the free shared bytes."""
        free = self.limit - self.shared_used
        if size > free or queue_depth >= free:
            return False
        self.shared_used += size
        if self.shared_used > self.max_shared_used:
            self.max_shared_used = self.shared_used
        self.ingress_bytes[cell] += size
        return True

    def admit_lossless(self, cell: int, size: int, xoff: int, headroom: int) -> bool:
        """Shared pool while the cell is below XOFF (and the pool has room), then headroom."""
        count = self.ingress_bytes[cell]
        if count < xoff and self.shared_used + size <= self.limit:
            self.shared_used += size
            if self.shared_used > self.max_shared_used:
                self.max_shared_used = self.shared_used
        else:
            used = self.headroom_used[cell] + size
            if used > headroom:
                return False
            self.headroom_used[cell] = used
            if used > self.max_headroom_used[cell]:
                self.max_headroom_used[cell] = used
        self.ingress_bytes[cell] = count + size
        return True

    def clear_stats(self) -> None:
        """Peaks restart from what the buffer holds now."""
        self.max_shared_used = self.shared_used
        self.max_headroom_used[:] = self.headroom_used

    def release(self, cell: int, size: int) -> int:
        """A packet of ``cell`` left: headroom drains first. Returns the cell's new count."""
        used = self.headroom_used[cell]
        if used:
            if used >= size:
                self.headroom_used[cell] = used - size
            else:
                self.headroom_used[cell] = 0
                self.shared_used -= size - used
        else:
            self.shared_used -= size
        count = self.ingress_bytes[cell] - size
        self.ingress_bytes[cell] = count
        return count

