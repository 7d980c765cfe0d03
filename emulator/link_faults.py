"""Scripted faults at the sending end of a link (``schema.faults.EndFaults``).

The sender (a switch port, ``dataplane/switch.py``; a NIC's transmitter,
``nic/transmitter.py``) asks ``judge`` about each frame when it is
committed to the link, with the time its serialization ended (its last
bit entered the wire): the frame goes on, is lost -- the direction is down,
or a random loss took it -- or goes on with one bit flipped and a bad FCS
(the receiver drops it: a switch port counts an FCS error; a NIC's ICRC
check fails, ``nic/link_layer.py``). A degrade changes the sender's
serialization rate at its exact fabric time: the sender's loop wakes at
``next_rate_change_ns`` and applies ``rate_changes_due``.

Deterministic: each loss and bit-error window draws from its own
``random.Random``, seeded from its seed, the direction and its place in
the list -- never from the wall clock or the process layout -- and frames
reach ``judge`` in fabric-time order, the same in every rerun.

Pure: times are arguments, like the traffic manager's.
"""
from __future__ import annotations

import hashlib
import math
import random
from bisect import bisect_right

from emulator.clock import NEVER_NS
from emulator.wire import NUM_PRIORITIES

MAC_CONTROL = NUM_PRIORITIES       # the counters' class of PFC (MAC control) frames
# The raw logs' class of a frame dropped before it was classified (a bad FCS,
# a failed ICRC), and the prefix of a switch's drop events with a reason
# ("drop_link_down", "drop_random_loss", "drop_fcs_error"; a bare "drop" is
# the traffic manager's)
UNCLASSIFIED = -1
DROP_EVENT = "drop_"
CLASSES = NUM_PRIORITIES + 1


