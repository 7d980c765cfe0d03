"""RDMA READ (RC) for ``RoceNic`` (``ReadMixin``): posting READs, the
responder that answers them, and the requester that places the responses.

Wire format (IBA 9.4.3/9.4.4, opcodes in ``roce``): a READ request (0x0C)
carries a RETH (remote address, rkey, length) and no payload; the responder
answers with READ Response First/Middle/Last (0x0D/0x0E/0x0F) or Only
(0x10), ``mtu_bytes`` of data each (the last one the rest); First, Last and
Only carry an AETH (ACK syndrome, MSN), Middle none.

PSNs: a READ of n response packets consumes n PSNs. The request carries the
first one; the responder's expected PSN moves past all n, and response k
carries first + k. A response implicitly acknowledges every PSN before it
(the responder executes requests in order), so the requester's in-order
response p acknowledges through p and the READ completes (``RDMA_READ``)
when its last response lands. A plain ACK can never complete a READ: an ACK
for a later request may overtake responses still queued at the responder
(ACKs have their own priority in the pacer), so the requester acknowledges
nothing past the oldest unanswered READ response (``_read_limit``).

Go-back-N, like WRITE: a response past a gap (one was lost) rewinds the
requester once to the missing PSN -- it re-sends a READ request for the rest
of that READ (RETH address + k x mtu, length - k x mtu, PSN first + k) and
everything after it; later out-of-order responses are dropped until the
missing one comes. A lost request or a lost last response is recovered by
the ACK timeout, which rewinds to the oldest unacknowledged PSN. The
responder treats a READ request behind its expected PSN as a duplicate to
re-execute (IBA 9.9.4.2): it forgets what it still had queued for that QP
from that PSN on (the requester re-sends all of it) and answers again.

Responses are data-class frames (``priority``/``dscp``): PFC pauses them,
the QP's DCQCN rate (and ``rate_bps`` cap) paces them, a CE-marked response
makes the requester send a CNP to the responder's QP. In the pacer they go
after CNPs and ACK/NAKs and before the NIC's own requests (a response
completes someone's outstanding READ); QPs with responses are served
round-robin. A region's ``read_latency_ns`` (a storage target's service
time) delays the first response of each READ from its arrival.
"""
from __future__ import annotations

from collections import deque

from . import roce
from .qp import MemoryRegion, QpState, QueuePair
from .roce import (
    AETH_ACK_SYNDROME, ECN_CE, NAK_INVALID_REQUEST, NAK_PSN_SEQ_ERR, NAK_REMOTE_ACCESS_ERR,
    PSN_HALF, PSN_MASK, RC_READ_REQUEST, RC_READ_RESPONSE_FIRST, RC_READ_RESPONSE_LAST,
    RC_READ_RESPONSE_MIDDLE, RC_READ_RESPONSE_ONLY, WIRE_OVERHEAD_BYTES,
)

_HDR_LEN = 14 + 20 + 8 + 12
READ_REQ_FRAME_LEN = _HDR_LEN + 16 + 4          # BTH + RETH + ICRC, no payload
READ_OPS = frozenset({RC_READ_REQUEST, RC_READ_RESPONSE_FIRST, RC_READ_RESPONSE_MIDDLE,
                      RC_READ_RESPONSE_LAST, RC_READ_RESPONSE_ONLY})
KIND_READ_REQ, KIND_READ_RESP = 3, 4            # pacer frame kinds (0-2 in nic_tx)


class _ReadJob:
    """Responder: one READ to answer. ``mv`` is the requested bytes; response
    k (0 <= k < npkts) has PSN ``psn + k`` (unwrapped)."""
    __slots__ = ("mv", "length", "psn", "npkts", "k", "msn", "ready_ns")


