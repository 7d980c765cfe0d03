"""RC requester of the NIC (IBA 9.7, go-back-N as ConnectX/rxe do it):
work requests in, data frames out on demand, ACK/NAKs in, completions out.

* ``post``: a SEND/WRITE/READ work request becomes a WQE holding the next
  ``npkts`` PSNs; packets are not stored but rebuilt from the message buffer
  when (re)sent.
* ``take``: the transmitter asks for a QP's next frame (``DataFrame``, or a
  ``ReadRequestFrame`` asking for all of a READ's remaining responses) and
  the send pointer moves past it; ``sent`` arms the ACK timeout when the
  frame leaves the wire.
* ``on_ack``: an ACK for PSN p completes every message whose packets are all
  <= p; a NAK (PSN sequence error) for p acknowledges < p and restarts
  sending at p; an RNR NAK holds the QP for its timer; remote errors fail
  the QP. Only READ responses acknowledge a READ (``read.read_limit``).
* ``timers``: with no ACK progress for the ACK timeout while packets are
  outstanding, sending restarts at the oldest unacknowledged PSN; the
  timeout doubles per consecutive expiry (up to 8x) and after ``retry_cnt``
  the QP fails. Timeouts that expire while PFC holds the data class are
  re-armed one timeout past the pause (no retry counted).

State lives on the ``QueuePair`` (its requester fields); completions go to
``cq``, counters to ``stats``. Times are explicit ``now`` arguments; wall
stamps of completions come from ``unix_ns()`` (the NIC's clock).
"""
from __future__ import annotations

from typing import Callable

from emulator.wire import ICRC_BYTES, RETH_BYTES, ROCE_HDR_BYTES, WIRE_OVERHEAD_BYTES

from .frames import DataFrame, ReadRequestFrame
from .qp import _OPS_SEND, _OPS_WRITE, RNR_TIMER_US, Completion, QpState, WcOpcode, WcStatus, \
    _SendWqe
from .read import READ_REQ_FRAME_BYTES, read_limit
from .roce import (
    AETH_ACK, AETH_RNR_NAK, AETH_TYPE_MASK, NAK_INVALID_REQUEST, NAK_PSN_SEQ_ERR,
    NAK_REMOTE_ACCESS_ERR, NAK_REMOTE_OP_ERR, PSN_HALF, PSN_MASK,
)

_NAK_STATUS = {NAK_INVALID_REQUEST & 0x1F: WcStatus.REM_INV_REQ_ERR,
               NAK_REMOTE_ACCESS_ERR & 0x1F: WcStatus.REM_ACCESS_ERR,
               NAK_REMOTE_OP_ERR & 0x1F: WcStatus.REM_OP_ERR}


def _wc_opcode(w) -> WcOpcode:
    return (WcOpcode.RDMA_WRITE if w.is_write else WcOpcode.RDMA_READ if w.is_read
            else WcOpcode.SEND)


