"""RC requester of the NIC (IBA 9.7, go-back-N as ConnectX/rxe do it):
work requests in, data frames out on demand, ACK/NAKs in, completions out.

The model in full: docs/nic.md, "requester".
"""
from __future__ import annotations

from typing import Callable

from emulator.clock import NEVER_NS
from emulator.wire import RETH_BYTES, ROCE_FRAMING, Framing

from .frames import DataFrame, ReadRequestFrame
from .qp import _OPS_SEND, _OPS_WRITE, RNR_TIMER_US, Completion, QpState, WcOpcode, WcStatus, \
    _SendWqe
from .read import read_limit
from .roce import (
    AETH_ACK, AETH_RNR_NAK, AETH_TYPE_MASK, NAK_INVALID_REQUEST, NAK_PSN_SEQ_ERR,
    NAK_REMOTE_ACCESS_ERR, NAK_REMOTE_OP_ERR, PSN_HALF, PSN_MASK,
)

_new_frame = tuple.__new__
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
                 cq, stats, unix_ns: Callable[[], int], dilation: float = 1.0,
                 hold=None, framing: Framing = ROCE_FRAMING):
        """``rto_ns``: the ACK timeout on the clock (fabric ns x ``dilation``).
        ``hold``: how the link layer holds our requests back (``held_ns(now)``:
        time held so far; ``resume_ns()``: when the hold in force ends), a
        ``pfc.PriorityHold`` or ``ib.nic.CreditHold``; None: never held. Time
        held does not count against an ACK timeout."""
        self.link_rate_bps = link_rate_bps
        self.mtu_bytes = mtu_bytes
        self.ack_every_n = ack_every_n
        self.rto_ns = rto_ns
        self.dilation = dilation
        self.hold = hold
        self.retry_cnt = retry_cnt
        self.rnr_retry = rnr_retry
        self.max_outstanding_pkts = max_outstanding_pkts
        # the default-RTO rule for a QP paced below the link rate: 8 x
        # ack_every_n full frames at its current rate (see rto_for)
        self.framing = framing
        self._rto_frames_bits = 8 * ack_every_n * (framing.frame_bytes(RETH_BYTES, mtu_bytes)
                                                   + framing.wire_overhead_bytes) * 8
        self.cq = cq
        self.stats = stats
        self.unix_ns = unix_ns
        self.qps: list = []
        # The QPs the loops of every pass look at (timers, the transmitter's
        # pacer): data posted and not all acknowledged, or an ACK timer armed.
        # A QP joins at its post and leaves when ``timers`` finds it idle:
        # websearch's NICs have ~40 QPs each, most idle, walked 4 times a pass.
        self.busy: list = []
        # ``timers`` has nothing to do before this: the earliest armed ACK
        # timeout, exactly (0: a QP may have gone idle or a timer moved --
        # ACK progress, a failure --, so the next pass walks ``busy`` again)
        self.next_pass_ns = 0

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
        if not qp.busy:
            qp.busy = True
            self.busy.append(qp)
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
            qp.retransmits += 1
        if w.is_read:                    # one READ request asks for all its remaining PSNs
            frame = ReadRequestFrame(qp, w, k, psn)
            flen = self.framing.read_request_frame_bytes
            qp.snd_nxt = psn = psn + w.npkts - k
            qp.cur_idx += 1
        else:
            mtu = self.mtu_bytes
            plen = w.length - k * mtu
            if plen > mtu:
                plen = mtu
            frame = _new_frame(DataFrame, (      # DataFrame(...) without its Python-level __new__
                qp, w, k, psn, k + 1 >= w.npkts or (psn + 1) % self.ack_every_n == 0))
            flen = self.framing.frame_bytes(RETH_BYTES if (w.is_write and k == 0) else 0, plen)
            qp.snd_nxt = psn = psn + 1
            if k + 1 >= w.npkts:
                qp.cur_idx += 1
        if psn > qp.snd_max:
            qp.snd_max = psn
        return frame, flen

    def sent(self, qp, now: int, psn_end: int, asks_response: bool) -> None:
        """A request of ``qp`` for PSNs below ``psn_end`` left the wire at
        ``now``. If it asks for a response (AckReq, a READ) -- or fills the
        window --, one is owed for PSNs below ``psn_end``: the ACK timeout
        runs (doubled per timeout in a row), unless it already does."""
        if not asks_response and psn_end - qp.snd_una < self.max_outstanding_pkts:
            return
        if psn_end > qp.ackreq_max:
            qp.ackreq_max = psn_end
        if not qp.rto_deadline_ns:
            self._arm(qp, now, self.rto_for(qp) << min(qp.retries, 3))

    def _rearm(self, qp, now: int) -> None:
        """ACK progress at ``now``: a full timeout for the responses still
        owed, or none if none is."""
        if qp.snd_una < qp.ackreq_max:
            self._arm(qp, now, self.rto_for(qp))
        else:
            qp.rto_deadline_ns = 0

    def _arm(self, qp, now: int, timeout_ns: int) -> None:
        """``qp``'s ACK timeout expires ``timeout_ns`` from ``now``, plus
        whatever time PFC holds our data class from now on."""
        qp.rto_deadline_ns = dl = now + timeout_ns
        if dl < self.next_pass_ns:
            self.next_pass_ns = dl
        hold = self.hold
        qp.rto_held_ns = hold.held_ns(now) if hold is not None else 0.0

    def rto_for(self, qp) -> int:
        """The ACK timeout of ``qp``: ``rto_ns``, or longer for a QP paced
        below the link rate -- at least 8 x ``ack_every_n`` full frames at
        its current rate, so that a DCQCN-throttled QP does not time out
        between two AckReqs. (The rates are the clock's, fabric rate / D, so
        this is fabric time x D like ``rto_ns``: 8 x 16 x 1102-byte frames
        are 11 us of fabric time at 100 Gbit/s, 11 ms at DCQCN's 0.1 Gbit/s
        floor.)"""
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
                self._arm(qp, t_ns, dl - t_ns)

    # -- ACK/NAK -----------------------------------------------------------------------
    def on_ack(self, qp, pkt, now: int) -> None:
        self.next_pass_ns = 0
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
        qp.naks += 1
        if t == AETH_RNR_NAK:
            st.rx_rnr_naks += 1
            self.acked_through(qp, p, now)
            qp.rnr_retries += 1
            if self.rnr_retry is not None and qp.rnr_retries > self.rnr_retry:
                self.fail(qp, WcStatus.RNR_RETRY_EXC_ERR, now)
                return
            # the code's time is fabric time: x dilation on our clock
            qp.paused_until_ns = now + int(RNR_TIMER_US[syn & 0x1F] * 1000 * self.dilation)
            qp.retries = 0
            qp.rto_deadline_ns = 0       # re-armed when the retry goes out
            self.rewind(qp, p)
            return
        st.rx_naks += 1
        self.acked_through(qp, p, now)
        if syn == NAK_PSN_SEQ_ERR:
            qp.retries = 0               # the responder is alive
            if p < qp.snd_nxt:
                st.nak_rewinds += 1
                self.rewind(qp, p)
            self._rearm(qp, now)         # what it discarded is owed again once resent
            return
        self.fail(qp, _NAK_STATUS.get(syn & 0x1F, WcStatus.REM_OP_ERR), now)

    def acked_through(self, qp, una: int, now: int) -> None:
        """Everything of ``qp`` below PSN ``una`` is acknowledged."""
        self.next_pass_ns = 0
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
        self._rearm(qp, now)

    def rewind(self, qp, psn: int) -> None:
        """Continue sending ``qp`` at ``psn`` (unwrapped). Going back, the
        responses owed for PSNs from ``psn`` on are void (the responder drops
        what follows a gap) until they are sent again."""
        if psn < qp.snd_nxt and psn < qp.ackreq_max:
            qp.ackreq_max = psn
        qp.snd_nxt = psn
        idx = 0
        for w in qp.sq:
            if psn < w.first_psn + w.npkts:
                break
            idx += 1
        qp.cur_idx = idx

    def fail(self, qp, status: WcStatus, now: int) -> None:
        """Move ``qp`` to the error state: its oldest WQE completes with
        ``status``, every other one with WR_FLUSH_ERR, and nothing is sent on
        it again -- the requester's error behaviour in the IBA (vol. 1,
        ch. 9: the transport timer and its retry counter, the RNR retry
        counter; ch. 11: the completion statuses "Transport Retry Counter
        Exceeded", "RNR Retry Counter Exceeded", "Work Request Flushed").
        Counted per cause, as mlx5's ``req_transport_retries_exceeded`` and
        ``req_rnr_retries_exceeded`` do."""
        if qp.state == QpState.ERROR:
            return
        st = self.stats
        st.qp_errors += 1
        if status == WcStatus.RETRY_EXC_ERR:
            st.retry_exc_errors += 1
        elif status == WcStatus.RNR_RETRY_EXC_ERR:
            st.rnr_retry_exc_errors += 1
        st.wr_flush_errors += max(0, len(qp.sq) - 1)
        self.next_pass_ns = 0
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
        qp.snd_nxt = qp.snd_una = qp.snd_max = qp.ackreq_max = qp.next_psn

    # -- timers ----------------------------------------------------------------------
    def timers(self, now: int) -> None:
        """ACK timeouts due at ``now``. Time the link layer held our data
        class since a timeout was armed does not count: its deadline moves
        out by that much (while the class is still held, it is looked at
        again when the hold ends, or every eighth of a timeout if an XON --
        or a credit -- may end it sooner). The packets we sent before a pause wait in the queues that
        made the switch pause us, so their ACKs are late by about as much."""
        if now < self.next_pass_ns:
            return
        self.next_pass_ns = NEVER_NS  # (a failure in this pass sets it back to 0)
        hold = self.hold
        idle = 0
        first = NEVER_NS                 # the earliest timeout still armed after this pass
        for qp in self.busy:
            dl = qp.rto_deadline_ns
            if not dl:
                if qp.snd_una >= qp.next_psn:
                    idle += 1
                continue
            if now < dl:
                if dl < first:
                    first = dl
                continue
            if qp.snd_una >= qp.ackreq_max:
                qp.rto_deadline_ns = 0
                first = 0                # it may be idle now: the next pass looks
                continue
            if hold is not None:
                held = hold.held_ns(now)
                credit = held - qp.rto_held_ns
                resume = hold.resume_ns()
                if credit > 0 or now < resume:
                    qp.rto_held_ns = held
                    dl += int(credit)
                    if now < resume:         # held now: no ACK is owed for what waits
                        dl = max(dl, min(int(resume) + 1, now + (self.rto_for(qp) >> 3)))
                    if dl > now:
                        qp.rto_deadline_ns = dl
                        if dl < first:
                            first = dl
                        continue
            self.stats.timeouts += 1
            qp.timeouts += 1
            qp.retries += 1
            if qp.retries > self.retry_cnt:
                self.fail(qp, WcStatus.RETRY_EXC_ERR, now)
                continue
            self.rewind(qp, qp.snd_una)
            qp.ackreq_max = qp.snd_una   # all void: owed again (and timed, backed off) once resent
            qp.rto_deadline_ns = 0
            first = 0
        if idle:
            self._drop_idle()
        if first < self.next_pass_ns:
            self.next_pass_ns = first

    def _drop_idle(self) -> None:
        """Take the QPs with nothing posted unacknowledged and no timer out of
        ``busy``, in place (the transmitter holds the list)."""
        keep = []
        for qp in self.busy:
            if qp.rto_deadline_ns or qp.snd_una < qp.next_psn:
                keep.append(qp)
            else:
                qp.busy = False
        self.busy[:] = keep

    def next_timer_ns(self, limit: float) -> float:
        """The earliest ACK timeout, at most ``limit``."""
        first = self.next_pass_ns
        if first:                        # exact since the last pass
            return first if first < limit else limit
        for qp in self.busy:
            dl = qp.rto_deadline_ns
            if dl and dl < limit:
                limit = dl
        return limit

    def idle(self) -> bool:
        return all(qp.snd_una >= qp.next_psn or qp.state != QpState.RTS for qp in self.busy)
