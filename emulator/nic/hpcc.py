"""HPCC reaction point (Li et al., "HPCC: High Precision Congestion Control",
SIGCOMM 2019, section 3 and Algorithm 1), one per queue pair.

Pure state machine driven with explicit times (ns of the caller's clock, any
monotonic origin), as ``emulator.nic.dcqcn`` is, with the same interface
towards ``emulator.nic.reaction.ReactionPoint`` (``on_cnp(now)``,
``on_tx(frame_bytes, now)``, ``advance(now)``, ``rate_bps``, ``active``,
``next_rate_ns``, ``alpha_at(t)``) plus the one event HPCC reacts to:
``on_ack(now, ack_seq, snd_nxt, hops)``, an ACK carrying the in-band
telemetry (INT) records the data packet collected, one per egress port on
its path: ``(qlen_bytes, tx_bytes, ts_ns, rate_bps)``. Every change of the
window goes to ``listener(t_ns, "ack")``.

HPCC has no timers and ignores ECN: ``active`` is always false (so the
reaction point never calls ``advance``/``on_tx``, which do nothing), a CNP is
only counted, and the per-QP log's alpha column carries U (``alpha_at``).

The algorithm (Algorithm 1; T the base RTT, B a link's rate, W_c the
reference window)::

The model in full: docs/nic.md, "hpcc".
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from emulator.clock import NEVER_NS     # next_rate_ns: HPCC runs no timer

_WRAP = 1 << 32                  # tx_bytes and ts of a hop record are 32-bit counters


@dataclass(frozen=True)
class HpccParams:
    """One NIC's HPCC parameters (``nic.wall.hpcc_params``)."""
    enabled: bool
    eta: float                    # target utilisation
    max_stage: int                # per-RTT additive increases before a multiplicative one
    w_ai_bytes: float | None      # W_AI; None: W_init (1 - eta) / expected_flows
    expected_flows: int           # N of W_AI's default
    base_rtt_ns: int              # T, fabric ns, the INT records' clock
    min_rate_frac: float          # rate floor, fraction of line rate
    dilation: float               # NIC clock ns per fabric ns: line_bps x this is fabric
    alpha_init: float = 0.0       # what the log's alpha column (U) shows before any ACK (not a knob)

    def as_dict(self) -> dict:
        return asdict(self)

    def machine(self, line_bps: float,
                listener: Callable[[int, str], None] | None = None) -> "Hpcc":
        """The state machine of one QP (``ReactionPoint.attach``; the same
        method as ``DcqcnParams.machine``)."""
        return Hpcc(self, line_bps, listener)


