"""Reaction point of the NIC: one congestion-control state machine per QP,
made by ``params.machine(line_bps, listener)`` -- a ``dcqcn.Dcqcn`` (Zhu et
al., SIGCOMM 2015, figure 8) for ``DcqcnParams``, an ``emulator.ib.cc.IbCc``
(IBA annex A10; the log's alpha column then carries the CCTI) for
``IbCcParams`` -- fed with the CNPs (BECNs) the QP receives and the data
frames it serializes, advanced from the NIC's timer pass. Each change of
a QP's current rate goes to ``on_rate(qp, rate_bps, t_ns, event)`` (the NIC
hands it to the pacer and the requester) and to ``logs.qp``. With
``params.enabled`` false no QP gets a state machine and every QP stays at
its line rate; CNPs are still logged."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .dcqcn import DcqcnParams

if TYPE_CHECKING:
    from emulator.ib.cc import IbCcParams


class ReactionPoint:
    __slots__ = ("params", "logs", "on_rate", "_qps")

    def __init__(self, params: DcqcnParams | IbCcParams, on_rate: Callable, logs=None):
        self.params = params
        self.on_rate = on_rate
        self.logs = logs
        self._qps: list = []                     # QPs with a state machine

    @property
    def enabled(self) -> bool:
        return self.params.enabled

    def attach(self, qp, line_bps: float, now: int) -> None:
        """Give ``qp`` (line rate ``line_bps``) its state machine; log its
        initial rate."""
        rate = line_bps
        if self.params.enabled:
            qp.cc = cc = self.params.machine(
                line_bps, lambda t, ev, qp=qp: self._changed(qp, t, ev))
            self._qps.append(qp)
            if cc.rate_bps < line_bps:
                # IB CC with ccti_min > 0: CCT[CCTI_Min] is a standing delay
                rate = cc.rate_bps
                self.on_rate(qp, rate, now, "init")
        if self.logs is not None:
            alpha = qp.cc.alpha_at(0) if qp.cc is not None else self.params.alpha_init
            self.logs.qp(now, qp.qpn, rate, alpha, "init")

    def _changed(self, qp, t_ns: int, event: str) -> None:
        cc = qp.cc
        self.on_rate(qp, cc.rate_bps, t_ns, event)
        if self.logs is not None:
            self.logs.qp(t_ns, qp.qpn, cc.rate_bps, cc.alpha_at(t_ns), event)

    def on_cnp(self, qp, now: int) -> None:
        """A CNP for ``qp`` arrived at ``now``."""
        if self.logs is not None:
            self.logs.cnp(now, qp.qpn, qp.remote_qpn, "rx")
        if qp.cc is not None:
            qp.cc.on_cnp(now)

    def on_tx(self, qp, frame_bytes: int, slot_ns: float) -> None:
        """``qp`` serialized a data frame of ``frame_bytes`` at ``slot_ns``
        (byte counter). Only called when enabled."""
        cc = qp.cc
        if cc.active:
            cc.on_tx(frame_bytes, int(slot_ns))

    def advance(self, now: int) -> None:
        """Run the rate-increase timers that are due."""
        for qp in self._qps:
            cc = qp.cc
            if cc.active and cc.next_rate_ns <= now:
                cc.advance(now)
