"""The verbs API of ``RoceNic`` (``VerbsMixin``): memory registration,
QP creation, posting WRITE/SEND/receive work requests, polling the
completion queue, and introspection. See ``nic`` for the behaviour."""
from __future__ import annotations

import time

from .dcqcn import Dcqcn
from .qp import (
    _OPS_SEND, _OPS_WRITE, Completion, MemoryRegion, QpState, QueuePair, _RecvWqe, _SendWqe,
)
from .roce import PSN_HALF, PSN_MASK, WIRE_OVERHEAD_BYTES

_mono = time.monotonic_ns


class VerbsMixin:
    """``RoceNic``'s verbs: MRs, QPs, posting and polling."""

    # -- verbs ---------------------------------------------------------------
    def register_mr(self, size_bytes: int, *, addr: int | None = None, rkey: int | None = None,
                    buf: bytearray | None = None) -> MemoryRegion:
        """Register ``size_bytes`` of memory (``buf`` or a new zeroed
        bytearray) at virtual address ``addr`` (default: NIC-assigned) with
        ``rkey`` (default: NIC-assigned)."""
        if buf is None:
            buf = bytearray(size_bytes)
        elif len(buf) != size_bytes:
            raise ValueError("len(buf) != size_bytes")
        if rkey is None:
            while self._next_rkey in self._mrs:
                self._next_rkey += 1
            rkey = self._next_rkey
            self._next_rkey += 1
        if rkey in self._mrs:
            raise ValueError(f"rkey 0x{rkey:x} already registered")
        if addr is None:
            addr = self._next_addr
            self._next_addr += (size_bytes + 0xFFFF) & ~0xFFFF
        mr = MemoryRegion(addr, rkey & 0xFFFFFFFF, buf)
        self._mrs[mr.rkey] = mr
        return mr

    def deregister_mr(self, mr: MemoryRegion):
        self._mrs.pop(mr.rkey, None)

    def create_qp(self, qpn: int, remote_ip: str, remote_qpn: int, udp_sport: int | None = None,
                  *, sq_psn: int = 0, rq_psn: int = 0, rate_bps: int | None = None,
                  remote_mac: str | None = None) -> QueuePair:
        """An RC QP already connected (RTS). ``sq_psn`` must equal the
        peer's ``rq_psn`` and vice versa (exchanged out of band)."""
        if not 0 < qpn <= PSN_MASK or not 0 < remote_qpn <= PSN_MASK:
            raise ValueError("QP numbers are 24-bit and nonzero")
        if qpn in self._qps:
            raise ValueError(f"QP {qpn} exists")
        if udp_sport is None:
            udp_sport = 49152 + ((qpn * 2654435761 ^ remote_qpn) & 0x3FFF)
        if rate_bps is not None and rate_bps <= 0:
            raise ValueError("a QP's rate_bps must be > 0 (or None: line rate)")
        qp = QueuePair(self, qpn, remote_ip, remote_qpn, udp_sport, sq_psn, rq_psn,
                       rate_bps, remote_mac or self.gateway_mac)
        self._qps[qpn] = qp
        self._qp_list.append(qp)
        line = self.qp_line_rate_bps(qp)
        if self.dcqcn.enabled:
            qp.cc = Dcqcn(self.dcqcn, line,
                          listener=lambda t, ev, qp=qp: self._on_rate_change(qp, t, ev))
        if self.logs is not None:
            self.logs.qp(_mono(), qpn, line,
                         qp.cc.alpha_at(0) if qp.cc is not None else self.dcqcn.alpha_init, "init")
        return qp

    def qp_line_rate_bps(self, qp: QueuePair) -> float:
        """The most a QP may send: the link rate, or its cap if lower."""
        cap = qp.cap_bps
        return self.rate_bps if cap is None or cap > self.rate_bps else cap

    def _post(self, qp: QueuePair, wr_id: int, buf, is_write: bool, remote_addr: int, rkey: int,
              signaled: bool) -> None:
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
        w.is_read, w.rd_got = False, 0
        w.post_unix_ns = time.time_ns()
        w.post_ns = _mono()
        qp.next_psn += npkts
        qp.sq.append(w)

    def post_write(self, qp: QueuePair, wr_id: int, local: tuple[MemoryRegion, int, int],
                   remote_addr: int, rkey: int, *, signaled: bool = True) -> None:
        """RDMA WRITE ``local`` = (mr, offset, length) to ``remote_addr`` under ``rkey``."""
        mr, off, length = local
        if off < 0 or length < 0 or off + length > mr.size_bytes:
            raise ValueError("local range outside the memory region")
        self._post(qp, wr_id, mr.mv[off:off + length], True, remote_addr, rkey, signaled)

    def post_send(self, qp: QueuePair, wr_id: int, data, *, signaled: bool = True) -> None:
        """SEND ``data``: bytes-like, or (mr, offset, length)."""
        if isinstance(data, tuple):
            mr, off, length = data
            data = mr.mv[off:off + length]
        elif not isinstance(data, memoryview):
            data = memoryview(data)
        self._post(qp, wr_id, data, False, 0, 0, signaled)

    def post_recv(self, qp: QueuePair, wr_id: int, size: int, buf=None) -> None:
        """Post a receive buffer of ``size`` bytes (``buf``: a writable
        buffer to use, else a new bytearray) for one incoming SEND."""
        r = _RecvWqe()
        r.wr_id, r.size = wr_id, size
        r.buf = memoryview(buf if buf is not None else bytearray(size))
        if len(r.buf) < size:
            raise ValueError("buf shorter than size")
        r.post_ns, r.post_unix_ns = _mono(), time.time_ns()
        qp.rq.append(r)

    def poll_cq(self, max_n: int = 64) -> list[Completion]:
        out = []
        cq = self._cq
        while cq and len(out) < max_n:
            out.append(cq.popleft())
        return out

    def qp(self, qpn: int) -> QueuePair:
        return self._qps[qpn]

    @property
    def qps(self) -> list[QueuePair]:
        return list(self._qp_list)

    def frame_time_ns(self, frame_len: int, rate_bps: int | None = None) -> float:
        """Serialization time of a frame of ``frame_len`` bytes (as handed to
        AF_PACKET) including the 24 bytes of wire overhead."""
        return (frame_len + WIRE_OVERHEAD_BYTES) * 8e9 / (rate_bps or self.rate_bps)

    def idle(self) -> bool:
        """Nothing left to send or to be acknowledged."""
        if self._ctrl or self._dline or self._cnpq or self._rd_qps or self._cpu_rxq:
            return False
        return all(qp.snd_una >= qp.next_psn or qp.state != QpState.RTS for qp in self._qp_list)