def fault_rng(kind: str, seed: int, direction: str, index: int) -> random.Random:
    digest = hashlib.sha256(f"{kind}/{seed}/{direction}/{index}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def class_name(c: int) -> str:
    return "pfc" if c == MAC_CONTROL else str(c)


class LinkFaults:
    """One sending end's faults at run time, and what they did."""

    __slots__ = ("direction", "_down_from", "_down_until", "_rates", "_rate_i", "_loss", "_ber",
                 "_dscp_priority", "dropped_down", "dropped_loss", "corrupted", "applied",
                 "dropped_in_down", "on_drop", "storms", "storm_frames")

    def __init__(self, cfg: "EndFaults"):    # schema.faults's, handed as is (no import: the NIC's)
        self.direction = cfg.direction
        self._down_from = [d.from_ns for d in cfg.down]
        self._down_until = [d.until_ns for d in cfg.down]
        self._rates = [(r.at_ns, r.rate_fraction) for r in cfg.rates]
        self._rate_i = 0
        self._loss = [(w.from_ns, w.until_ns, w.rate, w.priority,
                       fault_rng("random_loss", w.seed, self.direction, i))
                      for i, w in enumerate(cfg.loss)]
        self._ber = [(w.from_ns, w.until_ns, math.log1p(-w.ber) if w.ber < 1 else -math.inf,
                      fault_rng("bit_errors", w.seed, self.direction, i))
                     for i, w in enumerate(cfg.bit_errors)]
        self._dscp_priority = list(cfg.dscp_priority)
        self.dropped_down = [0] * CLASSES
        self.dropped_in_down = [0] * len(self._down_from)   # per down interval: what it lost
        self.dropped_loss = [0] * CLASSES
        self.corrupted = [0] * CLASSES
        self.applied: list[dict] = []          # rate changes as applied
        # told of every frame the link lost: (sent_ns, class, bytes, reason
        # "link_down" | "random_loss"), for the run's drop table (None: nobody)
        self.on_drop = None
        self.storms = [(w.from_ns, w.until_ns, w.priority) for w in cfg.storms]
        self.storm_frames = [0] * NUM_PRIORITIES   # PAUSE frames a storm sent, per priority

    # ------------------------------------------------------------ frames
    def priority_of(self, frame) -> int:
        """The frame's class: PFC (MAC control), else its DSCP's priority (0: not IPv4)."""
        if len(frame) < 16:
            return 0
        if frame[12] == 0x88 and frame[13] == 0x08:
            return MAC_CONTROL
        if frame[12] == 0x08 and frame[13] == 0x00:
            return self._dscp_priority[frame[15] >> 2]
        return 0

    def is_down(self, t_ns: float) -> bool:
        i = bisect_right(self._down_from, t_ns) - 1
        return i >= 0 and t_ns < self._down_until[i]

    def judge(self, frame, sent_ns: float):
        """``(frame, bad_fcs)``: the frame as it goes on (one bit flipped and
        ``bad_fcs`` True when a bit error hit it), or ``(None, False)`` when
        the link lost it. ``sent_ns``: when its serialization ended."""
        c = self.priority_of(frame)
        if self._down_from:
            i = bisect_right(self._down_from, sent_ns) - 1
            if i >= 0 and sent_ns < self._down_until[i]:
                self.dropped_down[c] += 1
                self.dropped_in_down[i] += 1
                if self.on_drop is not None:
                    self.on_drop(sent_ns, c, len(frame), "link_down")
                return None, False
        for start, until, rate, prio, rng in self._loss:
            if start <= sent_ns < until and (prio is None or prio == c) and rng.random() < rate:
                self.dropped_loss[c] += 1
                if self.on_drop is not None:
                    self.on_drop(sent_ns, c, len(frame), "random_loss")
                return None, False
        bad = False
        for start, until, log_keep, rng in self._ber:
            if start <= sent_ns < until:
                bits = 8 * len(frame)
                if rng.random() < -math.expm1(bits * log_keep):
                    bit = rng.randrange(bits)
                    frame = bytearray(frame)
                    frame[bit >> 3] ^= 1 << (bit & 7)
                    bad = True
        if bad:
            self.corrupted[c] += 1
        return frame, bad

    # ------------------------------------------------------------ degrade
    def next_rate_change_ns(self) -> int:
        """When the serializer's rate next changes (``NEVER_NS``: not again)."""
        return self._rates[self._rate_i][0] if self._rate_i < len(self._rates) else NEVER_NS

    def rate_changes_due(self, now_ns: int) -> float | None:
        """The fraction of the nominal rate in force from now if a change fell
        due by ``now_ns`` (recorded as applied now), else None."""
        fraction = None
        rates = self._rates
        while self._rate_i < len(rates) and rates[self._rate_i][0] <= now_ns:
            at, fraction = rates[self._rate_i]
            self.applied.append({"at_ns": at, "rate_fraction": fraction, "applied_ns": int(now_ns)})
            self._rate_i += 1
        return fraction

    # ------------------------------------------------------------ PFC storm
    def storm_priorities(self, now_ns: int) -> int:
        """The priorities a storm pauses at ``now_ns``, as a class-enable mask."""
        mask = 0
        for start, until, prio in self.storms:
            if start <= now_ns < until:
                mask |= 1 << prio
        return mask

    def next_storm_start_ns(self, now_ns: int) -> int:
        """The first storm start after ``now_ns`` (``NEVER_NS``: none)."""
        return min((s for s, _, _ in self.storms if s > now_ns), default=NEVER_NS)

    # ------------------------------------------------------------ results
    def stats(self) -> dict:
        """Per class (priority, or "pfc"), the frames each fault took; the rate changes applied."""
        def by_class(counts: list[int]) -> dict[str, int]:
            return {class_name(c): n for c, n in enumerate(counts) if n}
        return {"direction": self.direction,
                "dropped_down": by_class(self.dropped_down),
                "dropped_loss": by_class(self.dropped_loss),
                "corrupted": by_class(self.corrupted),
                "rate_changes": list(self.applied),
                "down_intervals": [{"from_ns": f, "until_ns": u, "dropped": n} for f, u, n
                                   in zip(self._down_from, self._down_until, self.dropped_in_down)],
                **({"pfc_storm_frames": {str(p): n for p, n in enumerate(self.storm_frames) if n}}
                   if self.storms else {})}

    def lost_frames(self) -> int:
        """Frames that never reached the receiver's ingress counters (lost,
        or dropped there for their bad FCS)."""
        return sum(self.dropped_down) + sum(self.dropped_loss) + sum(self.corrupted)
