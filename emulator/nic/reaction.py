"""Reaction point of the NIC: one congestion-control state machine per QP,
made by ``params.machine(line_bps, listener)`` -- a ``dcqcn.Dcqcn`` (Zhu et
al., SIGCOMM 2015, figure 8) for ``DcqcnParams``, an ``emulator.nic.ib_cc.IbCc``
(IBA annex A10; the log's alpha column then carries the CCTI) for
``IbCcParams``, an ``hpcc.Hpcc`` (Li et al., SIGCOMM 2019; the alpha column
carries its U) for ``HpccParams`` -- fed with the CNPs (BECNs) the QP
receives, the data frames it serializes and, for HPCC, the INT records its
ACKs bring back (``on_int_ack``), advanced from the NIC's timer pass. A
machine with a window (HPCC's ``window_bytes``) also bounds the QP's
packets in flight (``qp.window_pkts``). Each change of
a QP's current rate goes to ``on_rate(qp, rate_bps, t_ns, event)`` (the NIC
hands it to the pacer and the requester) and to ``logs.qp``. With
``params.enabled`` false no QP gets a state machine and every QP stays at
its line rate; CNPs are still logged."""
from __future__ import annotations

from typing import Callable

from emulator.int_md import unpack_hops


INT_LOG_EVERY = 8          # the INT records of one ACK in this many are logged (per QP)


class ReactionPoint:
    __slots__ = ("params", "logs", "on_rate", "max_window_pkts", "running_qps", "_int_acks")

    def __init__(self, params, on_rate: Callable, logs=None,
                 max_window_pkts: int = 1 << 30):
        """``max_window_pkts``: the NIC's own bound on a QP's packets in
        flight, which a machine's window never raises."""
        self.params = params
        self.max_window_pkts = max_window_pkts
        self.on_rate = on_rate
        self.logs = logs
        # QPs whose machine's timers run (``active``: a CNP came, the rate
        # is not back): the timer pass walks only these (websearch's NICs
        # hold ~40 QPs, and walking them all was 8 % of its agents' CPU)
        self.running_qps: dict = {}
        self._int_acks: dict = {}                # QPN -> ACKs with INT records so far

    @property
    def enabled(self) -> bool:
        return self.params.enabled

    @property
    def running(self) -> tuple:
        """The QPs whose rate-increase timers run (what ``advance`` walks)."""
        return tuple(self.running_qps)

    def attach(self, qp, line_bps: float, now: int) -> None:
        """Give ``qp`` (line rate ``line_bps``) its state machine; log its
        initial rate."""
        rate = line_bps
        if self.params.enabled:
            qp.cc = cc = self.params.machine(
                line_bps, lambda t, ev, qp=qp: self._changed(qp, t, ev))
            window = getattr(cc, "window_bytes", None)
            if window is not None:
                self._set_window(qp, window)
            if cc.rate_bps < line_bps:
                # IB CC with ccti_min > 0: CCT[CCTI_Min] is a standing delay
                rate = cc.rate_bps
                self.on_rate(qp, rate, now, "init")
        if self.logs is not None:
            alpha = qp.cc.alpha_at(0) if qp.cc is not None else self.params.alpha_init
            self.logs.qp(now, qp.qpn, rate, alpha, "init")

    def _changed(self, qp, t_ns: int, event: str) -> None:
        cc = qp.cc
        window = getattr(cc, "window_bytes", None)
        if window is not None:
            self._set_window(qp, window)
        self.on_rate(qp, cc.rate_bps, t_ns, event)
        if self.logs is not None:
            self.logs.qp(t_ns, qp.qpn, cc.rate_bps, cc.alpha_at(t_ns), event)

    def _set_window(self, qp, window_bytes: float) -> None:
        """At most ceil(W / MTU) packets in flight: a QP sends while its
        bytes in flight are below W (HPCC's window check)."""
        pkts = max(1, -int(-window_bytes // qp.mtu_bytes))
        qp.window_pkts = min(pkts, self.max_window_pkts)

    def on_int_ack(self, qp, hops: bytes, now: int) -> None:
        """An ACK of ``qp`` brought back the INT records ``hops`` (packed,
        ``emulator.int_md``); the ACK itself was handled first, so the QP's
        ``snd_una`` and ``snd_nxt`` are current."""
        cc = qp.cc
        if cc is None or not hasattr(cc, "on_ack"):
            return
        recs = unpack_hops(hops)
        cc.on_ack(now, qp.snd_una, qp.snd_nxt,
                  [(h.qlen_bytes, h.tx_bytes, h.ts_ns, h.rate_mbps * 1e6) for h in recs])
        logs = self.logs
        if logs is not None:
            n = self._int_acks.get(qp.qpn, 0)
            self._int_acks[qp.qpn] = n + 1
            if n % INT_LOG_EVERY == 0:        # a sample of the ACKs: int_hops.csv
                logs.int_hops(now, qp.qpn, recs, cc.u, cc.window_bytes)

    def on_cnp(self, qp, now: int) -> None:
        """A CNP for ``qp`` arrived at ``now``."""
        if self.logs is not None:
            self.logs.cnp(now, qp.qpn, qp.remote_qpn, "rx")
        cc = qp.cc
        if cc is not None:
            cc.on_cnp(now)
            if cc.active:
                self.running_qps[qp] = None

    def on_tx(self, qp, frame_bytes: int, slot_ns: float) -> None:
        """``qp`` serialized a data frame of ``frame_bytes`` at ``slot_ns``
        (byte counter). Only called when enabled."""
        cc = qp.cc
        if cc.active:
            cc.on_tx(frame_bytes, int(slot_ns))

    def next_timer_ns(self, limit: float) -> float:
        """The earliest rate-increase timer of a running machine, at most
        ``limit``: the NIC wakes for it, so a rate goes up at its time, not
        at whatever wakes the NIC next (a paced QP's next slot at the old rate)."""
        for qp in self.running_qps:
            t = qp.cc.next_rate_ns
            if t < limit:
                limit = t
        return limit

    def advance(self, now: int) -> None:
        """Run the rate-increase timers that are due (a machine only becomes
        active at a CNP; one that recovered leaves the pass)."""
        running = self.running_qps
        if not running:
            return
        for qp in list(running):
            cc = qp.cc
            if cc.active and cc.next_rate_ns <= now:
                cc.advance(now)
            if not cc.active:
                del running[qp]