class ReadMixin:
    """``RoceNic``'s RDMA READ: verb, responder and requester sides."""

    # -- verb ------------------------------------------------------------------
    def post_read(self, qp: QueuePair, wr_id: int, local: tuple[MemoryRegion, int, int],
                  remote_addr: int, rkey: int, *, signaled: bool = True) -> None:
        """RDMA READ ``local[2]`` bytes at ``remote_addr`` under ``rkey`` into
        ``local`` = (mr, offset, length); completes (``RDMA_READ``) when the
        last response has been placed."""
        mr, off, length = local
        if off < 0 or length < 0 or off + length > mr.size_bytes:
            raise ValueError("local range outside the memory region")
        self._post(qp, wr_id, mr.mv[off:off + length], False, remote_addr, rkey, signaled)
        w = qp.sq[-1]
        w.is_read = True
        qp.n_reads += 1

    # -- receive dispatch --------------------------------------------------------
    def _rx_read(self, qp: QueuePair, pkt, now: int) -> None:
        if pkt.ecn == ECN_CE:            # responses and requests both notify congestion
            self.stats.ecn_ce_rx += 1
            self._rx_ce(qp, now)
            if self.on_ecn_ce is not None:
                self.on_ecn_ce(qp, pkt)
        if pkt.opcode == RC_READ_REQUEST:
            self._rx_read_request(qp, pkt, now)
        else:
            self._rx_read_response(qp, pkt, now)

    # -- responder ---------------------------------------------------------------
    def _rx_read_request(self, qp: QueuePair, pkt, now: int) -> None:
        st = self.stats
        d = (pkt.psn - qp.epsn) & PSN_MASK
        if d and d < PSN_HALF:           # ahead of expected: a gap
            st.rx_out_of_order += 1
            if not qp.nak_sent:
                qp.nak_sent = True
                self._nak(qp, NAK_PSN_SEQ_ERR)
            return
        if qp.state != QpState.RTS:
            return
        mr = self._mrs.get(pkt.reth_rkey)
        va, dlen = pkt.reth_va, pkt.reth_len
        bad = mr is None or va < mr.addr or va + dlen > mr.addr + mr.size_bytes
        npkts = max(1, -(-dlen // self.mtu_bytes))
        if d:                            # duplicate: answer again from its PSN
            st.rx_duplicates += 1
            psn = qp.epsn - ((qp.epsn - pkt.psn) & PSN_MASK)
            if bad or psn + npkts > qp.epsn:
                return                   # not a re-request of something we accepted
            self._drop_read_jobs(qp, psn)
        else:
            if bad:
                return self._bad_request(qp, NAK_REMOTE_ACCESS_ERR)
            if qp.rx_kind != -1:         # inside a multi-packet WRITE/SEND
                return self._bad_request(qp, NAK_INVALID_REQUEST)
            psn = qp.epsn
            qp.epsn += npkts
            qp.msn = (qp.msn + 1) & PSN_MASK
            qp.nak_sent = False
            qp.dup_acked = False
            st.rx_read_requests += 1
        j = _ReadJob()
        base = va - mr.addr
        j.mv, j.length, j.psn, j.npkts, j.k = mr.mv[base:base + dlen], dlen, psn, npkts, 0
        j.msn, j.ready_ns = qp.msn, now + mr.read_latency_ns
        if not qp.rd_jobs:
            self._rd_qps.append(qp)
        qp.rd_jobs.append(j)

    def _drop_read_jobs(self, qp: QueuePair, psn: int) -> None:
        """Forget the queued READs of ``qp`` that reach ``psn`` or past it: the
        requester has everything before ``psn`` and re-requests the rest."""
        jobs = qp.rd_jobs
        while jobs and jobs[-1].psn + jobs[-1].npkts > psn:
            jobs.pop()
        if not jobs and qp in self._rd_qps:
            self._rd_qps.remove(qp)

    def _pick_read_resp(self, slot: float, now: int):
        """The next READ response allowed at ``slot``: (desc, frame length,
        slot) after the per-QP pacing bookkeeping, or None."""
        rdq = self._rd_qps
        mtu = self.mtu_bytes
        for _ in range(len(rdq)):
            qp = rdq[0]
            rdq.rotate(-1)
            j = qp.rd_jobs[0]
            if qp.state != QpState.RTS:
                qp.rd_jobs.clear()
                rdq.remove(qp)
                continue
            if qp.next_ok_ns > slot or j.ready_ns > now:
                continue
            k = j.k
            plen = j.length - k * mtu
            if plen > mtu:
                plen = mtu
            if self._pkt_cpu is not None:
                slot = self._cpu_tx_gate(qp, slot, now, j.ready_ns, plen)
                if slot < 0:
                    return None
            n = j.npkts
            flen = _HDR_LEN + (0 if 0 < k < n - 1 else 4) + plen + (-plen & 3) + 4
            desc = (slot + self.tx_delay_ns, KIND_READ_RESP, qp, j, k, j.psn + k)
            if j.psn + k < qp.rd_max:       # sent before: a re-executed READ
                self.stats.tx_retransmits += 1
            else:
                qp.rd_max = j.psn + k + 1
            j.k = k + 1
            if j.k >= n:
                qp.rd_jobs.popleft()
                if not qp.rd_jobs:
                    rdq.remove(qp)
            if qp.rate_bps:
                qp.next_ok_ns = max(qp.next_ok_ns, slot) + \
                    (flen + WIRE_OVERHEAD_BYTES) * 8e9 / qp.rate_bps
            qp.last_tx_slot = slot
            qp.last_tx_flen = flen
            cc = qp.cc
            if cc is not None and cc.active:
                cc.on_tx(flen, int(slot))
            return desc, flen, slot
        return None

    def _read_wake_ns(self, base: float) -> float:
        """Earliest time a queued READ response may go (pacer wake-up)."""
        t = float("inf")
        for qp in self._rd_qps:
            x = max(base, qp.next_ok_ns, qp.rd_jobs[0].ready_ns) if qp.rd_jobs else base
            if x < t:
                t = x
        return t

    def _read_frame(self, kind: int, qp: QueuePair, w, k: int, psn: int):
        """Build a READ request (kind 3, ``w`` a WQE) or response (kind 4,
        ``w`` a ``_ReadJob``) frame."""
        mtu = self.mtu_bytes
        if kind == KIND_READ_REQ:
            off = k * mtu
            return qp.tpl.build(RC_READ_REQUEST, psn,
                                reth=(w.remote_addr + off, w.rkey, w.length - off))
        n = w.npkts
        off = k * mtu
        end = min(off + mtu, w.length)
        if n == 1:
            op = RC_READ_RESPONSE_ONLY
        elif k == 0:
            op = RC_READ_RESPONSE_FIRST
        elif k == n - 1:
            op = RC_READ_RESPONSE_LAST
        else:
            return qp.tpl.build(RC_READ_RESPONSE_MIDDLE, psn, w.mv[off:end])
        return qp.tpl.build(op, psn, w.mv[off:end], aeth=(AETH_ACK_SYNDROME, w.msn))

    def _read_sent(self, kind: int, qp: QueuePair, w, k: int, now: int) -> None:
        st = self.stats
        if kind == KIND_READ_REQ:
            st.tx_read_requests += 1
            if not qp.rto_deadline_ns:
                qp.rto_deadline_ns = now + self._rto_for(qp)
        else:
            st.tx_read_responses += 1
            st.tx_data_payload_bytes += min(self.mtu_bytes, w.length - k * self.mtu_bytes)

    # -- requester ---------------------------------------------------------------
    @staticmethod
    def _oldest_read(qp: QueuePair):
        for w in qp.sq:
            if w.is_read:
                return w
        return None

    def _read_limit(self, qp: QueuePair) -> int:
        """Nothing at or past the oldest READ's next response may be
        acknowledged except by that response."""
        w = self._oldest_read(qp)
        return w.first_psn + w.rd_got if w is not None else qp.snd_max

    def _rx_read_response(self, qp: QueuePair, pkt, now: int) -> None:
        st = self.stats
        st.rx_read_responses += 1
        w = self._oldest_read(qp) if qp.state == QpState.RTS else None
        if w is None:
            st.rx_duplicates += 1
            return
        exp = w.first_psn + w.rd_got
        d = (pkt.psn - exp) & PSN_MASK
        if d:
            if d < PSN_HALF and exp + d < qp.snd_max:    # a response was lost
                st.rx_out_of_order += 1
                if qp.rd_gap_psn != exp:
                    qp.rd_gap_psn = exp
                    st.read_rewinds += 1
                    self._acked_through(qp, exp, now)
                    if exp < qp.snd_nxt:
                        self._rewind(qp, exp)
            else:
                st.rx_duplicates += 1
            return
        if exp >= qp.snd_max:
            return                       # never asked for
        k = w.rd_got
        n = w.npkts
        mtu = self.mtu_bytes
        off = k * mtu
        want = min(mtu, w.length - off)
        # a READ re-requested from response k is answered First..Last (or Only)
        # afresh, so First/Middle and Last/Only are both fine at their place
        op = pkt.opcode
        if k == n - 1:
            op_ok = op == RC_READ_RESPONSE_LAST or op == RC_READ_RESPONSE_ONLY
        else:
            op_ok = op == RC_READ_RESPONSE_FIRST or op == RC_READ_RESPONSE_MIDDLE
        payload = pkt.payload
        if not op_ok or len(payload) != want:
            st.rx_bad_requests += 1
            return
        if want:
            w.buf[off:off + want] = payload
        st.rx_data_payload_bytes += want
        w.rd_got = k + 1
        qp.rd_gap_psn = -1
        self._acked_through(qp, exp + 1, now)


__all__ = ["ReadMixin", "READ_OPS", "READ_REQ_FRAME_LEN", "KIND_READ_REQ", "KIND_READ_RESP",
           "roce"]
