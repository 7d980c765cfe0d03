"""Frames waiting in the NIC's transmit path, by kind; each builds itself.

The parts that decide what to send (requester, responder, READ responder,
notification point, the link layer) hand the transmitter one of these; it
builds the bytes only when the frame leaves (``transmitter``), so a frame on
the wire is always the current state of its message buffer. Named tuples:
cheap to make per packet. Each kind has ``build(tx)`` -- its bytes -- and
``sent(tx, n_bytes, now)`` -- what its leaving counts and tells its part --,
``tx`` the transmitter (``mtu_bytes``, ``int_max_hops``, ``cnp_template``,
``stats``, ``requester``, ``logs``): the transmitter does not switch on kinds.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from emulator import int_md
from emulator.wire import CNP_PAD_BYTES

from .roce import (
    AETH_ACK_SYNDROME, CNP_OPCODE, RC_ACK, RC_READ_REQUEST, RC_READ_RESPONSE_FIRST,
    RC_READ_RESPONSE_LAST, RC_READ_RESPONSE_MIDDLE, RC_READ_RESPONSE_ONLY,
)

_CNP_PAD = bytes(CNP_PAD_BYTES)


class DataFrame(NamedTuple):
    """Packet ``k`` of a SEND/WRITE work request ``wqe``, PSN ``psn``
    (unwrapped); ``ack_req``: its AckReq bit (a response is owed for it)."""
    qp: Any
    wqe: Any
    k: int
    psn: int
    ack_req: bool

    def build(self, tx):
        w, k = self.wqe, self.k
        n = w.npkts
        mtu = tx.mtu_bytes
        off = k * mtu
        end = off + mtu
        if end > w.length:
            end = w.length
        if n == 1:
            op = w.ops[3]
        elif k == 0:
            op = w.ops[0]
        elif k == n - 1:
            op = w.ops[2]
        else:
            op = w.ops[1]
        reth = (w.remote_addr, w.rkey, w.length) if (w.is_write and k == 0) else None
        frame = self.qp.tpl.build(op, self.psn, w.buf[off:end], ack_req=self.ack_req, reth=reth)
        if tx.int_max_hops:                  # the INT source: room for every switch's record
            return int_md.insert(frame, int_md.INT_KIND_COLLECT, tx.int_max_hops)
        return frame

    def sent(self, tx, n_bytes: int, now: int) -> None:
        st = tx.stats
        st.tx_packets += 1
        st.tx_bytes += n_bytes
        qp = self.qp
        st.tx_data_packets += 1
        qp.tx_data_packets += 1
        mtu = tx.mtu_bytes
        plen = self.wqe.length - self.k * mtu
        st.tx_data_payload_bytes += plen if plen < mtu else mtu
        tx.requester.sent(qp, now, self.psn + 1, self.ack_req)


class ReadRequestFrame(NamedTuple):
    """A READ request for response ``k`` onwards of READ ``wqe`` (PSN ``psn``)."""
    qp: Any
    wqe: Any
    k: int
    psn: int

    def build(self, tx):
        w = self.wqe
        off = self.k * tx.mtu_bytes
        return self.qp.tpl.build(RC_READ_REQUEST, self.psn,
                                 reth=(w.remote_addr + off, w.rkey, w.length - off))

    def sent(self, tx, n_bytes: int, now: int) -> None:
        st = tx.stats
        st.tx_packets += 1
        st.tx_bytes += n_bytes
        st.tx_read_requests += 1
        tx.requester.sent(self.qp, now, self.psn + self.wqe.npkts - self.k, True)


class ReadResponseFrame(NamedTuple):
    """Response ``k`` of the READ ``job`` being answered (PSN ``psn``)."""
    qp: Any
    job: Any
    k: int
    psn: int

    def build(self, tx):
        j, k = self.job, self.k
        n = j.npkts
        mtu = tx.mtu_bytes
        off = k * mtu
        end = min(off + mtu, j.length)
        tpl = self.qp.tpl
        if n == 1:
            op = RC_READ_RESPONSE_ONLY
        elif k == 0:
            op = RC_READ_RESPONSE_FIRST
        elif k == n - 1:
            op = RC_READ_RESPONSE_LAST
        else:
            return tpl.build(RC_READ_RESPONSE_MIDDLE, self.psn, j.mv[off:end])
        return tpl.build(op, self.psn, j.mv[off:end], aeth=(AETH_ACK_SYNDROME, j.msn))

    def sent(self, tx, n_bytes: int, now: int) -> None:
        st = tx.stats
        st.tx_packets += 1
        st.tx_bytes += n_bytes
        st.tx_read_responses += 1
        st.tx_data_payload_bytes += min(tx.mtu_bytes, self.job.length - self.k * tx.mtu_bytes)


class AckFrame(NamedTuple):
    """An ACK or NAK (AETH ``syndrome``, ``msn``) for PSN ``psn`` (24-bit)."""
    qp: Any
    psn: int
    syndrome: int
    msn: int

    def build(self, tx):
        qp = self.qp
        frame = qp.tpl.build(RC_ACK, self.psn, aeth=(self.syndrome, self.msn))
        echo = qp.int_echo
        if echo is not None:                 # the INT sink: the records go back to the sender
            return int_md.insert(frame, int_md.INT_KIND_ECHO, echo[0], echo[1])
        return frame

    def sent(self, tx, n_bytes: int, now: int) -> None:
        st = tx.stats
        st.tx_packets += 1
        st.tx_bytes += n_bytes
        if self.syndrome == AETH_ACK_SYNDROME:
            st.tx_acks += 1


class CnpFrame(NamedTuple):
    """A congestion notification to ``qp``'s peer QP (its template made at
    the first, by the link layer's ``cnp_template``)."""
    qp: Any

    def build(self, tx):
        qp = self.qp
        tpl = qp.cnp_tpl
        if tpl is None:
            tpl = qp.cnp_tpl = tx.cnp_template(qp)
        return tpl.build(CNP_OPCODE, 0, _CNP_PAD, becn=True)

    def sent(self, tx, n_bytes: int, now: int) -> None:
        st = tx.stats
        st.tx_packets += 1
        st.tx_bytes += n_bytes
        st.cnp_tx += 1
        if tx.logs is not None:
            tx.logs.cnp(now, self.qp.qpn, self.qp.remote_qpn, "tx")


class LinkFrame(NamedTuple):
    """A link packet (InfiniBand flow control), its bytes built: it takes no
    credit and no serializer time, and goes out on the link's delay."""
    data: bytes

    def build(self, tx):
        return self.data

    def sent(self, tx, n_bytes: int, now: int) -> None:
        tx.stats.fc_tx += 1


class PauseFrame(NamedTuple):
    """A PFC frame the NIC sends (a storm's, ``pfc.PfcStormer``), its bytes built."""
    data: bytes

    def build(self, tx):
        return self.data

    def sent(self, tx, n_bytes: int, now: int) -> None:
        tx.stats.pfc_tx += 1
