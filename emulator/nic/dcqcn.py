"""DCQCN reaction point (Zhu et al., "Congestion Control for Large-Scale RDMA
Deployments", SIGCOMM 2015, section 3.1 and figure 8), one per queue pair.

Pure state machine driven with explicit times (ns, any monotonic origin), so
it can be unit-tested without a NIC. The NIC calls ``on_cnp(now)`` for each
CNP, ``on_tx(frame_bytes, now)`` for each data frame it serializes and
``advance(now)`` from its timer pass; every change of the current rate is
reported to ``listener(t_ns, event)`` with ``event`` one of ``cnp``,
``rate_timer``, ``byte_counter``.

The algorithm (paper's notation; Rc current rate, Rt target rate)::

    CNP:            Rt = Rc;  Rc = max(R_min, Rc * (1 - alpha/2));
                    alpha = (1 - g) * alpha + g;
                    restart the alpha timer (K) and the rate-increase
                    timer (T), clear the byte counter and both stage
                    counters.
    alpha timer:    every K without a CNP: alpha = (1 - g) * alpha.
    rate increase:  an event every T (timer) and every B bytes sent (byte
                    counter: data frames as serialized, Ethernet header to
                    ICRC, retransmissions included); each bumps its own
                    stage counter (T_i, BC_i),
                    then
                      fast recovery    max(T_i, BC_i) <= F:  Rt unchanged
                      additive incr.   else if min(T_i, BC_i) <= F:  Rt += R_AI
                      hyper increase   else: Rt += (min(T_i, BC_i) - F) * R_HAI
                    and Rc = (Rt + Rc) / 2; Rt and Rc are capped at the line
                    rate. So the first F events after a cut are fast-recovery
                    steps ("F successive iterations" in the paper), and the
                    hyper increase needs both counters past F (timer *and*
                    bytes: a sender that sends little recovers only
                    additively).

The state machine is dormant (no timers, Rc = line rate) until the first
CNP and goes dormant again when Rc is back at the line rate. The alpha timer
is evaluated lazily (alpha is a closed form of the time since the last CNP),
which is exactly equivalent to a timer firing every K.

Parameters (``DcqcnParams``; the agent config's ``dcqcn`` dict uses the same
names): times in ns and rates as fractions of the QP's line rate, so that
with time dilation only the times are scaled. Defaults are the paper's values
for a 40 Gbit/s NIC (table 1 and section 3.1: g = 1/256, K = 55 us,
T = 55 us, B = 10 MB (taken as 10 MiB), F = 5, R_AI = 40 Mbit/s), with R_HAI = 200 Mbit/s and
R_min = 100 Mbit/s (not given in the paper: the values of its authors' ns-3
code, bobzhuyb/ns3-rdma) and alpha = 1 before the first CNP (Mellanox's
initial_alpha_value 1023/1023; the first CNP halves the rate).
In the host agent's config (``dcqcn``, every key optional) the times are
wall ns (already multiplied by the dilation factor); ``enabled: false``
keeps the QPs at line rate (CNPs are still counted).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

from .cc_config import number, params_from_config

_LINE_40G = 40e9


@dataclass
class DcqcnParams:
    enabled: bool = True
    g: float = 1 / 256                    # alpha gain
    alpha_init: float = 1.0               # alpha before the first CNP
    alpha_timer_ns: int = 55_000          # K: alpha decays every K without a CNP
    rate_timer_ns: int = 55_000           # T: rate-increase timer period
    byte_counter_bytes: int = 10 << 20    # B: rate-increase event every B bytes sent
    fast_recovery_steps: int = 5          # F
    rai_frac: float = 40e6 / _LINE_40G    # R_AI, fraction of line rate (0.001)
    rhai_frac: float = 200e6 / _LINE_40G  # R_HAI, fraction of line rate (0.005)
    min_rate_frac: float = 100e6 / _LINE_40G  # R_min, fraction of line rate (0.0025)

    @classmethod
    def from_config(cls, d: dict | None) -> "DcqcnParams":
        """Build from the agent config's ``dcqcn`` dict (missing keys take
        the defaults). Raises ValueError on an unknown key or a bad value."""
        return params_from_config(cls, d, "dcqcn", lambda k, v: number("dcqcn", k, v))

    def validate(self) -> None:
        if not 0 < self.g <= 1:
            raise ValueError("dcqcn.g must be in (0, 1]")
        if not 0 <= self.alpha_init <= 1:
            raise ValueError("dcqcn.alpha_init must be in [0, 1]")
        for k in ("alpha_timer_ns", "rate_timer_ns", "byte_counter_bytes"):
            if getattr(self, k) <= 0:
                raise ValueError(f"dcqcn.{k} must be > 0")
        f = self.fast_recovery_steps
        if f < 0 or int(f) != f:
            raise ValueError("dcqcn.fast_recovery_steps must be an integer >= 0")
        for k in ("rai_frac", "rhai_frac"):
            if not 0 <= getattr(self, k) <= 1:
                raise ValueError(f"dcqcn.{k} must be in [0, 1]")
        if not 0 < self.min_rate_frac <= 1:
            raise ValueError("dcqcn.min_rate_frac must be in (0, 1]")
        self.alpha_timer_ns = int(self.alpha_timer_ns)
        self.rate_timer_ns = int(self.rate_timer_ns)
        self.byte_counter_bytes = int(self.byte_counter_bytes)
        self.fast_recovery_steps = int(self.fast_recovery_steps)

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
