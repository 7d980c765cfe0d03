"""DCQCN notification point (Zhu et al., SIGCOMM 2015, section 3.1): a
request or READ response that arrives marked CE owes the sender's QP a CNP,
at most one per QP per ``interval_ns`` (ConnectX's
``min_time_between_cnps``). The CNPs to send wait in ``out`` (``CnpFrame``s)
for the transmitter, which serves them before anything else."""
from __future__ import annotations

from collections import deque

from .frames import CnpFrame


class NotificationPoint:
    __slots__ = ("interval_ns", "out", "_next_ok_ns")

    def __init__(self, interval_ns: int | None):
        """``interval_ns`` None: never send a CNP."""
        if interval_ns is not None and interval_ns < 0:
            raise ValueError("cnp_interval_ns must be >= 0")
        self.interval_ns = None if interval_ns is None else int(interval_ns)
        self.out: deque[CnpFrame] = deque()
        self._next_ok_ns: dict[int, int] = {}    # qpn -> no CNP before this

    def on_ce(self, qp, now: int) -> None:
        """A CE-marked packet for local ``qp`` arrived at ``now``."""
        iv = self.interval_ns
        if iv is None or now < self._next_ok_ns.get(qp.qpn, 0):
            return
        self._next_ok_ns[qp.qpn] = now + iv
        self.out.append(CnpFrame(qp))
