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

This is what Linux's hfi1 driver does (drivers/infiniband/hw/hfi1):
``process_becn()`` in rc.c raises the CCTI, capped at ``ccti_limit``, and
starts the timer only "if (!hrtimer_active(...))" ("ccti_timer is in units
of 1.024 usec", ``nsec = 1024 * ccti_timer``): a BECN never postpones a
pending decrement. ``cca_timer_fn()`` in init.c decrements the CCTI and
restarts while it is above ``ccti_min``. (hfi1 keeps its CCTI per service
level and paces the whole port at the largest; we take the spec's QP-based
variant.)

A CCT entry is 16 bits: CCT_Shift (bits 15..14) and CCT_Multiplier (bits
13..0). hfi1's ``set_link_ipg()`` (init.c) turns it into a delay:
``ipd = (max_pkt_time >> shift) * multiplier``, max_pkt_time being the time
of a maximum-size packet at the line rate. The delay is thus the fraction
multiplier / 2**shift of a full packet's time, and a QP sending full packets
back to back with that gap runs at ``line / (1 + multiplier / 2**shift)``
(computed exactly here, without hfi1's integer truncation). Entry 0 is
normally (0, 0): no delay, the line rate.

Parameters (``IbCcParams``; the agent config's ``ib_cc`` dict uses the same
names): ``ccti_increase`` 1, ``ccti_timer`` 150 (153.6 us), ``ccti_min`` 0
are OpenSM's defaults (its congestion-control configuration; its
``trigger_threshold`` only decides what the CA logs, so we have none).
OpenSM ships an empty CCT, i.e. CC off; the default table here is ours, not
the spec's: 128 entries, entry i = (shift 2, multiplier i), a delay of i/4
packet times, so one BECN takes a QP to 80% of its line rate, four to 50%,
the last entry (127) to ~3%. ``ccti_timer`` stays in the spec's unit of
fabric time; ``dilation`` (clock ns per fabric ns, the experiment's D, as
``RoceNic``'s) makes ``ccti_timer_ns`` a time on the caller's clock, so that
the config dict alone, like the ``dcqcn`` dict's wall-ns timers, says when
the timer fires. Rates are fractions of the QP's line rate: dilation-free.

The per-QP log's ``alpha`` column carries the CCTI for IB CC (``alpha_at``).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Callable

from .cc_config import integer, number, params_from_config

CCT_MAX_ENTRIES = 1024           # the spec allows 16384; 1024 is plenty here
_NEVER_NS = 1 << 62              # next_rate_ns while no timer runs


def _default_cct() -> tuple[tuple[int, int], ...]:
    return tuple((2, i) for i in range(128))


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _ib_cc_value(k: str, v):
    """One ``ib_cc`` key's value: the CCT as [shift, multiplier] pairs, the
    dilation a number, every other key an integer (the spec's fields)."""
    if k == "cct":
        if not isinstance(v, (list, tuple)) or not all(
                isinstance(e, (list, tuple)) and len(e) == 2 for e in v):
            raise ValueError(f"ib_cc.cct: expected a list of [shift, multiplier] pairs, got {v!r}")
        return tuple(tuple(e) for e in v)
    if k == "dilation":
        return number("ib_cc", k, v)
    return integer("ib_cc", k, v)


@dataclass
class IbCcParams:
    enabled: bool = True
    ccti_increase: int = 1            # CCTI steps per BECN (8 bits in the spec)
    ccti_timer: int = 150             # CCTI decrement period, units of 1.024 us of fabric time
    ccti_min: int = 0                 # the CCTI never goes below (8 bits in the spec)
    cct: tuple[tuple[int, int], ...] = _default_cct()  # (CCT_Shift, CCT_Multiplier) per index
    dilation: float = 1.0             # clock ns per fabric ns (scales ccti_timer_ns)

    @property
    def ccti_timer_ns(self) -> int:
        """The CCTI timer's period in ns of the caller's clock."""
        return round(1024 * self.ccti_timer * self.dilation)

    @property
    def ccti_limit(self) -> int:
        """The spec's CCTI_Limit: the table's last index."""
        return len(self.cct) - 1

    @property
    def alpha_init(self) -> float:
        """What the per-QP log's alpha column shows before any BECN (the
        CCTI; ``DcqcnParams.alpha_init``'s counterpart)."""
        return float(self.ccti_min)

    def scaled(self, dilation: float) -> "IbCcParams":
        """A copy whose timer runs ``dilation`` times slower (fabric -> wall)."""
        p = replace(self, dilation=self.dilation * dilation)
        p.validate()
        return p

    def machine(self, line_bps: float,
                listener: Callable[[int, str], None] | None = None) -> "IbCc":
        """The state machine of one QP (``ReactionPoint.attach``)."""
        return IbCc(self, line_bps, listener)

    @classmethod
    def from_config(cls, d: dict | None) -> "IbCcParams":
        """Build from the agent config's ``ib_cc`` dict (missing keys take the
        defaults; ``cct`` as a list of [shift, multiplier] pairs). Raises
        ValueError on an unknown key or a bad value."""
        return params_from_config(cls, d, "ib_cc", _ib_cc_value)

    def validate(self) -> None:
        # bounds of the spec's fields (Congestion Setting: CCTI_Increase and
        # CCTI_Min 8 bits, CCTI_Timer 16 bits); ccti_timer 0 would never let
        # the rate recover
        for k, lo, hi in (("ccti_increase", 1, 255), ("ccti_timer", 1, 65535),
                          ("ccti_min", 0, 255)):
            v = getattr(self, k)
            if not _is_int(v) or not lo <= v <= hi:
                raise ValueError(f"ib_cc.{k} must be an integer in {lo}..{hi}, got {v!r}")
        n = len(self.cct)
        if not 1 <= n <= CCT_MAX_ENTRIES:
            raise ValueError(f"ib_cc.cct must have 1..{CCT_MAX_ENTRIES} entries, got {n}")
        for i, e in enumerate(self.cct):
            s, m = e
            if not _is_int(s) or not 0 <= s <= 3:
                raise ValueError(f"ib_cc.cct[{i}]: shift must be 0..3 (2 bits), got {s!r}")
            if not _is_int(m) or not 0 <= m <= 0x3FFF:
                raise ValueError(f"ib_cc.cct[{i}]: multiplier must be 0..16383 (14 bits), "
                                 f"got {m!r}")
        if self.ccti_min >= n:
            raise ValueError(f"ib_cc.ccti_min ({self.ccti_min}) must be < the table's "
                             f"{n} entries")
        if isinstance(self.dilation, bool) or not self.dilation >= 1:
            raise ValueError(f"ib_cc.dilation must be >= 1, got {self.dilation!r}")

    def as_dict(self) -> dict:
        """The ``from_config`` form (``cct`` as lists, for JSON)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["cct"] = [list(e) for e in self.cct]
        return d


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
        self.next_rate_ns = _NEVER_NS
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
                self.next_rate_ns = _NEVER_NS
            if self.listener is not None:
                self.listener(t, "rate_timer")
