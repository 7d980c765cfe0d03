"""RC responder of the NIC (IBA 9.7.5): request packets in, placement into
registered memory or posted receives, ACK/NAK frames and responder
completions out.

Accepts only the expected PSN. In-order WRITE payload is placed in the
memory region named by the RETH rkey at RETH address + offset; SEND payload
in the oldest posted receive. When AckReq is set it ACKs -- coalesced: at
most one ACK per QP per receive batch (``flush_acks`` at the end of the
batch) -- with the last in-order PSN and the MSN. The first packet past a
gap triggers one NAK (PSN sequence error) carrying the expected PSN; later
out-of-order packets are dropped silently until the expected one comes.
Duplicates are dropped and re-ACKed (the first one after progress, and any
with AckReq). Bad rkey/bounds -> NAK remote access error; SEND with no
receive posted -> RNR NAK.

ACK/NAKs wait in ``out`` (``AckFrame``s) for the transmitter; NAKs go
there at once, ahead of the batch's coalesced ACKs. As an emulator
extension a completed incoming WRITE yields a ``RECV_RDMA_WRITE``
completion (``report_remote_writes``).
"""
from __future__ import annotations

from collections import deque
from typing import Callable

from . import roce
from .frames import AckFrame
from .qp import Completion, QpState, WcOpcode, WcStatus
from .roce import (
    AETH_ACK_SYNDROME, AETH_RNR_NAK, AETH_TYPE_MASK, NAK_INVALID_REQUEST, NAK_PSN_SEQ_ERR,
    NAK_REMOTE_ACCESS_ERR, PSN_HALF, PSN_MASK,
)

_new_frame = tuple.__new__
# responder view of request opcodes: opcode -> (kind, is_first, is_last); kind 0=WRITE 1=SEND
REQUEST_OPS = {
    roce.RC_WRITE_FIRST: (0, True, False), roce.RC_WRITE_MIDDLE: (0, False, False),
    roce.RC_WRITE_LAST: (0, False, True), roce.RC_WRITE_ONLY: (0, True, True),
    roce.RC_SEND_FIRST: (1, True, False), roce.RC_SEND_MIDDLE: (1, False, False),
    roce.RC_SEND_LAST: (1, False, True), roce.RC_SEND_ONLY: (1, True, True),
}


