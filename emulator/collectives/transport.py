"""Connections between two ranks: FIFO messages with credit flow control.

Each connection has ``slots`` receive slots of ``slot_bytes`` at the
receiver (NCCL_STEPS-like). A sender may have at most ``slots`` messages
sent and not yet consumed; the receiver returns a credit when it has applied
(reduced or copied) a message, so a fast sender never overwrites a slot that
is still in use. Messages are consumed in order.

RDMA protocol (``RdmaConn``, one RC QP per rank pair, both directions):
  * data: copy the slice into local send slot k = seq % slots (a registered
    MR: the NIC rebuilds packets from it on retransmission, so it must stay
    intact until the WRITE completes), RDMA WRITE it into the peer's receive
    slot k, then SEND a 12-byte doorbell ``(DATA, seq, nbytes)`` on the same
    QP. RC delivers in order, so when the doorbell's receive completes the
    data is in place. (Works with plain verbs: no WRITE-with-immediate.)
  * credit: SEND ``(CREDIT, consumed so far)`` (cumulative: a lost or late
    one is superseded by the next).
  * receive slots live at a deterministic address/rkey derived from the
    sender's rank and the channel (``recv_addr``/``recv_rkey`` of
    ``schedule.conn_key``), so peers need no out-of-band exchange: every
    server derives the same plan.
  * GPUDirect RDMA off (``staging``, see ``staging.py``): the slots are
    host memory. The WRITE and its doorbell are posted together once the
    device-to-host copy of the slice has ended (posting the doorbell first
    would announce data not yet written); an arrived message is handed to
    the engine once the host-to-device copy, started when its doorbell
    completed, has ended. Credits are small host flags: not staged.
NVLink protocol (``NvlinkConn``): the slice (a copy) crosses the
``NvlinkSwitch``; the credit comes back after the NVLink latency.
"""
from __future__ import annotations

import struct
from collections import deque

import numpy as np

from emulator.nic.qp import WcOpcode, WcStatus
from emulator.clock import MONOTONIC, Clock

from .schedule import conn_key

DATA, CREDIT = 1, 2
_HDR = struct.Struct("<III")
RECV_ADDR_BASE = 0x7C00_0000_0000
RECV_ADDR_STRIDE = 1 << 32          # per sending rank and channel: room for slots x slot_bytes
RKEY_BASE = 0xC0110000


def recv_addr(sender_rank: int) -> int:
    return RECV_ADDR_BASE + sender_rank * RECV_ADDR_STRIDE


def recv_rkey(sender_rank: int) -> int:
    return RKEY_BASE + sender_rank


class TransportError(RuntimeError):
    """A QP of a connection failed: the work completion's status, where and
    when (``at_ns``: the completion's time on the NIC's clock)."""

    def __init__(self, rank: int, peer: int, qpn: int, opcode: str, status: str, at_ns: int):
        super().__init__(f"rank {rank} -> {peer}: QP {qpn} {opcode} failed: {status}")
        self.rank, self.peer, self.qpn = rank, peer, qpn
        self.opcode, self.status, self.at_ns = opcode, status, at_ns


class Conn:
    """What the engine sees: ``can_send``/``send``, ``arrived`` (payloads,
    oldest first: NVLink's as sent, RDMA's as bytes the engine views as its
    buffer's type) and ``release`` (head consumed)."""

    def __init__(self, local_rank: int, peer: int, slots: int, slot_bytes: int):
        self.local_rank, self.peer, self.slots, self.slot_bytes = local_rank, peer, slots, slot_bytes
        self.sent = 0              # messages sent
        self.freed = 0             # of those, consumed by the peer (credits received)
        self.consumed = 0          # messages we consumed
        self.arrived: deque = deque()
        self.pend_send: deque = deque()   # engine: ready send ops waiting for a credit
        self.pend_recv: deque = deque()   # engine: ready recv ops waiting for data
        self.tx_bytes = 0

    def can_send(self) -> bool:
        return self.sent - self.freed < self.slots


