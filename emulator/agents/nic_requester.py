"""RC requester reliability of ``RoceNic`` (``RequesterMixin``): handling
received ACK/NAKs (completing acknowledged WQEs, go-back-N rewinds, RNR
back-off, remote errors), ACK timeouts with PFC-aware re-arming, DCQCN
rate updates, and failing a QP. See ``nic`` for the behaviour."""
from __future__ import annotations

import time

from .qp import RNR_TIMER_US, Completion, QpState, QueuePair, WcOpcode, WcStatus
from .roce import (
    AETH_ACK, AETH_RNR_NAK, AETH_TYPE_MASK, NAK_INVALID_REQUEST, NAK_PSN_SEQ_ERR,
    NAK_REMOTE_ACCESS_ERR, NAK_REMOTE_OP_ERR, PSN_HALF, PSN_MASK, WIRE_OVERHEAD_BYTES,
)


def _wc_opcode(w) -> WcOpcode:
    return (WcOpcode.RDMA_WRITE if w.is_write else WcOpcode.RDMA_READ if w.is_read
            else WcOpcode.SEND)


class RequesterMixin:
    """``RoceNic``'s requester side: ACK/NAK processing and timers."""

    def _rto_for(self, qp: QueuePair) -> int:
        """The ACK timeout of ``qp``: ``rto_ns``, or longer for a QP paced
        below the link rate -- at least 8 x ``ack_every_n`` full frames at
        its current rate (the rule of the default ``rto_ns``), so that a
        DCQCN-throttled QP does not time out between two AckReqs."""
        r = qp.rate_bps
        if r is None or r >= self.rate_bps:
            return self.rto_ns
        return max(self.rto_ns, int(self._rto_frames_bits * 1e9 / r))

    def _on_rate_change(self, qp: QueuePair, t_ns: int, event: str) -> None:
        """DCQCN moved ``qp``'s current rate: hand it to the pacer (the next
        frame's slot is re-timed from the last one at the new rate) and log."""
        cc = qp.cc
        rate = cc.rate_bps
        qp.rate_bps = None if rate >= self.rate_bps else rate
        if qp.rto_deadline_ns and event == "cnp":
            dl = t_ns + self._rto_for(qp)
            if dl > qp.rto_deadline_ns:
                qp.rto_deadline_ns = dl
        if qp.last_tx_slot is not None:
            qp.next_ok_ns = qp.last_tx_slot + \
                (qp.last_tx_flen + WIRE_OVERHEAD_BYTES) * 8e9 / (qp.rate_bps or self.rate_bps)
        self.stats.rate_changes += 1
        if self.logs is not None:
            self.logs.qp(t_ns, qp.qpn, rate, cc.alpha_at(t_ns), event)

    # -- requester side of ACK/NAK ---------------------------------------------
    def _rx_ack(self, qp: QueuePair, pkt, now: int) -> None:
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
                p = min(p, self._read_limit(qp) - 1)
            self._acked_through(qp, p + 1, now)
            return
        # NAKs: PSN is the one the responder expects
        if d >= PSN_HALF:
            return
        p = qp.snd_una + d
        if p > qp.snd_max:
            return
        if qp.n_reads:
            p = min(p, self._read_limit(qp))
        if t == AETH_RNR_NAK:
            st.rx_rnr_naks += 1
            self._acked_through(qp, p, now)
            qp.rnr_retries += 1
            if self.rnr_retry is not None and qp.rnr_retries > self.rnr_retry:
                self._qp_error(qp, WcStatus.RNR_RETRY_EXC_ERR, now)
                return
            qp.paused_until_ns = now + RNR_TIMER_US[syn & 0x1F] * 1000
            qp.retries = 0
            qp.rto_deadline_ns = 0       # re-armed when the retry goes out
            self._rewind(qp, p)
            return
        st.rx_naks += 1
        code = syn & 0x1F
        self._acked_through(qp, p, now)
        if syn == NAK_PSN_SEQ_ERR:
            qp.retries = 0               # the responder is alive
            qp.rto_deadline_ns = now + self._rto_for(qp)
            if p < qp.snd_nxt:
                st.nak_rewinds += 1
                self._rewind(qp, p)
            return
        status = {NAK_INVALID_REQUEST & 0x1F: WcStatus.REM_INV_REQ_ERR,
                  NAK_REMOTE_ACCESS_ERR & 0x1F: WcStatus.REM_ACCESS_ERR,
                  NAK_REMOTE_OP_ERR & 0x1F: WcStatus.REM_OP_ERR}.get(code, WcStatus.REM_OP_ERR)
        self._qp_error(qp, status, now)

    def _acked_through(self, qp: QueuePair, una: int, now: int) -> None:
        """Everything below ``una`` is acknowledged."""
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
                    unix = time.time_ns()
                self._cq.append(Completion(
                    w.wr_id, qp.qpn, _wc_opcode(w),
                    WcStatus.SUCCESS, w.length, w.post_ns, now, w.post_unix_ns, unix,
                    remote_addr=w.remote_addr if w.is_write or w.is_read else None,
                    rkey=w.rkey if w.is_write or w.is_read else None,
                    data=w.buf if w.is_read else None))
                self.stats.completions += 1
        qp.cur_idx = max(0, qp.cur_idx - popped)
        if qp.snd_nxt < una:
            self._rewind(qp, una)
        qp.rto_deadline_ns = now + self._rto_for(qp) if qp.snd_una < qp.snd_max else 0

    def _rewind(self, qp: QueuePair, psn: int) -> None:
        """Continue sending at ``psn`` (unwrapped)."""
        qp.snd_nxt = psn
        idx = 0
        for w in qp.sq:
            if psn < w.first_psn + w.npkts:
                break
            idx += 1
        qp.cur_idx = idx

    def _qp_error(self, qp: QueuePair, status: WcStatus, now: int) -> None:
        """Fail the oldest WQE with ``status`` and flush the rest."""
        qp.state = QpState.ERROR
        qp.rto_deadline_ns = 0
        unix = time.time_ns()
        first = True
        while qp.sq:
            w = qp.sq.popleft()
            self._cq.append(Completion(
                w.wr_id, qp.qpn, _wc_opcode(w),
                status if first else WcStatus.WR_FLUSH_ERR, 0, w.post_ns, now,
                w.post_unix_ns, unix))
            self.stats.completions += 1
            first = False
        qp.cur_idx = 0
        qp.n_reads = 0
        qp.snd_nxt = qp.snd_una = qp.snd_max = qp.next_psn

    # -- timers -----------------------------------------------------------------
    def _timers(self, now: int) -> None:
        if self._cpu_rxq:                    # received packets whose CPU work is done
            self._cpu_rx_release(now)
        data_resume = self._pause_until[self.priority]
        for qp in self._qp_list:
            cc = qp.cc
            if cc is not None and cc.active and cc.next_rate_ns <= now:
                cc.advance(now)
            dl = qp.rto_deadline_ns
            if dl and now >= dl:
                if qp.snd_una >= qp.snd_max:
                    qp.rto_deadline_ns = 0
                    continue
                if now < data_resume:
                    # PFC holds our data priority: no ACK is owed for what we
                    # cannot send; look again a full RTO after the pause
                    qp.rto_deadline_ns = int(data_resume) + self._rto_for(qp)
                    continue
                self.stats.timeouts += 1
                qp.retries += 1
                if qp.retries > self.retry_cnt:
                    self._qp_error(qp, WcStatus.RETRY_EXC_ERR, now)
                    continue
                self._rewind(qp, qp.snd_una)
                qp.rto_deadline_ns = now + (self._rto_for(qp) << min(qp.retries, 3))
