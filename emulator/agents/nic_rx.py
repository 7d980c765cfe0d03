"""Receive path and RC responder of ``RoceNic`` (``ReceivePathMixin``):
draining the sockets, dispatching frames by destination QP (ACK/NAKs to the
requester, PFC to the pacer, CNPs to DCQCN), the ECN notification point,
and the responder -- PSN checking, placement of WRITE/SEND payload,
coalesced ACKs, NAKs and responder completions. Its state lives on the
``RoceNic`` and ``QueuePair`` objects (see ``nic`` for the behaviour)."""
from __future__ import annotations

import time

from . import roce
from .nic_read import READ_OPS
from .qp import Completion, QpState, QueuePair, WcOpcode, WcStatus
from .roce import (
    AETH_ACK_SYNDROME, AETH_RNR_NAK, AETH_TYPE_MASK, CNP_OPCODE, ECN_CE, NAK_INVALID_REQUEST,
    NAK_PSN_SEQ_ERR, NAK_REMOTE_ACCESS_ERR, PSN_HALF, PSN_MASK, RC_ACK, parse_roce, verify_icrc,
)

# responder view of request opcodes: opcode -> (kind, is_first, is_last); kind 0=WRITE 1=SEND
_REQ = {
    roce.RC_WRITE_FIRST: (0, True, False), roce.RC_WRITE_MIDDLE: (0, False, False),
    roce.RC_WRITE_LAST: (0, False, True), roce.RC_WRITE_ONLY: (0, True, True),
    roce.RC_SEND_FIRST: (1, True, False), roce.RC_SEND_MIDDLE: (1, False, False),
    roce.RC_SEND_LAST: (1, False, True), roce.RC_SEND_ONLY: (1, True, True),
}