class Responder:
    """Responder side of every QP of one NIC."""

    def __init__(self, *, mrs: dict, mtu_bytes: int, min_rnr_timer: int,
                 report_remote_writes: bool, cq, stats, unix_ns: Callable[[], int]):
        self.mrs = mrs                   # rkey -> MemoryRegion (the NIC's registry)
        self.mtu_bytes = mtu_bytes
        self.min_rnr_timer = min_rnr_timer & 0x1F
        self.report_remote_writes = report_remote_writes
        self.cq = cq
        self.stats = stats
        self.unix_ns = unix_ns
        self.out: deque[AckFrame] = deque()
        self._ack_list: list = []        # QPs owed a coalesced ACK this batch

    # -- ACK/NAK -----------------------------------------------------------------------
    def _queue_ack(self, qp) -> None:
        if not qp.ack_pending:
            qp.ack_pending = True
            self._ack_list.append(qp)

    def flush_acks(self) -> None:
        """End of a receive batch: one ACK per QP that owes one."""
        if self._ack_list:
            out = self.out
            for qp in self._ack_list:
                if qp.ack_pending:
                    qp.ack_pending = False
                    # AckFrame(...) without its Python-level __new__
                    out.append(_new_frame(AckFrame, (qp, (qp.epsn - 1) & PSN_MASK,
                                                     AETH_ACK_SYNDROME, qp.msn)))
            self._ack_list.clear()

    def nak(self, qp, syndrome: int) -> None:
        """Send a NAK for the expected PSN now (ahead of coalesced ACKs)."""
        self.out.append(AckFrame(qp, qp.epsn & PSN_MASK, syndrome, qp.msn))
        if syndrome & AETH_TYPE_MASK == AETH_RNR_NAK:
            self.stats.tx_rnr_naks += 1
        else:
            self.stats.tx_naks += 1

    def nak_once(self, qp, syndrome: int) -> None:
        """NAK unless this QP already NAKed since its last progress."""
        if not qp.nak_sent:
            qp.nak_sent = True
            self.nak(qp, syndrome)

    def bad_request(self, qp, syndrome: int) -> None:
        """A request we cannot execute: NAK it and drop it (the requester
        fails the WQE). The responder forgets the partial message."""
        self.stats.rx_bad_requests += 1
        qp.rx_kind = -1
        qp.rx_mv = None
        if qp.rx_recv is not None:
            qp.rq.appendleft(qp.rx_recv)
            qp.rx_recv = None
        self.nak_once(qp, syndrome)

    # -- requests ----------------------------------------------------------------------
    def on_request(self, qp, pkt, now: int) -> None:
        """A SEND/WRITE packet for ``qp`` (its opcode in ``REQUEST_OPS``)."""
        st = self.stats
        st.rx_data_packets += 1
        d = (pkt.psn - qp.epsn) & PSN_MASK
        if d:
            if d < PSN_HALF:          # ahead of expected: a gap
                st.rx_out_of_order += 1
                self.nak_once(qp, NAK_PSN_SEQ_ERR)
            else:                     # behind: duplicate
                st.rx_duplicates += 1
                if pkt.ack_req or not qp.dup_acked:
                    qp.dup_acked = True
                    self._queue_ack(qp)
            return
        if qp.state != QpState.RTS:
            return
        kind, first, last = REQUEST_OPS[pkt.opcode]
        payload = pkt.payload
        plen = len(payload)
        if first:
            if qp.rx_kind != -1:
                return self.bad_request(qp, NAK_INVALID_REQUEST)
            if kind == 0:
                mr = self.mrs.get(pkt.reth_rkey)
                va, dlen = pkt.reth_va, pkt.reth_len
                if mr is None or va < mr.addr or va + dlen > mr.addr + mr.size_bytes:
                    return self.bad_request(qp, NAK_REMOTE_ACCESS_ERR)
                qp.rx_mv = mr.mv
                qp.rx_pos = va - mr.addr
                qp.rx_end = qp.rx_pos + dlen
                qp.rx_va, qp.rx_rkey, qp.rx_len = va, mr.rkey, dlen
            else:
                if not qp.rq:
                    qp.nak_sent = True    # drop the rest of this message until resent
                    self.nak(qp, AETH_RNR_NAK | self.min_rnr_timer)
                    return
                r = qp.rq.popleft()
                qp.rx_recv = r
                qp.rx_mv = r.buf
                qp.rx_pos = 0
                qp.rx_end = r.size
            qp.rx_kind = kind
            qp.rx_first_ns = now
            qp.rx_first_unix_ns = self.unix_ns()
        elif qp.rx_kind != kind:
            return self.bad_request(qp, NAK_INVALID_REQUEST)
        pos = qp.rx_pos
        end = pos + plen
        if (end > qp.rx_end or (not last and plen != self.mtu_bytes)
                or (last and kind == 0 and end != qp.rx_end)):
            return self.bad_request(qp, NAK_INVALID_REQUEST)
        if plen:
            qp.rx_mv[pos:end] = payload
        qp.rx_pos = end
        st.rx_data_payload_bytes += plen
        qp.epsn += 1
        qp.nak_sent = qp.dup_acked = False
        if last:
            qp.msn = (qp.msn + 1) & PSN_MASK
            qp.rx_kind = -1
            if kind == 1:
                r = qp.rx_recv
                qp.rx_recv = None
                self.cq.append(Completion(
                    r.wr_id, qp.qpn, WcOpcode.RECV, WcStatus.SUCCESS, qp.rx_pos,
                    r.post_ns, now, r.post_unix_ns, self.unix_ns(),
                    data=r.buf[:qp.rx_pos], first_rx_ns=qp.rx_first_ns,
                    first_rx_unix_ns=qp.rx_first_unix_ns))
                st.completions += 1
            elif self.report_remote_writes:
                self.cq.append(Completion(
                    0, qp.qpn, WcOpcode.RECV_RDMA_WRITE, WcStatus.SUCCESS, qp.rx_len,
                    qp.rx_first_ns, now, qp.rx_first_unix_ns, self.unix_ns(),
                    remote_addr=qp.rx_va, rkey=qp.rx_rkey, first_rx_ns=qp.rx_first_ns,
                    first_rx_unix_ns=qp.rx_first_unix_ns))
                st.completions += 1
            qp.rx_mv = None
        if pkt.ack_req:
            self._queue_ack(qp)