class Requester:
    """Requester side of every QP of one NIC."""

    def __init__(self, *, link_rate_bps: int, mtu_bytes: int, ack_every_n: int, rto_ns: int,
                 retry_cnt: int, rnr_retry: int | None, max_outstanding_pkts: int,
                 cq, stats, unix_ns: Callable[[], int]):
        self.link_rate_bps = link_rate_bps
        self.mtu_bytes = mtu_bytes
        self.ack_every_n = ack_every_n
        self.rto_ns = rto_ns
        self.retry_cnt = retry_cnt
        self.rnr_retry = rnr_retry
        self.max_outstanding_pkts = max_outstanding_pkts
        # the default-RTO rule for a QP paced below the link rate: 8 x
        # ack_every_n full frames at its current rate (see rto_for)
        self._rto_frames_bits = 8 * ack_every_n * (ROCE_HDR_BYTES + RETH_BYTES + mtu_bytes
                                                   + ICRC_BYTES + WIRE_OVERHEAD_BYTES) * 8
        self.cq = cq
        self.stats = stats
        self.unix_ns = unix_ns
        self.qps: list = []

    # -- work requests -----------------------------------------------------------
    def post(self, qp, wr_id: int, buf, is_write: bool, remote_addr: int, rkey: int,
             signaled: bool, now: int, *, is_read: bool = False) -> None:
        if qp.state != QpState.RTS:
            raise RuntimeError(f"QP {qp.qpn} is in state {qp.state.name}")
        length = len(buf)
        npkts = max(1, -(-length // self.mtu_bytes))
        if npkts >= PSN_HALF:
            raise ValueError("message too long for the 24-bit PSN space")
        w = _SendWqe()
        w.wr_id, w.is_write, w.buf, w.length = wr_id, is_write, buf, length
        w.ops = _OPS_WRITE if is_write else _OPS_SEND
        w.remote_addr, w.rkey, w.signaled = remote_addr, rkey, signaled
        w.first_psn, w.npkts = qp.next_psn, npkts
        w.is_read, w.rd_got = is_read, 0
        w.post_unix_ns = self.unix_ns()
        w.post_ns = now
        qp.next_psn += npkts
        qp.sq.append(w)
        if is_read:
            qp.n_reads += 1

    # -- transmit ------------------------------------------------------------------
    def peek(self, qp) -> tuple:
        """(WQE, packet index, payload bytes) of ``qp``'s next frame."""
        w = qp.sq[qp.cur_idx]
        k = qp.snd_nxt - w.first_psn
        plen = w.length - k * self.mtu_bytes
        return w, k, (plen if plen < self.mtu_bytes else self.mtu_bytes)

    def take(self, qp) -> tuple:
        """``qp``'s next frame and its length; the send pointer moves past it."""
        w = qp.sq[qp.cur_idx]
        psn = qp.snd_nxt
        k = psn - w.first_psn
        if psn < qp.snd_max:
            self.stats.tx_retransmits += 1
        if w.is_read:                    # one READ request asks for all its remaining PSNs
            frame = ReadRequestFrame(qp, w, k, psn)
            flen = READ_REQ_FRAME_BYTES
            qp.snd_nxt = psn = psn + w.npkts - k
            qp.cur_idx += 1
        else:
            mtu = self.mtu_bytes
            plen = w.length - k * mtu
            if plen > mtu:
                plen = mtu
            frame = DataFrame(qp, w, k, psn)
            flen = ROCE_HDR_BYTES + (RETH_BYTES if (w.is_write and k == 0) else 0) \
                + plen + (-plen & 3) + ICRC_BYTES
            qp.snd_nxt = psn = psn + 1
            if k + 1 >= w.npkts:
                qp.cur_idx += 1
        if psn > qp.snd_max:
            qp.snd_max = psn
        return frame, flen

    def sent(self, qp, now: int) -> None:
        """A request of ``qp`` left the wire at ``now``: the ACK timeout runs."""
        if not qp.rto_deadline_ns:
            qp.rto_deadline_ns = now + self.rto_for(qp)

    def rto_for(self, qp) -> int:
        """The ACK timeout of ``qp``: ``rto_ns``, or longer for a QP paced
        below the link rate -- at least 8 x ``ack_every_n`` full frames at
        its current rate (the rule of the default ``rto_ns``), so that a
        DCQCN-throttled QP does not time out between two AckReqs."""
        r = qp.rate_bps
        if r is None or r >= self.link_rate_bps:
            return self.rto_ns
        return max(self.rto_ns, int(self._rto_frames_bits * 1e9 / r))

    def rate_cut(self, qp, t_ns: int) -> None:
        """``qp``'s rate was cut at ``t_ns`` (a CNP): its running ACK timeout
        gets at least a full timeout at the new rate."""
        if qp.rto_deadline_ns:
            dl = t_ns + self.rto_for(qp)
            if dl > qp.rto_deadline_ns:
                qp.rto_deadline_ns = dl

    # -- ACK/NAK -----------------------------------------------------------------------
    def on_ack(self, qp, pkt, now: int) -> None:
        st = self.stats
        syn = pkt.aeth_syndrome
        if syn is None:
            return
        t = syn & AETH_TYPE_MASK
        d = (pkt.psn - qp.snd_una) & PSN_MASK
        if t == AETH_ACK:
            st.rx_acks += 1
            if d >= PSN_HALF:
                return                       # old / duplicate ACK
            p = qp.snd_una + d               # acknowledged through p
            if p >= qp.snd_max:
                return                       # ACK for something never sent: ignore
            if qp.n_reads:                   # only READ responses acknowledge a READ
                p = min(p, read_limit(qp) - 1)
            self.acked_through(qp, p + 1, now)
            return
        # NAKs: PSN is the one the responder expects
        if d >= PSN_HALF:
            return
        p = qp.snd_una + d
        if p > qp.snd_max:
            return
        if qp.n_reads:
            p = min(p, read_limit(qp))
        if t == AETH_RNR_NAK:
            st.rx_rnr_naks += 1
            self.acked_through(qp, p, now)
            qp.rnr_retries += 1
            if self.rnr_retry is not None and qp.rnr_retries > self.rnr_retry:
                self.fail(qp, WcStatus.RNR_RETRY_EXC_ERR, now)
                return
            qp.paused_until_ns = now + RNR_TIMER_US[syn & 0x1F] * 1000
            qp.retries = 0
            qp.rto_deadline_ns = 0       # re-armed when the retry goes out
            self.rewind(qp, p)
            return
        st.rx_naks += 1
        self.acked_through(qp, p, now)
        if syn == NAK_PSN_SEQ_ERR:
            qp.retries = 0               # the responder is alive
            qp.rto_deadline_ns = now + self.rto_for(qp)
            if p < qp.snd_nxt:
                st.nak_rewinds += 1
                self.rewind(qp, p)
            return
        self.fail(qp, _NAK_STATUS.get(syn & 0x1F, WcStatus.REM_OP_ERR), now)

    def acked_through(self, qp, una: int, now: int) -> None:
        """Everything of ``qp`` below PSN ``una`` is acknowledged."""
        if una <= qp.snd_una:
            return
        qp.snd_una = una
        qp.retries = 0
        qp.rnr_retries = 0
        sq = qp.sq
        popped = 0
        unix = 0
        while sq and sq[0].first_psn + sq[0].npkts <= una:
            w = sq.popleft()
            popped += 1
            if w.is_read:
                qp.n_reads -= 1
            if w.signaled:
                if not unix:
                    unix = self.unix_ns()
                self.cq.append(Completion(
                    w.wr_id, qp.qpn, _wc_opcode(w),
                    WcStatus.SUCCESS, w.length, w.post_ns, now, w.post_unix_ns, unix,
                    remote_addr=w.remote_addr if w.is_write or w.is_read else None,
                    rkey=w.rkey if w.is_write or w.is_read else None,
                    data=w.buf if w.is_read else None))
                self.stats.completions += 1
        qp.cur_idx = max(0, qp.cur_idx - popped)
        if qp.snd_nxt < una:
            self.rewind(qp, una)
        qp.rto_deadline_ns = now + self.rto_for(qp) if qp.snd_una < qp.snd_max else 0

    def rewind(self, qp, psn: int) -> None:
        """Continue sending ``qp`` at ``psn`` (unwrapped)."""
        qp.snd_nxt = psn
        idx = 0
        for w in qp.sq:
            if psn < w.first_psn + w.npkts:
                break
            idx += 1
        qp.cur_idx = idx

    def fail(self, qp, status: WcStatus, now: int) -> None:
        """Fail the oldest WQE with ``status`` and flush the rest."""
        qp.state = QpState.ERROR
        qp.rto_deadline_ns = 0
        unix = self.unix_ns()
        first = True
        while qp.sq:
            w = qp.sq.popleft()
            self.cq.append(Completion(
                w.wr_id, qp.qpn, _wc_opcode(w),
                status if first else WcStatus.WR_FLUSH_ERR, 0, w.post_ns, now,
                w.post_unix_ns, unix))
            self.stats.completions += 1
            first = False
        qp.cur_idx = 0
        qp.n_reads = 0
        qp.snd_nxt = qp.snd_una = qp.snd_max = qp.next_psn

    # -- timers ----------------------------------------------------------------------
    def timers(self, now: int, data_resume_ns: float) -> None:
        """ACK timeouts due at ``now``; PFC holds the data class until
        ``data_resume_ns``."""
        for qp in self.qps:
            dl = qp.rto_deadline_ns
            if not dl or now < dl:
                continue
            if qp.snd_una >= qp.snd_max:
                qp.rto_deadline_ns = 0
                continue
            if now < data_resume_ns:
                # PFC holds our data priority: no ACK is owed for what we
                # cannot send; look again a full RTO after the pause
                qp.rto_deadline_ns = int(data_resume_ns) + self.rto_for(qp)
                continue
            self.stats.timeouts += 1
            qp.retries += 1
            if qp.retries > self.retry_cnt:
                self.fail(qp, WcStatus.RETRY_EXC_ERR, now)
                continue
            self.rewind(qp, qp.snd_una)
            qp.rto_deadline_ns = now + (self.rto_for(qp) << min(qp.retries, 3))

    def next_timer_ns(self, limit: float) -> float:
        """The earliest ACK timeout, at most ``limit``."""
        for qp in self.qps:
            dl = qp.rto_deadline_ns
            if dl and dl < limit:
                limit = dl
        return limit

    def idle(self) -> bool:
        return all(qp.snd_una >= qp.next_psn or qp.state != QpState.RTS for qp in self.qps)
