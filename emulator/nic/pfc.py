"""PFC (IEEE 802.1Qbb) reception state of the NIC: which priorities a
received pause frame holds, until when, and how long our classes were held.

A MAC-control frame to 01:80:C2:00:00:01 with opcode 0x0101 pauses, for each
priority whose class-enable bit is set, the *start* of that priority's frames
for timer x 512 bit times at the link rate from its arrival (a new frame
restarts the timer; 0 resumes at once). The transmitter reads ``until_ns``
(a frame of a paused class starts no earlier than its pause's end, so the
expiry needs no timer of its own); the requester does not count the time
its data class was held (``held_ns``) against an ACK timeout.
"""
from __future__ import annotations

import struct

from emulator.clock import NEVER_NS
from emulator.wire import (ETH_P_PAUSE, MIN_FRAME_BYTES, NUM_PRIORITIES, PFC_DST_MAC, PFC_OPCODE,
                           PFC_QUANTUM_BITS)

_TIMERS = struct.Struct("!8H")
_PFC_HEAD = struct.Struct(f"!6s6sHHH{NUM_PRIORITIES}H")
STORM_QUANTA = 0xFFFF


def pause_ns(quanta: int, rate_bps: float) -> int:
    """``quanta`` x 512 bit times at ``rate_bps``, rounded up to whole ns (as the switch's)."""
    return -(-quanta * PFC_QUANTUM_BITS * 1_000_000_000 // int(rate_bps))


def pause_frame(src_mac: bytes, priorities: int, quanta: int) -> bytes:
    """A 60-byte PFC frame: ``quanta`` on each priority of the mask ``priorities``."""
    timers = [quanta if priorities >> p & 1 else 0 for p in range(NUM_PRIORITIES)]
    body = _PFC_HEAD.pack(PFC_DST_MAC, src_mac, ETH_P_PAUSE, PFC_OPCODE, priorities, *timers)
    return body + bytes(MIN_FRAME_BYTES - len(body))


class PfcStormer:
    """A stuck NIC's PFC storm (``faults: pfc_storm``, ``link_faults.LinkFaults.storms``):
    while a storm is on, PAUSE of the most quanta on its priorities, sent
    again at half the pause's time -- before it runs out, whatever the NIC's
    receive buffer holds. ``next_ns``: when the next frame (or the next
    storm's start) is due, on the NIC's clock (fabric ns in virtual time)."""

    __slots__ = ("faults", "src_mac", "refresh_ns", "next_ns")

    def __init__(self, faults, rate_bps: float, mac: str):
        self.faults = faults
        self.src_mac = bytes.fromhex(mac.replace(":", ""))
        self.refresh_ns = pause_ns(STORM_QUANTA, rate_bps) // 2   # as a switch refreshes its own
        self.next_ns = faults.next_storm_start_ns(-1)

    def fire(self, now: int) -> bytes | None:
        """The PAUSE frame due at ``now`` (None: no storm is on), and the next due time."""
        mask = self.faults.storm_priorities(now)
        nxt = self.faults.next_storm_start_ns(now)
        frame = None
        if mask:
            frame = pause_frame(self.src_mac, mask, STORM_QUANTA)
            nxt = min(nxt, now + self.refresh_ns)
            for p in range(NUM_PRIORITIES):
                if mask >> p & 1:
                    self.faults.storm_frames[p] += 1
        self.next_ns = nxt if nxt < NEVER_NS else NEVER_NS
        return frame


class PfcReceiver:
    """Pause state per priority. ``tracked``: our classes (data, CNP), whose
    paused time ``paused_ns`` sums."""

    __slots__ = ("ns_per_quantum", "honor", "tracked", "until_ns", "start_ns", "_closed_ns",
                 "_closed_p", "frames", "logs")

    def __init__(self, rate_bps: int, tracked: tuple[int, ...], *, honor: bool = True,
                 logs=None):
        self.ns_per_quantum = PFC_QUANTUM_BITS * 1e9 / rate_bps
        self.honor = honor
        self.tracked = tuple(sorted(set(tracked)))
        self.until_ns = [0.0] * NUM_PRIORITIES   # priority p paused while now < until_ns[p]
        self.start_ns = [0] * NUM_PRIORITIES     # when its current/last pause began
        self._closed_ns = 0                      # paused time of intervals already over
        self._closed_p = [0.0] * NUM_PRIORITIES  # the same per priority (all of them)
        self.frames = 0                          # PFC frames obeyed
        self.logs = logs

    def on_frame(self, frame, now: int) -> bool:
        """A MAC-control frame arrived at ``now``: True if it was a PFC frame
        we obey (and its timers are applied), False to ignore it."""
        if (frame[0:6] != PFC_DST_MAC or frame[14] != 0x01 or frame[15] != 0x01
                or not self.honor):
            return False
        self.frames += 1
        enable = frame[17]                       # class-enable vector: e[7..0] in the low byte
        times = _TIMERS.unpack_from(frame, 18)
        until_ns, start_ns, logs = self.until_ns, self.start_ns, self.logs
        for p in range(NUM_PRIORITIES):
            if not enable >> p & 1:
                continue
            q = times[p]
            if logs is not None:
                logs.pfc(now, p, q)
            until = until_ns[p]
            if until <= now:                     # not paused: a new pause interval
                if until > start_ns[p]:
                    self._closed_p[p] += until - start_ns[p]
                    if p in self.tracked:
                        self._closed_ns += int(until - start_ns[p])
                start_ns[p] = now
            until_ns[p] = now + q * self.ns_per_quantum
        return True

    def paused(self, priority: int, now: int) -> bool:
        return now < self.until_ns[priority]

    def held_ns(self, priority: int, now: int) -> float:
        """Time ``priority`` was paused from the start up to ``now`` (closed
        pauses plus the running one so far): a clock that only runs while
        the priority is held, so its difference over an interval is the
        paused part of that interval."""
        until, start = self.until_ns[priority], self.start_ns[priority]
        held = self._closed_p[priority]
        if until > start and now > start:
            held += (until if until < now else now) - start
        return held

    def hold(self, priority: int) -> "PriorityHold":
        """The requester's view of how PFC holds ``priority``."""
        return PriorityHold(self, priority)

    def paused_ns(self, now: int) -> int:
        """Time our tracked classes were paused up to ``now``, summed."""
        total = self._closed_ns
        for p in self.tracked:
            until, start = self.until_ns[p], self.start_ns[p]
            if until > start and now > start:
                total += int(min(until, now) - start)
        return total


class PriorityHold:
    """How PFC holds one priority back, as the requester asks any link
    layer (``requester.Requester``'s ``hold``): time held so far, and when
    the pause in force ends."""

    __slots__ = ("pfc", "priority")

    def __init__(self, pfc: PfcReceiver, priority: int):
        self.pfc, self.priority = pfc, priority

    def held_ns(self, now: int) -> float:
        return self.pfc.held_ns(self.priority, now)

    def resume_ns(self) -> float:
        return self.pfc.until_ns[self.priority]
