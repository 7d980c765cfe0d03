"""InfiniBand congestion control, the channel adapter's (source's) side
(IBA Vol. 1, annex A10 "Congestion Control"), one per queue pair.

Pure state machine driven with explicit times (ns of the caller's clock, any
monotonic origin), as ``emulator.nic.dcqcn`` is, with the same interface
towards ``emulator.nic.reaction.ReactionPoint``: ``on_cnp(now)``,
``on_tx(frame_bytes, now)`` (a no-op: IB CC has no byte counter),
``advance(now)``, ``rate_bps``, ``active``, ``next_rate_ns``, ``alpha_at(t)``.
Every change of the rate goes to ``listener(t_ns, event)``, ``event`` one of
``cnp`` (a BECN) and ``rate_timer`` (a CCTI timer expiry).

The rest of the loop is elsewhere: switches mark FECN on packets that find an
egress queue over a threshold (``p4src/ib.p4``'s ``cc_threshold``), the
destination returns a BECN to the source QP (a CNP: BTH opcode 0x81 with
BECN set, as annex A10 defines it). On the source (CA Congestion Setting
with Port_Control QP-based, so the state is per QP)::

    BECN:         CCTI = min(CCTI + CCTI_Increase, CCTI_Limit);
                  start the CCTI timer unless it is running.
    CCTI timer:   every CCTI_Timer x 1.024 us: if CCTI > CCTI_Min: CCTI -= 1;
                  restart while CCTI > CCTI_Min.
    rate:         the QP waits the inter-packet delay CCT[CCTI] after each
                  packet.

The model in full: docs/nic.md, "ib_cc".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from emulator.clock import NEVER_NS     # next_rate_ns while no timer runs


@dataclass(frozen=True)
class IbCcParams:
    """One NIC's IB CC parameters (``nic.wall.ib_cc_params``; their
    defaults and bounds are ``schema.ib_cc.IbCcSpec``'s)."""
    enabled: bool
    ccti_increase: int                 # CCTI steps per BECN
    ccti_timer: int                    # CCTI decrement period, units of 1.024 us of fabric time
    ccti_timer_ns: int                 # the same on the NIC's clock
    ccti_min: int                      # the CCTI never goes below
    cct: tuple[tuple[int, int], ...]   # (CCT_Shift, CCT_Multiplier) per index

    @property
    def ccti_limit(self) -> int:
        """The spec's CCTI_Limit: the table's last index."""
        return len(self.cct) - 1

    @property
    def alpha_init(self) -> float:
        """What the per-QP log's alpha column shows before any BECN (the
        CCTI; ``DcqcnParams.alpha_init``'s counterpart)."""
        return float(self.ccti_min)

    def machine(self, line_bps: float,
                listener: Callable[[int, str], None] | None = None) -> "IbCc":
        """The state machine of one QP (``ReactionPoint.attach``)."""
        return IbCc(self, line_bps, listener)

    def as_dict(self) -> dict:
        """For the host agent's result (``cct`` as lists, for JSON)."""
        return {"enabled": self.enabled, "ccti_increase": self.ccti_increase,
                "ccti_timer": self.ccti_timer, "ccti_timer_ns": self.ccti_timer_ns,
                "ccti_min": self.ccti_min, "cct": [list(e) for e in self.cct]}


class IbCc:
    """IB CC of one QP. ``rate_bps`` is the rate the CCT entry at ``ccti``
    leaves it; ``active`` while the CCTI timer runs (CCTI > CCTI_Min)."""

    __slots__ = ("p", "line_bps", "ccti", "rate_bps", "active", "next_rate_ns",
                 "listener", "cnps", "_rates", "_timer_ns")

    def __init__(self, params: IbCcParams, line_bps: float,
                 listener: Callable[[int, str], None] | None = None):
        if line_bps <= 0:
            raise ValueError("line_bps must be > 0")
        self.p = params
        self.line_bps = float(line_bps)
        # the rate of each table index: a full packet, then multiplier/2**shift of one idle
        self._rates = tuple(self.line_bps / (1.0 + m / (1 << s)) for s, m in params.cct)
        self._timer_ns = params.ccti_timer_ns
        # CCTI_Min is the floor; hfi1 starts at 0, the same with its default ccti_min 0
        self.ccti = params.ccti_min
        self.rate_bps = self._rates[self.ccti]
        self.active = False
        self.next_rate_ns = NEVER_NS
        self.listener = listener
        self.cnps = 0

    def alpha_at(self, now_ns: int) -> float:
        """The CCTI (what the per-QP log shows in its alpha column). Exact
        only after ``advance(now_ns)``: the timer is not evaluated lazily."""
        return float(self.ccti)

    def on_cnp(self, now_ns: int) -> None:
        """A BECN for this QP at ``now_ns``."""
        self.advance(now_ns)                      # expiries due first, at their own times
        self.cnps += 1
        p = self.p
        self.ccti = min(self.ccti + p.ccti_increase, p.ccti_limit)
        self.rate_bps = self._rates[self.ccti]
        if not self.active and self.ccti > p.ccti_min:
            # hfi1: started only if not already running, so a stream of BECNs
            # does not hold off the decrements
            self.active = True
            self.next_rate_ns = now_ns + self._timer_ns
        if self.listener is not None:
            self.listener(now_ns, "cnp")

    def on_tx(self, nbytes: int, now_ns: int) -> None:
        """IB CC has no byte counter."""

    def advance(self, now_ns: int) -> None:
        """Run the CCTI timer expiries due by ``now_ns``, each at its own time."""
        floor = self.p.ccti_min
        while self.active and self.next_rate_ns <= now_ns:
            t = self.next_rate_ns
            self.ccti -= 1                        # active implies ccti > floor
            self.rate_bps = self._rates[self.ccti]
            if self.ccti > floor:
                self.next_rate_ns = t + self._timer_ns
            else:
                self.active = False
                self.next_rate_ns = NEVER_NS
            if self.listener is not None:
                self.listener(t, "rate_timer")