class NvlinkConn(Conn):
    def __init__(self, local_rank, peer, slots, slot_bytes, switch, src_port, dst_port):
        super().__init__(local_rank, peer, slots, slot_bytes)
        self.switch, self.src_port, self.dst_port = switch, src_port, dst_port
        self.other: NvlinkConn | None = None     # the peer's end, set by ``pair``

    @staticmethod
    def pair(a: "NvlinkConn", b: "NvlinkConn") -> None:
        a.other, b.other = b, a

    def send(self, data: np.ndarray) -> None:
        payload = data.copy()
        self.sent += 1
        self.tx_bytes += payload.nbytes
        self.switch.transfer(self.src_port, self.dst_port, payload.nbytes,
                             self.other.arrived.append, payload)

    def release(self) -> None:
        self.arrived.popleft()
        self.consumed += 1
        self.switch.after(self.switch.delay_ns, self.other._credit)

    def _credit(self) -> None:
        self.freed += 1


class RdmaConn(Conn):
    def __init__(self, local_rank, peer, slots, slot_bytes, nic, qp, staging=None, timers=None,
                 clock: Clock = MONOTONIC, chan: int = 0):
        super().__init__(local_rank, peer, slots, slot_bytes)
        self.nic, self.qp = nic, qp
        # GPUDirect off: the GPU's copy engines (StagingCopies) and the
        # engine's TimerHeap that holds posts and arrivals until a copy ends
        if staging is not None and timers is None:
            raise ValueError("staging needs the engine's timers")
        self.staging, self.timers, self.clock = staging, timers, clock
        size = slots * slot_bytes
        self.send_mr = nic.register_mr(size)
        sender, me = conn_key(peer, chan), conn_key(local_rank, chan)
        self.recv_mr = nic.register_mr(size, addr=recv_addr(sender), rkey=recv_rkey(sender))
        self.send_stage = np.frombuffer(self.send_mr.buf, dtype=np.uint8)
        self.recv_stage = np.frombuffer(self.recv_mr.buf, dtype=np.uint8)
        self.remote_addr, self.remote_rkey = recv_addr(me), recv_rkey(me)
        self.writes_done = 0
        self.ctrl_rx = 0
        # doorbells (<= slots unconsumed) + credits (<= slots in flight), with room
        # for the ones that arrive before we poll the CQ and repost
        for i in range(2 * slots + 8):
            nic.post_recv(qp, i, _HDR.size)

    def can_send(self) -> bool:
        # a credit from the peer, and our own staging slot no longer being sent
        return self.sent - self.freed < self.slots and self.sent - self.writes_done < self.slots

    def send(self, data: np.ndarray) -> None:
        k = self.sent % self.slots
        b0 = k * self.slot_bytes
        raw = data.view(np.uint8)
        nb = raw.size
        if nb > self.slot_bytes:
            raise ValueError("message larger than a slot")
        self.send_stage[b0:b0 + nb] = raw
        if self.staging is None:
            self._post(self.sent, b0, nb)
        else:                                       # D2H copy first, then the NIC
            done = self.staging.stage(nb, "tx", self.clock.now_ns())
            self.timers.push(done, (self._post, (self.sent, b0, nb)))
        self.sent += 1
        self.tx_bytes += nb

    def _post(self, seq: int, off: int, nbytes: int) -> None:
        self.nic.post_write(self.qp, seq, (self.send_mr, off, nbytes),
                            self.remote_addr + off, self.remote_rkey)
        self.nic.post_send(self.qp, 0, _HDR.pack(DATA, seq, nbytes), signaled=False)

    def release(self) -> None:
        self.arrived.popleft()
        self.consumed += 1
        self.nic.post_send(self.qp, 0, _HDR.pack(CREDIT, self.consumed, 0), signaled=False)

    def on_completion(self, c) -> None:
        if c.status != WcStatus.SUCCESS:
            raise TransportError(self.local_rank, self.peer, self.qp.qpn, c.opcode.name,
                                 c.status.name, c.complete_ns)
        if c.opcode == WcOpcode.RDMA_WRITE:
            self.writes_done += 1                  # RC completes WRITEs in order
        elif c.opcode == WcOpcode.RECV:
            kind, a, b = _HDR.unpack(bytes(c.data[:_HDR.size]))
            self.nic.post_recv(self.qp, c.wr_id, _HDR.size)
            self.ctrl_rx += 1
            if kind == DATA:
                b0 = (a % self.slots) * self.slot_bytes
                msg = self.recv_stage[b0:b0 + b]
                if self.staging is None:
                    self.arrived.append(msg)
                else:                               # in host memory: H2D copy first
                    done = self.staging.stage(b, "rx", c.complete_ns)
                    self.timers.push(done, (self.arrived.append, (msg,)))
            elif kind == CREDIT:
                self.freed = max(self.freed, a)
