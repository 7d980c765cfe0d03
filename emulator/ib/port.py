"""The transmit side of one InfiniBand port (IBA Vol. 1, 7.6 "Virtual
lanes", 7.9 "Flow control"): a small htsim-style element, as
``emulator.dataplane.priority_port.PriorityPort`` is for Ethernet, pure and driven by
explicit times (wall ns of the caller's clock; rates already dilated).

* SL to VL: ``sl2vl[sl]`` picks the data VL of a packet (the
  SL2VLMappingTable; one per egress port here).
* One FIFO per data VL, and VL15 (subnet management) served before all of
  them and never flow controlled.
* Credits: a packet leaves its VL only when that VL's ``VlCredits`` allows
  its blocks; a VL without credit is skipped (its packets wait, the others
  go: head-of-line blocking stays within a VL) and its stall time counted.
* VL arbitration (7.6.9): a high- and a low-priority table of (VL, weight)
  entries, weights in 64-byte units. The arbiter serves the high-priority
  table, entry by entry: the entry's VL sends packets while the entry has
  weight left (a packet may overdraw the last of it), then the next entry
  with a packet and credit. After ``high_limit`` x 4 KiB of high-priority
  bytes while low-priority packets wait, one low-priority packet goes
  (0: after every high-priority packet; 255: never). The low table is
  served the same way.
* Serialization at ``rate_bps``: one packet at a time, back to back in
  emulated time (``busy_until``), then ``send(end_ns, vl, packet, meta)``.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

from emulator.ib.credits import VlCredits, blocks
from emulator.wire import IB_CREDIT_BLOCK_BYTES, IB_VL15

HIGH_LIMIT_UNIT_BYTES = 4096      # LimitOfHighPriority counts 4 KiB (7.6.9.1)
HIGH_LIMIT_NEVER = 255            # "unlimited": low priority only when high has nothing


@dataclass(frozen=True)
class ArbEntry:
    vl: int
    weight: int                    # 64-byte units; 0: the entry is unused


class _Table:
    """One arbitration table: weighted round robin over its entries."""

    __slots__ = ("entries", "index", "left")

    def __init__(self, entries: Sequence[ArbEntry]):
        self.entries = [e for e in entries if e.weight > 0]
        self.index = 0
        self.left = self.entries[0].weight * IB_CREDIT_BLOCK_BYTES if self.entries else 0

    def pick(self, ready: Callable[[int], bool]) -> int | None:
        """The VL to send from: the current entry while it has weight left
        and its VL is ready, else the next ready entry, with its full weight
        (the current one again, refilled, when no other is ready)."""
        n = len(self.entries)
        entry = self.entries[self.index]
        if self.left > 0 and ready(entry.vl):
            return entry.vl
        for k in range(1, n + 1):
            i = (self.index + k) % n
            entry = self.entries[i]
            if ready(entry.vl):
                self.index, self.left = i, entry.weight * IB_CREDIT_BLOCK_BYTES
                return entry.vl
        return None

    def charge(self, nbytes: int) -> None:
        self.left -= nbytes


class IbEgressPort:
    """Egress of one port: ``enqueue`` packets (from their LRH, VCRC
    included), ``service(now)`` whenever something may have changed (a
    packet queued, credit arrived, the serializer freed); it returns when
    to call again (None: nothing to do until a packet or credit comes)."""

    def __init__(self, rate_bps: float, credits: dict[int, VlCredits],
                 send: Callable[[int, int, bytes, object], None], *,
                 sl2vl: Sequence[int] | None = None, high: Sequence[ArbEntry] = (),
                 low: Sequence[ArbEntry] | None = None, high_limit: int = 0,
                 carrier_bytes: int = 0):
        """``credits``: the data VLs of this port and their flow control
        (the VLs operational: 1, 2, 4 or 8). Default tables: every data VL
        in the low-priority table with weight 64 (4 KiB), none high.
        ``carrier_bytes``: what precedes the IB packet in what is queued
        (the veth's Ethernet carrier): not InfiniBand, so it takes no
        credit, no serialization time and no weight."""
        if not credits:
            raise ValueError("a port needs at least one data VL")
        vls = sorted(credits)
        self.rate_bps = rate_bps
        self.carrier_bytes = carrier_bytes
        self.credits = credits
        self.send = send
        self.sl2vl = list(sl2vl) if sl2vl is not None else [vls[sl % len(vls)] for sl in range(16)]
        for sl, vl in enumerate(self.sl2vl):
            if vl not in credits and vl != IB_VL15:
                raise ValueError(f"SL {sl} maps to VL {vl}, which this port does not run")
        self.queues: dict[int, deque] = {vl: deque() for vl in [*vls, IB_VL15]}
        self.high = _Table(high)
        self.low = _Table(low if low is not None else [ArbEntry(vl, 64) for vl in vls])
        # LimitOfHighPriority: in 4 KiB; 0 lets one high-priority packet
        # through before a waiting low-priority one; 255 never yields
        self.high_limit_bytes = (None if high_limit >= HIGH_LIMIT_NEVER
                                 else high_limit * HIGH_LIMIT_UNIT_BYTES or 1)
        self._high_sent = 0           # high-priority bytes since a low-priority packet
        self._head_since = {vl: 0 for vl in vls}   # start of each VL's last packet
        self.busy_until = 0
        self.tx_packets = {vl: 0 for vl in self.queues}
        self.tx_bytes = {vl: 0 for vl in self.queues}
        self.depth_bytes = {vl: 0 for vl in self.queues}       # queued, IB packet bytes
        self.max_depth_bytes = {vl: 0 for vl in self.queues}

    # ------------------------------------------------------------------ input
    def enqueue(self, now_ns: int, packet: bytes, sl: int | None = None, vl: int | None = None,
                meta=None) -> int:
        """Queue ``packet`` (arrived at ``now_ns``) on the VL its SL maps to
        (or ``vl``); ``meta`` goes with it to ``send``. Returns the VL."""
        vl = self.sl2vl[sl] if vl is None else vl
        nbytes = len(packet) - self.carrier_bytes          # the IB packet, LRH to VCRC
        self.queues[vl].append((now_ns, packet, meta, nbytes, blocks(nbytes)))
        depth = self.depth_bytes[vl] = self.depth_bytes[vl] + nbytes
        if depth > self.max_depth_bytes[vl]:
            self.max_depth_bytes[vl] = depth
        return vl

    def depth(self, vl: int) -> int:
        """Packets waiting on ``vl``."""
        return len(self.queues[vl])

    # ------------------------------------------------------------------ output
    def _ready(self, vl: int) -> bool:
        q = self.queues[vl]
        return bool(q) and (vl == IB_VL15 or self.credits[vl].can_send(q[0][4]))

    def _pick(self) -> tuple[int, _Table | None] | None:
        if self.queues[IB_VL15]:
            return IB_VL15, None
        low_waiting = any(self._ready(e.vl) for e in self.low.entries)
        if not (low_waiting and self.high_limit_bytes is not None
                and self._high_sent >= self.high_limit_bytes):
            vl = self.high.pick(self._ready) if self.high.entries else None
            if vl is not None:
                return vl, self.high
        vl = self.low.pick(self._ready) if self.low.entries else None
        return (vl, self.low) if vl is not None else None

    def service(self, now_ns: int) -> int | None:
        """Send every packet whose turn has come by ``now_ns``; returns when
        the serializer frees (None: idle, or every waiting VL out of credit).

        Emulated times: a packet starts when the serializer is free, it has
        arrived and -- if its VL was out of credit -- the credit came
        (``VlCredits.credit_ns``); served late, packets still go back to
        back. ``send(end_ns, vl, packet, meta)`` gets the end of its
        serialization (when a ``Wire`` takes it) and what ``enqueue`` was given."""
        t = self.busy_until
        while t <= now_ns:
            picked = self._pick()
            if picked is None:
                break
            vl, table = picked
            arrived_ns, packet, meta, nbytes, nblocks = self.queues[vl].popleft()
            self.depth_bytes[vl] -= nbytes
            start = max(t, arrived_ns)
            if vl != IB_VL15:
                cr = self.credits[vl]
                if cr.stalled_since is not None:
                    start = max(start, cr.credit_ns)
                cr.try_send(nblocks, start)
                self._head_since[vl] = start
                table.charge(nbytes)
                self._high_sent = self._high_sent + nbytes if table is self.high else 0
            t = start + (nbytes * 8 * 10**9) // int(self.rate_bps)
            self.tx_packets[vl] += 1
            self.tx_bytes[vl] += nbytes
            self.send(t, vl, packet, meta)
        self.busy_until = t
        for vl, cr in self.credits.items():
            # A head without credit is stalled since it became the head: its
            # arrival, or the start of the packet before it on its VL.
            q = self.queues[vl]
            if q and cr.stalled_since is None and not cr.can_send(q[0][4]):
                cr.try_send(q[0][4], max(q[0][0], self._head_since[vl]))
        return t if t > now_ns else None

    def stalled_ns(self, now_ns: int) -> dict[int, int]:
        """Time each data VL waited for credit with a packet ready."""
        return {vl: cr.stalled_total_ns(now_ns) for vl, cr in self.credits.items()}