class ReceivePathMixin:
    """``RoceNic``'s receive loop and responder."""

    # -- receive -------------------------------------------------------------
    def _rx_drain(self, now: int) -> None:
        n_batch = 0
        for sock in self._rx_socks:
            n_batch += self._rx_drain_sock(sock, now)
        st = self.stats
        if n_batch:
            self.last_rx_ns = now
            if n_batch > st.rx_batches_max:
                st.rx_batches_max = n_batch
        if self._ack_list:
            for qp in self._ack_list:
                if qp.ack_pending:
                    qp.ack_pending = False
                    self._ctrl.append((qp, (qp.epsn - 1) & PSN_MASK, AETH_ACK_SYNDROME, qp.msn))
            self._ack_list.clear()

    def _rx_drain_sock(self, sock, now: int) -> int:
        buf, mv, st = self._rxbuf, self._rxmv, self.stats
        my_ip, qps, check = self.ip_int, self._qps, self.verify_icrc
        hook = self._rx_hook                 # tenant filter / CPU work (host_cpu); None: off
        n_batch = 0
        for _ in range(self.RX_BATCH):
            try:
                n = sock.recv_into(buf)
            except (BlockingIOError, InterruptedError):
                break
            n_batch += 1
            frame = mv[:n]
            if buf[12] == 0x88 and buf[13] == 0x08 and n >= 34:
                self._rx_mac_control(frame)
                continue
            pkt = parse_roce(frame)
            if pkt is None or pkt.dst_ip != my_ip:
                st.rx_ignored += 1
                continue
            if check and not verify_icrc(frame):
                st.rx_icrc_errors += 1
                continue
            if hook is not None and hook(frame, pkt, now):
                continue                     # dropped, or held until the CPU delivers it
            qp = qps.get(pkt.dst_qp)
            if qp is None or pkt.src_ip != qp.remote_ip_int:
                st.rx_ignored += 1
                continue
            st.rx_packets += 1
            st.rx_bytes += n
            op = pkt.opcode
            if op == RC_ACK:
                self._rx_ack(qp, pkt, now)
            elif op in _REQ:
                if pkt.ecn == ECN_CE:
                    st.ecn_ce_rx += 1
                    self._rx_ce(qp, now)
                    if self.on_ecn_ce is not None:
                        self.on_ecn_ce(qp, pkt)
                self._rx_request(qp, pkt, now)
            elif op == CNP_OPCODE:
                st.cnp_rx += 1
                self._rx_cnp(qp, pkt, now)
            elif op in READ_OPS:
                self._rx_read(qp, pkt, now)
            else:
                st.rx_bad_requests += 1
        return n_batch

    def _rx_ce(self, qp: QueuePair, now: int) -> None:
        """Notification point: a CE-marked request for ``qp`` owes its sender a
        CNP, at most one per ``cnp_interval_ns``."""
        if self.cnp_interval_ns is None or now < qp.next_cnp_ok_ns:
            return
        qp.next_cnp_ok_ns = now + self.cnp_interval_ns
        self._cnpq.append(qp)

    def _rx_cnp(self, qp: QueuePair, pkt, now: int) -> None:
        """Congestion Notification Packet: DCQCN's reaction point."""
        if self.logs is not None:
            self.logs.cnp(now, qp.qpn, qp.remote_qpn, "rx")
        if qp.cc is not None:
            qp.cc.on_cnp(now)
        if self.on_cnp is not None:
            self.on_cnp(qp, pkt)

    def _queue_ack(self, qp: QueuePair) -> None:
        if not qp.ack_pending:
            qp.ack_pending = True
            self._ack_list.append(qp)

    def _nak(self, qp: QueuePair, syndrome: int) -> None:
        """Send a NAK for the expected PSN now (ahead of coalesced ACKs)."""
        self._ctrl.append((qp, qp.epsn & PSN_MASK, syndrome, qp.msn))
        st = self.stats
        if syndrome & AETH_TYPE_MASK == AETH_RNR_NAK:
            st.tx_rnr_naks += 1
        else:
            st.tx_naks += 1

    def _rx_request(self, qp: QueuePair, pkt, now: int) -> None:
        st = self.stats
        st.rx_data_packets += 1
        d = (pkt.psn - qp.epsn) & PSN_MASK
        if d:
            if d < PSN_HALF:          # ahead of expected: a gap
                st.rx_out_of_order += 1
                if not qp.nak_sent:
                    qp.nak_sent = True
                    self._nak(qp, NAK_PSN_SEQ_ERR)
            else:                     # behind: duplicate
                st.rx_duplicates += 1
                if pkt.ack_req or not qp.dup_acked:
                    qp.dup_acked = True
                    self._queue_ack(qp)
            return
        if qp.state != QpState.RTS:
            return
        kind, first, last = _REQ[pkt.opcode]
        payload = pkt.payload
        plen = len(payload)
        if first:
            if qp.rx_kind != -1:
                return self._bad_request(qp, NAK_INVALID_REQUEST)
            if kind == 0:
                mr = self._mrs.get(pkt.reth_rkey)
                va, dlen = pkt.reth_va, pkt.reth_len
                if mr is None or va < mr.addr or va + dlen > mr.addr + mr.size_bytes:
                    return self._bad_request(qp, NAK_REMOTE_ACCESS_ERR)
                qp.rx_mv = mr.mv
                qp.rx_pos = va - mr.addr
                qp.rx_end = qp.rx_pos + dlen
                qp.rx_va, qp.rx_rkey, qp.rx_len = va, mr.rkey, dlen
            else:
                if not qp.rq:
                    qp.nak_sent = True    # drop the rest of this message until resent
                    self._nak(qp, AETH_RNR_NAK | self.min_rnr_timer)
                    return
                r = qp.rq.popleft()
                qp.rx_recv = r
                qp.rx_mv = r.buf
                qp.rx_pos = 0
                qp.rx_end = r.size
            qp.rx_kind = kind
            qp.rx_first_ns = now
            qp.rx_first_unix_ns = time.time_ns()
        elif qp.rx_kind != kind:
            return self._bad_request(qp, NAK_INVALID_REQUEST)
        pos = qp.rx_pos
        end = pos + plen
        if (end > qp.rx_end or (not last and plen != self.mtu_bytes)
                or (last and kind == 0 and end != qp.rx_end)):
            return self._bad_request(qp, NAK_INVALID_REQUEST)
        if plen:
            qp.rx_mv[pos:end] = payload
        qp.rx_pos = end
        st.rx_data_payload_bytes += plen
        qp.epsn += 1
        qp.nak_sent = False
        qp.dup_acked = False
        if last:
            qp.msn = (qp.msn + 1) & PSN_MASK
            qp.rx_kind = -1
            if kind == 1:
                r = qp.rx_recv
                qp.rx_recv = None
                self._cq.append(Completion(
                    r.wr_id, qp.qpn, WcOpcode.RECV, WcStatus.SUCCESS, qp.rx_pos,
                    r.post_ns, now, r.post_unix_ns, time.time_ns(),
                    data=r.buf[:qp.rx_pos], first_rx_ns=qp.rx_first_ns,
                    first_rx_unix_ns=qp.rx_first_unix_ns))
                st.completions += 1
            elif self.report_remote_writes:
                self._cq.append(Completion(
                    0, qp.qpn, WcOpcode.RECV_RDMA_WRITE, WcStatus.SUCCESS, qp.rx_len,
                    qp.rx_first_ns, now, qp.rx_first_unix_ns, time.time_ns(),
                    remote_addr=qp.rx_va, rkey=qp.rx_rkey, first_rx_ns=qp.rx_first_ns,
                    first_rx_unix_ns=qp.rx_first_unix_ns))
                st.completions += 1
            qp.rx_mv = None
        if pkt.ack_req:
            self._queue_ack(qp)

    def _bad_request(self, qp: QueuePair, syndrome: int) -> None:
        """A request we cannot execute: NAK it and drop it (the requester
        fails the WQE). The responder forgets the partial message."""
        self.stats.rx_bad_requests += 1
        qp.rx_kind = -1
        qp.rx_mv = None
        if qp.rx_recv is not None:
            qp.rq.appendleft(qp.rx_recv)
            qp.rx_recv = None
        if not qp.nak_sent:
            qp.nak_sent = True
            self._nak(qp, syndrome)
