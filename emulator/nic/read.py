"""RDMA READ (RC) of the NIC: the responder that answers READ requests
(``ReadResponder``) and the requester side that places the responses
(``ReadRequester``; posting a READ is ``Requester.post``).

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
nothing past the oldest unanswered READ response (``read_limit``).

The model in full: docs/nic.md, "read".
"""
from __future__ import annotations

from collections import deque

from emulator.wire import AETH_BYTES, ROCE_FRAMING, Framing

from .frames import ReadResponseFrame
from .qp import QpState
from .roce import (
    NAK_INVALID_REQUEST, NAK_PSN_SEQ_ERR, NAK_REMOTE_ACCESS_ERR, PSN_HALF,
    PSN_MASK, RC_READ_REQUEST, RC_READ_RESPONSE_FIRST, RC_READ_RESPONSE_LAST,
    RC_READ_RESPONSE_MIDDLE, RC_READ_RESPONSE_ONLY,
)

READ_OPS = frozenset({RC_READ_REQUEST, RC_READ_RESPONSE_FIRST, RC_READ_RESPONSE_MIDDLE,
                      RC_READ_RESPONSE_LAST, RC_READ_RESPONSE_ONLY})


class ReadJob:
    """Responder: one READ to answer. ``mv`` is the requested bytes; response
    k (0 <= k < npkts) has PSN ``psn + k`` (unwrapped)."""
    __slots__ = ("mv", "length", "psn", "npkts", "k", "msn", "ready_ns")


def oldest_read(qp):
    for w in qp.sq:
        if w.is_read:
            return w
    return None


def read_limit(qp) -> int:
    """Nothing at or past the oldest READ's next response may be
    acknowledged except by that response."""
    w = oldest_read(qp)
    return w.first_psn + w.rd_got if w is not None else qp.snd_max


class ReadResponder:
    """Answers READ requests: jobs per QP (``qp.rd_jobs``), QPs with
    responses to send round-robin in ``busy`` (the transmitter's seam, as the
    requester's ``busy``: not empty, a response waits); the transmitter asks for
    the next response with ``take``. PSN checks and NAKs go through the
    ``responder`` (one expected PSN per QP for every request)."""

    def __init__(self, responder, mrs: dict, mtu_bytes: int, stats,
                 framing: Framing = ROCE_FRAMING):
        self.responder = responder
        self.mrs = mrs
        self.mtu_bytes = mtu_bytes
        self.framing = framing
        self.stats = stats
        self.busy: deque = deque()      # never rebound: the transmitter holds it

    def on_request(self, qp, pkt, now: int) -> None:
        st = self.stats
        d = (pkt.psn - qp.epsn) & PSN_MASK
        if d and d < PSN_HALF:           # ahead of expected: a gap
            st.rx_out_of_order += 1
            self.responder.nak_once(qp, NAK_PSN_SEQ_ERR)
            return
        if qp.state != QpState.RTS:
            return
        mr = self.mrs.get(pkt.reth_rkey)
        va, dlen = pkt.reth_va, pkt.reth_len
        bad = mr is None or va < mr.addr or va + dlen > mr.addr + mr.size_bytes
        npkts = max(1, -(-dlen // self.mtu_bytes))
        if d:                            # duplicate: answer again from its PSN
            st.rx_duplicates += 1
            psn = qp.epsn - ((qp.epsn - pkt.psn) & PSN_MASK)
            if bad or psn + npkts > qp.epsn:
                return                   # not a re-request of something we accepted
            self._drop_jobs(qp, psn)
        else:
            if bad:
                return self.responder.bad_request(qp, NAK_REMOTE_ACCESS_ERR)
            if qp.rx_kind != -1:         # inside a multi-packet WRITE/SEND
                return self.responder.bad_request(qp, NAK_INVALID_REQUEST)
            psn = qp.epsn
            qp.epsn += npkts
            qp.msn = (qp.msn + 1) & PSN_MASK
            qp.nak_sent = False
            qp.dup_acked = False
            st.rx_read_requests += 1
        j = ReadJob()
        base = va - mr.addr
        j.mv, j.length, j.psn, j.npkts, j.k = mr.mv[base:base + dlen], dlen, psn, npkts, 0
        j.msn, j.ready_ns = qp.msn, now + mr.read_latency_ns
        if not qp.rd_jobs:
            self.busy.append(qp)
        qp.rd_jobs.append(j)

    def _drop_jobs(self, qp, psn: int) -> None:
        """Forget the queued READs of ``qp`` that reach ``psn`` or past it: the
        requester has everything before ``psn`` and re-requests the rest."""
        jobs = qp.rd_jobs
        while jobs and jobs[-1].psn + jobs[-1].npkts > psn:
            jobs.pop()
        if not jobs and qp in self.busy:
            self.busy.remove(qp)

    def take(self, slot: float, now: int, gate=None):
        """The next READ response allowed at ``slot`` (its QP's pacing,
        ``qp.next_ok_ns``, and its job's ready time permitting): (frame,
        frame length, slot), or None. ``gate``: the CPU gate (may move the
        slot later, or hold the frame: None)."""
        rdq = self.busy
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
            if gate is not None:
                slot = gate(qp, slot, now, j.ready_ns, plen)
                if slot < 0:
                    return None
            n = j.npkts
            flen = self.framing.frame_bytes(0 if 0 < k < n - 1 else AETH_BYTES, plen)
            psn = j.psn + k
            if psn < qp.rd_max:          # sent before: a re-executed READ
                self.stats.tx_retransmits += 1
            else:
                qp.rd_max = psn + 1
            j.k = k + 1
            if j.k >= n:
                qp.rd_jobs.popleft()
                if not qp.rd_jobs:
                    rdq.remove(qp)
            return ReadResponseFrame(qp, j, k, psn), flen, slot
        return None

    def next_ready_ns(self, base: float) -> float:
        """Earliest time a queued response may go, no earlier than ``base``."""
        t = float("inf")
        for qp in self.busy:
            x = max(base, qp.next_ok_ns, qp.rd_jobs[0].ready_ns) if qp.rd_jobs else base
            if x < t:
                t = x
        return t


class ReadRequester:
    """Places READ responses into the READ's local buffer, in order; a gap
    rewinds the ``requester`` once to the missing PSN."""

    def __init__(self, requester, mtu_bytes: int, stats):
        self.requester = requester
        self.mtu_bytes = mtu_bytes
        self.stats = stats

    def on_response(self, qp, pkt, now: int) -> None:
        st = self.stats
        st.rx_read_responses += 1
        w = oldest_read(qp) if qp.state == QpState.RTS else None
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
                    self.requester.acked_through(qp, exp, now)
                    if exp < qp.snd_nxt:
                        self.requester.rewind(qp, exp)
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
        self.requester.acked_through(qp, exp + 1, now)