class Hpcc:
    """Reaction point of one QP. ``rate_bps`` is R = W / T, ``window_bytes``
    W, ``wc_bytes`` the reference window W_c, ``u`` the EWMA U."""

    __slots__ = ("p", "line_bps", "base_rtt_ns", "w_init_bytes", "w_min_bytes", "w_ai_bytes",
                 "rate_bps", "window_bytes", "wc_bytes", "u", "inc_stage", "last_update_seq",
                 "active", "next_rate_ns", "listener", "cnps", "_hops")

    def __init__(self, params: HpccParams, line_bps: float,
                 listener: Callable[[int, str], None] | None = None):
        if line_bps <= 0:
            raise ValueError("line_bps must be > 0")
        if params.base_rtt_ns < 1:
            raise ValueError("hpcc.base_rtt_ns must be >= 1")
        self.p = params
        self.line_bps = float(line_bps)
        self.base_rtt_ns = int(params.base_rtt_ns)
        # B x T in fabric units: the line rate is the NIC's (dilated) one
        self.w_init_bytes = self.line_bps * params.dilation * self.base_rtt_ns / 8e9
        self.w_min_bytes = min(1.0, params.min_rate_frac) * self.w_init_bytes
        self.w_ai_bytes = (float(params.w_ai_bytes) if params.w_ai_bytes is not None else
                           self.w_init_bytes * (1.0 - params.eta) / params.expected_flows)
        self.window_bytes = self.w_init_bytes   # W
        self.wc_bytes = self.w_init_bytes       # W_c
        self.rate_bps = self.line_bps           # R = W / T
        self.u = float(params.alpha_init)       # U
        self.inc_stage = 0
        self.last_update_seq = 0
        self.active = False                     # no timers: never advanced
        self.next_rate_ns = NEVER_NS
        self.listener = listener
        self.cnps = 0
        self._hops: tuple | None = None         # the last ACK's hop records (L)

    def alpha_at(self, now_ns: int) -> float:
        """U (what the per-QP log shows in its alpha column)."""
        return self.u

    def on_cnp(self, now_ns: int) -> None:
        """HPCC ignores ECN: a CNP is only counted."""
        self.cnps += 1

    def on_tx(self, nbytes: int, now_ns: int) -> None:
        """HPCC has no byte counter."""

    def advance(self, now_ns: int) -> None:
        """HPCC has no timer."""

    def on_ack(self, now_ns: int, ack_seq: int, snd_nxt: int,
               hops: Sequence[tuple[int, int, int, float]]) -> None:
        """An ACK at ``now_ns`` with the hop records of the packet it answers.

        ``ack_seq``: the sequence number the ACK acknowledges up to,
        exclusive (ns-3's ACK carries the receiver's next expected sequence;
        for a RoCE ACK, whose PSN is the last packet's it acknowledges, pass
        PSN + 1); ``snd_nxt``: the next sequence number the QP will send.
        Both unwrapped (monotonic) packet sequence numbers. ``hops``: one
        ``(qlen_bytes, tx_bytes, ts_ns, rate_bps)`` per egress port on the
        path, in path order: queue length, the port's transmitted-bytes
        counter and its timestamp (both 32-bit, wrapping; fabric ns, the
        clock of ``base_rtt_ns``) and the port's rate (fabric bit/s)."""
        hops = tuple(hops)
        old = self._hops
        if old is None or len(old) != len(hops):
            # the first ACK (or a new path) only gives the reference records
            if old is None:
                self.last_update_seq = max(self.last_update_seq, snd_nxt)
            self._hops = hops
            return
        t = self.base_rtt_ns
        # MeasureInflight: the most loaded link's u and its sampling interval
        new = list(old)
        u_max, tau = -1.0, 0
        for i, (rec, prev) in enumerate(zip(hops, old, strict=True)):
            qlen, tx, ts, rate = rec
            dts = (ts - prev[2]) % _WRAP
            if dts == 0 or rate <= 0:
                continue                        # no sample from this hop
            tx_rate = ((tx - prev[1]) % _WRAP) * 8e9 / dts
            u = min(qlen, prev[0]) * 8e9 / (rate * t) + tx_rate / rate
            if u > u_max:
                u_max, tau = u, dts
            new[i] = rec
        self._hops = tuple(new)
        if u_max < 0:
            return
        tau = min(tau, t)
        self.u = (self.u * (t - tau) + u_max * tau) / t
        # ComputeWind: from W_c; W_c itself moves once per RTT
        p = self.p
        big_u = self.u
        if big_u >= p.eta or self.inc_stage >= p.max_stage:
            w = (self.wc_bytes * p.eta / big_u if big_u > 0 else self.w_init_bytes) \
                + self.w_ai_bytes
            stage = 0
        else:
            w = self.wc_bytes + self.w_ai_bytes
            stage = self.inc_stage + 1
        if w < self.w_min_bytes:
            w = self.w_min_bytes
        elif w > self.w_init_bytes:
            w = self.w_init_bytes
        if ack_seq > self.last_update_seq:
            self.wc_bytes = w
            self.inc_stage = stage
            self.last_update_seq = max(self.last_update_seq, snd_nxt)   # only forward
        if w != self.window_bytes:
            self.window_bytes = w
            self.rate_bps = self.line_bps * (w / self.w_init_bytes)    # W / T
            if self.listener is not None:
                self.listener(now_ns, "ack")
