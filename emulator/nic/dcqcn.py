"""DCQCN reaction point (Zhu et al., "Congestion Control for Large-Scale RDMA
Deployments", SIGCOMM 2015, section 3.1 and figure 8), one per queue pair.

Pure state machine driven with explicit times (ns, any monotonic origin), so
it can be unit-tested without a NIC. The NIC calls ``on_cnp(now)`` for each
CNP, ``on_tx(frame_bytes, now)`` for each data frame it serializes and
``advance(now)`` from its timer pass; every change of the current rate is
reported to ``listener(t_ns, event)`` with ``event`` one of ``cnp``,
``rate_timer``, ``byte_counter``.

The algorithm (paper's notation; Rc current rate, Rt target rate)::

The model in full: docs/nic.md, "dcqcn".
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable


@dataclass(frozen=True)
class DcqcnParams:
    """One NIC's DCQCN parameters on its clock (``nic.wall.dcqcn_params``)."""
    enabled: bool
    g: float                      # alpha gain
    alpha_init: float             # alpha before the first CNP
    alpha_timer_ns: int           # K: alpha decays every K without a CNP
    rate_timer_ns: int            # T: rate-increase timer period
    byte_counter_bytes: int       # B: rate-increase event every B bytes sent
    fast_recovery_steps: int      # F
    rai_frac: float               # R_AI, fraction of line rate
    rhai_frac: float              # R_HAI, fraction of line rate
    min_rate_frac: float          # R_min, fraction of line rate

    def as_dict(self) -> dict:
        return asdict(self)

    def machine(self, line_bps: float,
                listener: Callable[[int, str], None] | None = None) -> "Dcqcn":
        """The state machine of one QP (``ReactionPoint.attach``; the same
        method as ``emulator.nic.ib_cc.IbCcParams.machine``)."""
        return Dcqcn(self, line_bps, listener)


class Dcqcn:
    """Reaction point of one QP. ``rate_bps`` is the current rate Rc."""

    __slots__ = ("p", "line_bps", "min_bps", "rai_bps", "rhai_bps", "rate_bps", "target_bps",
                 "_alpha", "_alpha_t0", "_decay", "active", "t_stage", "bc_stage",
                 "bytes_acc", "next_rate_ns", "listener", "cnps")

    def __init__(self, params: DcqcnParams, line_rate_bps: float,
                 listener: Callable[[int, str], None] | None = None):
        if line_rate_bps <= 0:
            raise ValueError("line_rate_bps must be > 0")
        self.p = params
        self.line_bps = float(line_rate_bps)
        self.min_bps = min(self.line_bps, params.min_rate_frac * self.line_bps)
        self.rai_bps = params.rai_frac * self.line_bps
        self.rhai_bps = params.rhai_frac * self.line_bps
        self.rate_bps = self.line_bps          # Rc
        self.target_bps = self.line_bps        # Rt
        self._alpha = params.alpha_init        # alpha at _alpha_t0 (right after the last CNP)
        self._alpha_t0 = None                  # None: no CNP yet, alpha does not decay
        self._decay = 1.0 - params.g
        self.active = False                    # rate-increase machinery running
        self.t_stage = 0                       # timer events since the last cut
        self.bc_stage = 0                      # byte-counter events since the last cut
        self.bytes_acc = 0
        self.next_rate_ns = 0
        self.listener = listener
        self.cnps = 0

    # -- alpha ----------------------------------------------------------------
    def alpha_at(self, now_ns: int) -> float:
        """alpha at ``now_ns``: decayed once per full K since the last CNP."""
        t0 = self._alpha_t0
        if t0 is None or now_ns < t0 + self.p.alpha_timer_ns:
            return self._alpha
        n = (now_ns - t0) // self.p.alpha_timer_ns
        return self._alpha * self._decay ** n

    # -- events ---------------------------------------------------------------
    def on_cnp(self, now_ns: int) -> None:
        self.advance(now_ns)
        self.cnps += 1
        alpha = self.alpha_at(now_ns)
        self.target_bps = self.rate_bps
        self.rate_bps = max(self.min_bps, self.rate_bps * (1.0 - alpha / 2.0))
        self._alpha = self._decay * alpha + self.p.g
        self._alpha_t0 = now_ns
        self.active = True
        self.t_stage = self.bc_stage = 0
        self.bytes_acc = 0
        self.next_rate_ns = now_ns + self.p.rate_timer_ns
        if self.listener is not None:
            self.listener(now_ns, "cnp")

    def on_tx(self, nbytes: int, now_ns: int) -> None:
        """``nbytes`` more bytes were sent (call only while ``active``)."""
        if not self.active:
            return
        if now_ns >= self.next_rate_ns:
            self.advance(now_ns)
            if not self.active:
                return
        self.bytes_acc += nbytes
        b = self.p.byte_counter_bytes
        while self.bytes_acc >= b and self.active:
            self.bytes_acc -= b
            self.bc_stage += 1
            self._increase(now_ns, "byte_counter")

    def advance(self, now_ns: int) -> None:
        """Run the rate-increase timer events due by ``now_ns`` (each at its
        own scheduled time)."""
        while self.active and self.next_rate_ns <= now_ns:
            t = self.next_rate_ns
            self.next_rate_ns = t + self.p.rate_timer_ns
            self.t_stage += 1
            self._increase(t, "rate_timer")

    def _increase(self, t_ns: int, event: str) -> None:
        f = self.p.fast_recovery_steps
        ts, bs = self.t_stage, self.bc_stage
        if ts > f or bs > f:                       # past fast recovery
            lo = ts if ts < bs else bs
            if lo <= f:
                self.target_bps += self.rai_bps    # additive increase
            else:
                self.target_bps += (lo - f) * self.rhai_bps   # hyper increase
            if self.target_bps > self.line_bps:
                self.target_bps = self.line_bps
        rc = (self.target_bps + self.rate_bps) / 2.0
        # (Rt + Rc) / 2 only approaches Rt: snap the last part of a bit per second
        if self.target_bps - rc < 1.0:
            rc = self.target_bps
        self.rate_bps = rc
        if rc >= self.line_bps:
            self.rate_bps = self.line_bps
            self.active = False                    # recovered: dormant until the next CNP
        if self.listener is not None:
            self.listener(t_ns, event)
