"""A software RoCEv2 NIC with a verbs-like API: RC queue pairs on AF_PACKET.

One ``RoceNic`` owns one interface (a raw ``AF_PACKET`` socket bound to it)
and is driven by its caller's thread through ``run_once`` / ``run_until``:
there are no threads inside. Everything happens in that event loop:

* receive: drain the socket (non-blocking ``recv_into`` a reused buffer),
  decode with ``roce.parse_roce``, check the ICRC, dispatch by destination
  QP: requests (SEND/WRITE) go to the responder, ACK/NAKs to the requester;
* timers: retransmission timeouts, RNR back-off;
* transmit: a pacer serializes frames at ``rate_bps`` counting the whole
  frame plus 24 bytes (preamble, SFD, FCS, IFG). It keeps an absolute
  schedule (``slot_free_ns``): frame k starts at slot_k, the next slot is
  slot_k + (len_k + 24) * 8e9 / rate. A frame is never sent before its slot;
  when the loop wakes late it sends the frames that are due in a burst
  (catch-up is bounded by ``max_lag_ns``; time lost beyond that is given
  up, not recovered with a longer burst). A frame leaves ``tx_delay_ns``
  after its slot (a constant shift modelling the host link's propagation
  delay). ACK/NAKs get the next slot before data; data QPs share the rest
  round-robin, one frame at a time.

Reliability (RC, go-back-N, as ConnectX/rxe do it):

* requester: messages are cut into ``mtu_bytes`` packets (FIRST/MIDDLE/
  LAST or ONLY; RETH on WRITE FIRST/ONLY), each with the next 24-bit PSN.
  AckReq is set on the last packet of a message and on every packet whose
  PSN+1 is a multiple of ``ack_every_n``. Packets are not stored: they are
  rebuilt from the message buffer when (re)sent. An ACK for PSN p completes
  every message whose packets are all <= p. A NAK (PSN sequence error) for
  p acknowledges < p and restarts sending at p. With no ACK progress for
  ``rto_ns`` while packets are outstanding, sending restarts at the oldest
  unacknowledged PSN; the timeout doubles with each consecutive expiry (up
  to 8 x ``rto_ns``, like ConnectX's adaptive retransmission) and after
  ``retry_cnt`` consecutive timeouts the QP fails (completions with
  RETRY_EXC_ERR / WR_FLUSH_ERR). An RNR NAK pauses the QP
  for the time its timer code says, then resends from the NAK'd PSN.
* responder: accepts only the expected PSN. In-order WRITE payload is
  placed in the memory region named by the RETH rkey at RETH address +
  offset; SEND payload in the oldest posted receive. When AckReq is set it
  ACKs (coalesced: at most one ACK per QP per receive batch) with the last
  in-order PSN and the MSN. The first packet past a gap triggers one NAK
  (PSN sequence error, syndrome 0x60) carrying the expected PSN; later
  out-of-order packets are dropped silently until the expected one comes.
  Duplicates are dropped and re-ACKed (the first one after progress, and
  any with AckReq). Bad rkey/bounds -> NAK remote access error; SEND with
  no receive posted -> RNR NAK.

Completions (``poll_cq``): requester WQEs (SEND, RDMA_WRITE) complete when
acknowledged; receives (RECV) when the SEND's last packet is placed. As an
emulator extension (real verbs report nothing for a plain WRITE at the
responder), a completed incoming WRITE yields a ``RECV_RDMA_WRITE``
completion with the RETH address/rkey/length, so an agent can see arrivals;
for it ``post_ns`` is when its first packet was placed. Responder
completions carry ``first_rx_ns`` / ``first_rx_unix_ns``.

Lossless classes and congestion control (docs/lossless.md):

* Priorities: data, ACK and NAK frames carry DSCP ``dscp`` and belong to
  priority ``priority`` (default 26 / 3); CNPs carry ``cnp_dscp`` and belong
  to ``cnp_priority`` (48 / 6). The transmitter serves CNPs first, then
  ACK/NAKs, then data.
* PFC (802.1Qbb) reception: a MAC-control frame to 01:80:C2:00:00:01 with
  opcode 0x0101 pauses, for each priority whose class-enable bit is set, the
  start of that priority's frames for timer x 512 bit times at ``rate_bps``
  from its arrival (a new frame restarts the timer; 0 resumes at once). A
  paused priority sends nothing; frames already serialized (in the
  ``tx_delay_ns`` line) are on the wire and still leave. Counted in
  ``stats.pfc_rx`` (frames) and ``stats.paused_ns`` (paused time of our
  two classes, summed; see ``update_pause_stats``), logged through
  ``logs.pfc``. ACK timeouts that expire while our data class is paused
  are re-armed one RTO past the pause (no retry is counted). A QP paced
  below the link rate gets a longer ACK timeout (see ``_rto_for``).
* Notification point: a request packet for a local QP that arrives marked CE
  queues a CNP to the peer QP (BTH opcode 0x81, BECN, PSN 0, dest QP =
  ``remote_qpn``, 16 zero bytes, ICRC; IPv4 DSCP ``cnp_dscp``, not-ECT), at
  most one per QP per ``cnp_interval_ns`` (None: never).
* Reaction point: with ``dcqcn`` params enabled, each QP runs a
  ``dcqcn.Dcqcn`` whose current rate becomes ``QueuePair.rate_bps`` (the
  pacer never lets a QP exceed it; None = line rate). A QP's own
  ``rate_bps`` given at creation is its line rate for DCQCN.
* Hooks: ``RoceNic.on_ecn_ce`` (called with (qp, pkt) for every request
  packet to a known QP that arrives marked CE, in order or not) and
  ``RoceNic.on_cnp`` (called with (qp, pkt) for every CNP, opcode 0x81).
* ``logs``: an object with ``qp(t_ns, qpn, rate_bps, alpha, event)``,
  ``cnp(t_ns, local_qpn, remote_qpn, direction)`` and
  ``pfc(t_ns, priority, quanta)`` (``host.RunLogs``), or None.

Times are ``time.monotonic_ns()``; completions also carry wall-clock
``time.time_ns()`` values (``*_unix_ns``).
"""
from __future__ import annotations

import ctypes
import errno
import select
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass
from enum import IntEnum
from typing import Callable

from . import roce
from .dcqcn import Dcqcn, DcqcnParams
from .roce import (
    AETH_ACK, AETH_ACK_SYNDROME, AETH_RNR_NAK, AETH_TYPE_MASK, CNP_OPCODE, ECN_CE,
    ECN_ECT0, ECN_NOT_ECT, NAK_INVALID_REQUEST, NAK_PSN_SEQ_ERR, NAK_REMOTE_ACCESS_ERR,
    NAK_REMOTE_OP_ERR,
    PSN_HALF, PSN_MASK, RC_ACK, WIRE_OVERHEAD_BYTES, FrameTemplate, ip_to_int, parse_roce,
    verify_icrc,
)

# ---------------------------------------------------------------------------
# Verbs-like enums (values follow libibverbs' ibv_wc_opcode / ibv_wc_status)
# ---------------------------------------------------------------------------


class WcOpcode(IntEnum):
    SEND = 0
    RDMA_WRITE = 1
    RECV = 128
    RECV_RDMA_WRITE = 0x1000   # emulator extension: an incoming WRITE finished


class WcStatus(IntEnum):
    SUCCESS = 0
    LOC_LEN_ERR = 1
    WR_FLUSH_ERR = 5
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13


class QpState(IntEnum):
    RTS = 3      # ready to send (and receive)
    ERROR = 6


# IBA table 45: RNR NAK timer field -> minimum delay (microseconds)
RNR_TIMER_US = (655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
                2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
                163840, 245760, 327680, 491520)

_OPS_WRITE = (roce.RC_WRITE_FIRST, roce.RC_WRITE_MIDDLE, roce.RC_WRITE_LAST, roce.RC_WRITE_ONLY)
_OPS_SEND = (roce.RC_SEND_FIRST, roce.RC_SEND_MIDDLE, roce.RC_SEND_LAST, roce.RC_SEND_ONLY)
# responder view of request opcodes: opcode -> (kind, is_first, is_last); kind 0=WRITE 1=SEND
_REQ = {
    roce.RC_WRITE_FIRST: (0, True, False), roce.RC_WRITE_MIDDLE: (0, False, False),
    roce.RC_WRITE_LAST: (0, False, True), roce.RC_WRITE_ONLY: (0, True, True),
    roce.RC_SEND_FIRST: (1, True, False), roce.RC_SEND_MIDDLE: (1, False, False),
    roce.RC_SEND_LAST: (1, False, True), roce.RC_SEND_ONLY: (1, True, True),
}

_HDR_LEN = 14 + 20 + 8 + 12          # Ether + IPv4 + UDP + BTH
_ACK_FRAME_LEN = _HDR_LEN + 4 + 4    # + AETH + ICRC
_CNP_PAD = bytes(16)
_CNP_FRAME_LEN = _HDR_LEN + 16 + 4   # + reserved + ICRC

# Linux constants Python's socket module does not export
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
PACKET_STATISTICS = 6
SO_ATTACH_FILTER = 26
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
ETH_P_IP = 0x0800
PR_SET_TIMERSLACK = 29

_mono = time.monotonic_ns


def set_timer_slack_ns(ns: int = 1000) -> bool:
    """Shrink this thread's timer slack (default 50 us) so that short sleeps
    in the pacer wake close to on time. Returns False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(ns), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


ETH_P_PAUSE = 0x8808                 # MAC control (802.3x PAUSE, 802.1Qbb PFC)
PFC_DST_MAC = bytes.fromhex("0180c2000001")
PFC_OPCODE = 0x0101
PFC_QUANTUM_BITS = 512               # a pause quantum is 512 bit times at the link rate


def _bpf_assemble(prog) -> bytes:
    """Classic BPF from (code, jt, jf, k) tuples whose jt/jf may be label
    names; a bare string in the list defines a label at that point."""
    labels, out = {}, []
    for ins in prog:
        if isinstance(ins, str):
            labels[ins] = len(out)
        else:
            out.append(ins)
    code = []
    for i, (op, jt, jf, k) in enumerate(out):
        jt = labels[jt] - i - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - i - 1 if isinstance(jf, str) else jf
        if not (0 <= jt < 256 and 0 <= jf < 256):
            raise ValueError("BPF jump out of range")
        code.append(struct.pack("=HBBI", op, jt, jf, k))
    return b"".join(code)


def rocev2_bpf(ip: str, pfc: bool = True) -> bytes:
    """Classic BPF: accept IPv4 UDP to port 4791 and to ``ip``, unfragmented;
    with ``pfc`` also 802.1Qbb PFC frames (dst 01:80:C2:00:00:01, ethertype
    0x8808, opcode 0x0101). The NIC attaches it to its ETH_P_IP socket and to
    its ETH_P_PAUSE socket (each sees only its own ethertype; one program for
    both)."""
    mac_hi = int.from_bytes(PFC_DST_MAC[:4], "big")
    mac_lo = int.from_bytes(PFC_DST_MAC[4:], "big")
    prog = [
        (0x28, 0, 0, 12),                        # ldh [12]            ethertype
        (0x15, 0, "not_ip", ETH_P_IP),           # jeq IPv4
        (0x30, 0, 0, 23),                        # ldb [23]            IP proto
        (0x15, 0, "drop", 17),                   # jeq UDP
        (0x20, 0, 0, 30),                        # ld [30]             dst IP
        (0x15, 0, "drop", ip_to_int(ip)),        # jeq ours
        (0x28, 0, 0, 20),                        # ldh [20]            flags/fragment offset
        (0x45, "drop", 0, 0x1FFF),               # jset fragment -> drop
        (0xB1, 0, 0, 14),                        # ldxb 4*([14]&0xf)   IP header length
        (0x48, 0, 0, 16),                        # ldh [x+16]          UDP dport
        (0x15, "accept", "drop", roce.ROCEV2_UDP_PORT),
        "not_ip",
    ]
    if pfc:
        prog += [
            (0x15, 0, "drop", ETH_P_PAUSE),      # jeq 0x8808 (A: ethertype)
            (0x20, 0, 0, 0),                     # ld [0]              dst MAC 0..3
            (0x15, 0, "drop", mac_hi),
            (0x28, 0, 0, 4),                     # ldh [4]             dst MAC 4..5
            (0x15, 0, "drop", mac_lo),
            (0x28, 0, 0, 14),                    # ldh [14]            MAC control opcode
            (0x15, "accept", "drop", PFC_OPCODE),
        ]
    else:
        prog += [(0x06, 0, 0, 0)]                # ret drop
    prog += [
        "accept", (0x06, 0, 0, 0x40000),         # ret accept
        "drop", (0x06, 0, 0, 0),                 # ret drop
    ]
    return _bpf_assemble(prog)


# ---------------------------------------------------------------------------
# Objects
# ---------------------------------------------------------------------------
class MemoryRegion:
    """Registered memory: ``buf`` holds bytes [addr, addr + size_bytes)."""

    __slots__ = ("addr", "rkey", "size_bytes", "buf", "mv")

    def __init__(self, addr: int, rkey: int, buf: bytearray):
        self.addr, self.rkey, self.buf = addr, rkey, buf
        self.size_bytes = len(buf)
        self.mv = memoryview(buf)

    def __repr__(self):
        return f"MemoryRegion(addr=0x{self.addr:x}, rkey=0x{self.rkey:x}, size_bytes={self.size_bytes})"


@dataclass(slots=True)
class Completion:
    wr_id: int
    qpn: int
    opcode: WcOpcode
    status: WcStatus
    byte_len: int
    post_ns: int            # monotonic: when posted (RECV_RDMA_WRITE: first packet placed)
    complete_ns: int        # monotonic
    post_unix_ns: int = 0
    complete_unix_ns: int = 0
    remote_addr: int | None = None   # RDMA_WRITE / RECV_RDMA_WRITE: RETH address
    rkey: int | None = None
    data: memoryview | None = None   # RECV: the received bytes (a view of the recv buffer)
    first_rx_ns: int | None = None   # responder: when the message's first packet was placed
    first_rx_unix_ns: int | None = None


class _SendWqe:
    __slots__ = ("wr_id", "ops", "is_write", "buf", "length", "remote_addr", "rkey",
                 "first_psn", "npkts", "post_ns", "post_unix_ns", "signaled")


class _RecvWqe:
    __slots__ = ("wr_id", "buf", "size", "post_ns", "post_unix_ns")


class QueuePair:
    """An RC QP. Sender PSNs are kept unwrapped (Python ints) internally and
    masked to 24 bits on the wire."""

    def __init__(self, nic: "RoceNic", qpn: int, remote_ip: str, remote_qpn: int,
                 udp_sport: int, sq_psn: int, rq_psn: int, rate_bps: int | None,
                 dst_mac: str):
        self.nic = nic
        self.qpn = qpn
        self.remote_ip = remote_ip
        self.remote_ip_int = ip_to_int(remote_ip)
        self.remote_qpn = remote_qpn
        self.udp_sport = udp_sport
        self.rate_bps = rate_bps        # what the pacer enforces: None = line rate
        self.cap_bps = rate_bps         # configured cap (DCQCN's line rate for this QP)
        self.cc: Dcqcn | None = None    # DCQCN reaction point (None: disabled)
        self.cnp_tpl: FrameTemplate | None = None   # built at the first CNP we send
        self.next_cnp_ok_ns = 0         # notification point: no CNP before this
        self.state = QpState.RTS
        self.tpl = FrameTemplate(nic.mac, dst_mac, nic.ip, remote_ip, udp_sport, remote_qpn,
                                 dscp=nic.dscp, ecn=nic.ecn, max_payload_bytes=nic.mtu_bytes)
        self.tpl_dst_mac = dst_mac
        # requester
        self.sq: deque[_SendWqe] = deque()
        self.next_psn = sq_psn & PSN_MASK   # next PSN to allocate
        self.snd_una = self.next_psn        # oldest unacknowledged
        self.snd_nxt = self.next_psn        # next to serialize
        self.snd_max = self.next_psn        # highest serialized + 1
        self.cur_idx = 0                    # index in sq of the WQE holding snd_nxt
        self.rto_deadline_ns = 0            # 0 = timer not armed
        self.retries = 0
        self.rnr_retries = 0
        self.paused_until_ns = 0
        self.next_ok_ns = 0.0               # per-QP rate limiter
        self.last_tx_slot = None            # slot and length of the last data frame
        self.last_tx_flen = 0
        # responder
        self.epsn = rq_psn & PSN_MASK       # expected PSN (unwrapped)
        self.msn = 0
        self.nak_sent = False
        self.dup_acked = False
        self.ack_pending = False
        self.rq: deque[_RecvWqe] = deque()
        self.rx_kind = -1                   # -1 idle, 0 WRITE, 1 SEND in progress
        self.rx_mv = None                   # where the message goes
        self.rx_pos = 0
        self.rx_end = 0
        self.rx_va = 0
        self.rx_rkey = 0
        self.rx_len = 0
        self.rx_recv: _RecvWqe | None = None
        self.rx_first_ns = 0
        self.rx_first_unix_ns = 0

    # -- introspection -------------------------------------------------------
    def outstanding_pkts(self) -> int:
        return self.snd_max - self.snd_una

    def has_tx_data(self) -> bool:
        return self.snd_nxt < self.next_psn and self.state == QpState.RTS

    def send_progress(self) -> dict[int, int]:
        """wr_id -> bytes acknowledged so far, for WQEs not yet completed."""
        mtu = self.nic.mtu_bytes
        out = {}
        for w in self.sq:
            acked = max(0, min(self.snd_una - w.first_psn, w.npkts))
            out[w.wr_id] = min(w.length, acked * mtu)
        return out

    def rx_progress(self) -> tuple[str, int, int] | None:
        """The incoming message being assembled: ("write", RETH addr, bytes
        placed) or ("send", recv wr_id, bytes placed); None when idle."""
        if self.rx_kind == 0:
            return ("write", self.rx_va, self.rx_len - (self.rx_end - self.rx_pos))
        if self.rx_kind == 1 and self.rx_recv is not None:
            return ("send", self.rx_recv.wr_id, self.rx_pos)
        return None

    def __repr__(self):
        return (f"QueuePair(qpn={self.qpn}, remote={self.remote_ip}/{self.remote_qpn}, "
                f"una={self.snd_una}, nxt={self.snd_nxt}, max={self.snd_max}, epsn={self.epsn})")


class NicStats:
    __slots__ = ("tx_packets", "tx_bytes", "tx_data_packets", "tx_data_payload_bytes",
                 "tx_acks", "tx_naks", "tx_rnr_naks", "tx_retransmits", "tx_enobufs",
                 "tx_lag_max_ns", "tx_lag_sum_ns",
                 "rx_packets", "rx_bytes", "rx_data_packets", "rx_data_payload_bytes",
                 "rx_acks", "rx_naks", "rx_rnr_naks",
                 "cnp_tx", "cnp_rx", "ecn_ce_rx", "pfc_rx", "paused_ns", "rate_changes",
                 "rx_out_of_order", "rx_duplicates", "rx_icrc_errors", "rx_ignored",
                 "rx_bad_requests", "timeouts", "nak_rewinds", "completions", "loops",
                 "rx_batches_max", "rx_socket_drops")

    def __init__(self):
        for k in self.__slots__:
            setattr(self, k, 0)

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__slots__}
        d["tx_lag_mean_ns"] = d["tx_lag_sum_ns"] // d["tx_packets"] if d["tx_packets"] else 0
        return d

    def __repr__(self):
        return "NicStats(" + ", ".join(f"{k}={v}" for k, v in self.as_dict().items() if v) + ")"


# ---------------------------------------------------------------------------
# The NIC
# ---------------------------------------------------------------------------
class RoceNic:
    """A software RoCEv2 RNIC on one interface. Not thread-safe."""

    RX_BATCH = 256     # frames drained per wakeup at most
    TX_BURST = 64      # frames serialized per service pass at most

    def __init__(self, ifname: str | None, mac: str, ip: str, gateway_mac: str,
                 rate_bps: int = 10_000_000, mtu_bytes: int = 1024, dscp: int = 26,
                 tx_delay_ns: int = 0, *, ecn: int = ECN_ECT0, ack_every_n: int = 16,
                 rto_ns: int | None = None, retry_cnt: int = 7, min_rnr_timer: int = 14,
                 rnr_retry: int | None = None, max_lag_ns: int | None = None,
                 max_outstanding_pkts: int = 1 << 22, verify_icrc: bool = True,
                 report_remote_writes: bool = True, rcvbuf_bytes: int = 16 << 20,
                 sndbuf_bytes: int = 4 << 20, absorb_udp: bool = True,
                 timer_slack_ns: int | None = 1000, sock=None, priority: int = 3,
                 cnp_dscp: int = 48, cnp_priority: int = 6,
                 cnp_interval_ns: int | None = 50_000, honor_pfc: bool = True,
                 dcqcn: DcqcnParams | dict | None = None, logs=None):
        """``rto_ns`` default (None): max(20 ms, 8 * ack_every_n full-frame
        times at ``rate_bps``) -- 113 ms at 10 Mbit/s, 20 ms from ~60 Mbit/s
        up. The sender hears an ACK only every ``ack_every_n`` packets (14 ms
        apart at 10 Mbit/s on an idle path), and agents share CPUs with the
        software switches, so a "few ms" timeout fires spuriously and each
        spurious timeout resends the whole window. Lower it for experiments
        about loss recovery. ``retry_cnt``: consecutive timeouts before the QP
        fails. ``rnr_retry``: consecutive RNR NAKs before it fails (None:
        forever, like IBA's 7). ``min_rnr_timer``: the RNR timer code (IBA
        table 45) our RNR NAKs carry; 14 = 1.28 ms. ``max_lag_ns`` (default
        max(500 us, 4 frame times)): how far behind its schedule the pacer
        may catch up with a burst.
        ``sock``: use this connected datagram socket (needs send, recv_into,
        fileno; e.g. one end of an AF_UNIX socketpair) instead of opening
        AF_PACKET on ``ifname`` -- for tests; it carries PFC frames too.
        ``priority`` / ``cnp_priority``: the 802.1p priorities (PFC classes)
        of data+ACK/NAK frames and of CNPs; ``cnp_dscp``: the CNPs' DSCP.
        ``cnp_interval_ns``: notification point, at most one CNP per QP per
        interval (None: send no CNPs). ``honor_pfc``: obey received PFC
        frames. ``dcqcn``: reaction point parameters (``DcqcnParams`` or its
        dict form); None or ``enabled: false`` keeps every QP at its line
        rate. ``logs``: see the module docstring."""
        if rate_bps <= 0 or mtu_bytes < 256 or mtu_bytes > 9000 or mtu_bytes % 4:
            raise ValueError("rate_bps must be > 0 and mtu_bytes a multiple of 4 in 256..9000")
        if ack_every_n < 1:
            raise ValueError("ack_every_n must be >= 1")
        if not (0 <= priority < 8 and 0 <= cnp_priority < 8 and 0 <= cnp_dscp < 64):
            raise ValueError("priorities must be 0..7 and cnp_dscp 0..63")
        if cnp_interval_ns is not None and cnp_interval_ns < 0:
            raise ValueError("cnp_interval_ns must be >= 0")
        self.ifname, self.mac, self.ip = ifname, mac, ip
        self.ip_int = ip_to_int(ip)
        self.gateway_mac = gateway_mac
        self.rate_bps = rate_bps
        self.mtu_bytes = mtu_bytes
        self.dscp, self.ecn = dscp, ecn
        self.tx_delay_ns = int(tx_delay_ns)
        self.ack_every_n = ack_every_n
        max_frame_ns = (_HDR_LEN + 16 + mtu_bytes + 4 + WIRE_OVERHEAD_BYTES) * 8e9 / rate_bps
        self.rto_ns = int(rto_ns if rto_ns is not None
                          else max(20_000_000, 8 * ack_every_n * max_frame_ns))
        self.retry_cnt = retry_cnt
        self.min_rnr_timer = min_rnr_timer & 0x1F
        self.rnr_retry = rnr_retry
        self._rto_frames_bits = 8 * ack_every_n * (_HDR_LEN + 16 + mtu_bytes + 4
                                                   + WIRE_OVERHEAD_BYTES) * 8
        self.max_lag_ns = int(max_lag_ns if max_lag_ns is not None
                              else max(500_000, 4 * max_frame_ns))
        self.max_outstanding_pkts = min(max_outstanding_pkts, PSN_HALF - 1)
        self.verify_icrc = verify_icrc
        self.report_remote_writes = report_remote_writes
        self.priority, self.cnp_priority, self.cnp_dscp = priority, cnp_priority, cnp_dscp
        self.cnp_interval_ns = None if cnp_interval_ns is None else int(cnp_interval_ns)
        self.honor_pfc = honor_pfc
        if not isinstance(dcqcn, DcqcnParams):
            dcqcn = DcqcnParams.from_config(dcqcn) if dcqcn is not None \
                else DcqcnParams(enabled=False)
        self.dcqcn = dcqcn
        self.logs = logs
        self.stats = NicStats()
        self.on_ecn_ce: Callable[[QueuePair, roce.RocePacket], None] | None = None
        self.on_cnp: Callable[[QueuePair, roce.RocePacket], None] | None = None

        self._qps: dict[int, QueuePair] = {}
        self._qp_list: list[QueuePair] = []
        self._rr = 0
        self._mrs: dict[int, MemoryRegion] = {}
        self._next_rkey = 0x100
        self._next_addr = 0x10000000
        self._cq: deque[Completion] = deque()
        self._ctrl: deque = deque()          # (qp, psn24, syndrome, msn) ACK/NAKs to send
        self._cnpq: deque = deque()          # QPs owed a CNP
        # PFC: per priority, when the current/last pause started and ends (monotonic ns)
        self._pause_start = [0] * 8
        self._pause_until = [0.0] * 8
        self._paused_closed_ns = 0           # pause time of intervals already over
        self._dline: deque = deque()         # (release_ns, kind, qp, wqe|None, a, b) frames in flight
        self._ack_list: list[QueuePair] = []
        self._slot_free_ns = 0.0             # when the wire is free for the next frame
        self._wire_idle = True
        self._tx_blocked_until = 0
        self._rxbuf = bytearray(16384)
        self._rxmv = memoryview(self._rxbuf)
        self._udp_absorber = None
        self.last_rx_ns = 0                  # monotonic time of the last received frame

        if timer_slack_ns is not None:
            set_timer_slack_ns(timer_slack_ns)
        self._pfc_sock = None
        if sock is not None:
            self.sock = sock
        else:
            self.sock = self._open_packet_socket(ifname, rcvbuf_bytes, sndbuf_bytes, ETH_P_IP)
            if honor_pfc:
                try:
                    self._pfc_sock = self._open_packet_socket(ifname, 1 << 20, 1 << 16,
                                                              ETH_P_PAUSE)
                except BaseException:
                    self.sock.close()
                    raise
            if absorb_udp:
                self._udp_absorber = self._open_udp_absorber()
        self.sock.setblocking(False)
        self._fileno = self.sock.fileno()
        self._rx_socks = (self.sock,)
        self._rx_fds = (self._fileno,)
        if self._pfc_sock is not None:
            self._pfc_sock.setblocking(False)
            self._rx_socks = (self.sock, self._pfc_sock)
            self._rx_fds = (self._fileno, self._pfc_sock.fileno())

    # -- setup ---------------------------------------------------------------
    def _open_packet_socket(self, ifname, rcvbuf, sndbuf, proto):
        """An AF_PACKET socket on ``ifname`` bound to ethertype ``proto``.
        RoCE goes through an ETH_P_IP socket and PFC through a separate
        ETH_P_PAUSE one (not one ETH_P_ALL socket: ETH_P_ALL taps see frames
        before tc ingress, and would see our own frames where
        PACKET_IGNORE_OUTGOING is missing)."""
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            prog = rocev2_bpf(self.ip)
            cbuf = ctypes.create_string_buffer(prog)
            fprog = struct.pack("HL", len(prog) // 8, ctypes.addressof(cbuf))
            s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
            for opt, fallback, size in ((SO_RCVBUFFORCE, socket.SO_RCVBUF, rcvbuf),
                                        (SO_SNDBUFFORCE, socket.SO_SNDBUF, sndbuf)):
                try:
                    s.setsockopt(socket.SOL_SOCKET, opt, size)
                except OSError:
                    s.setsockopt(socket.SOL_SOCKET, fallback, size)
            try:
                s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            except OSError:
                pass  # < Linux 4.20: our own frames are then dropped by the dst-IP filter
            s.bind((ifname, proto))
        except BaseException:
            s.close()
            raise
        return s

    @staticmethod
    def _open_udp_absorber():
        """Bind UDP 4791 so that the kernel (if the interface has our IP)
        queues RoCE datagrams to a socket we never read, instead of answering
        each with an ICMP port-unreachable."""
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            u.bind(("0.0.0.0", roce.ROCEV2_UDP_PORT))
            return u
        except OSError:
            u.close()
            return None

    def poll_kernel_stats(self) -> None:
        """Add the kernel's count of frames the packet socket dropped (its
        receive buffer was full) to ``stats.rx_socket_drops``. Reading
        PACKET_STATISTICS resets the kernel counters."""
        if self.ifname is None or self.sock.fileno() < 0:
            return
        try:
            raw_stats = self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        except (OSError, AttributeError):
            return
        _packets, drops = struct.unpack("II", raw_stats)
        self.stats.rx_socket_drops += drops

    def close(self):
        self.poll_kernel_stats()
        self.update_pause_stats()
        for s in (self.sock, self._pfc_sock, self._udp_absorber):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass
        self._udp_absorber = None
        self._pfc_sock = None

    def update_pause_stats(self, now: int | None = None) -> int:
        """Bring ``stats.paused_ns`` (time our classes -- ``priority`` and
        ``cnp_priority`` -- were paused by PFC, summed over the two, up to
        ``now``) up to date; returns it."""
        now = _mono() if now is None else now
        total = self._paused_closed_ns
        for p in {self.priority, self.cnp_priority}:
            until = self._pause_until[p]
            start = self._pause_start[p]
            if until > start:
                total += int(min(until, now) - start) if now > start else 0
        self.stats.paused_ns = total
        return total

    def paused(self, priority: int, now: int | None = None) -> bool:
        """Is ``priority`` paused by PFC at ``now``?"""
        return (_mono() if now is None else now) < self._pause_until[priority]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

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
        if self._ctrl or self._dline or self._cnpq:
            return False
        return all(qp.snd_una >= qp.next_psn or qp.state != QpState.RTS for qp in self._qp_list)

    # -- event loop ----------------------------------------------------------
    def run_once(self, timeout_s: float = 0.0) -> None:
        """Process what is due; then wait up to ``timeout_s`` (less if a
        frame or timer is due sooner) for frames and process again."""
        now = _mono()
        self.stats.loops += 1
        self._rx_drain(now)
        self._timers(now)
        self._tx_service(now)
        now = _mono()
        wake = self._next_wake_ns(now, now + int(timeout_s * 1e9))
        if wake > now:
            try:
                r, _, _ = select.select(self._rx_fds, (), (), (wake - now) / 1e9)
            except InterruptedError:
                r = ()
            now = _mono()
            if r:
                self._rx_drain(now)
            self._timers(now)
            self._tx_service(now)

    def run_until(self, predicate: Callable[[], bool], timeout_s: float,
                  poll_s: float = 0.05) -> bool:
        """Run the loop until ``predicate()`` is true (-> True) or
        ``timeout_s`` seconds passed (-> False)."""
        end = _mono() + int(timeout_s * 1e9)
        while True:
            if predicate():
                return True
            left = end - _mono()
            if left <= 0:
                return False
            self.run_once(min(poll_s, left / 1e9))

    def _next_wake_ns(self, now: int, limit: int) -> int:
        wake = limit
        data_resume = self._pause_until[self.priority]
        if self._cnpq:
            wake = min(wake, max(self._slot_free_ns, self._tx_blocked_until,
                                 self._pause_until[self.cnp_priority]))
        if self._ctrl:
            wake = min(wake, max(self._slot_free_ns, self._tx_blocked_until, data_resume))
        if self._dline:
            wake = min(wake, max(self._dline[0][0], self._tx_blocked_until))
        for qp in self._qp_list:
            if qp.rto_deadline_ns and qp.rto_deadline_ns < wake:
                wake = qp.rto_deadline_ns
            if (qp.snd_nxt < qp.next_psn and qp.state == QpState.RTS
                    and qp.snd_nxt - qp.snd_una < self.max_outstanding_pkts):
                t = max(self._slot_free_ns, qp.next_ok_ns, qp.paused_until_ns,
                        self._tx_blocked_until, data_resume)
                if t < wake:
                    wake = t
        return int(wake) + 1 if wake > now else now

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
            else:
                st.rx_bad_requests += 1
        return n_batch

    def _rx_mac_control(self, frame) -> None:
        """An 802.1Qbb PFC frame: pause (or resume) the enabled priorities."""
        st = self.stats
        if (frame[0:6] != PFC_DST_MAC or frame[14] != 0x01 or frame[15] != 0x01
                or not self.honor_pfc):
            st.rx_ignored += 1
            return
        st.pfc_rx += 1
        now = _mono()
        enable = frame[17]                   # class-enable vector: e[7..0] in the low byte
        times = struct.unpack_from("!8H", frame, 18)
        ns_per_quantum = PFC_QUANTUM_BITS * 1e9 / self.rate_bps
        logs = self.logs
        for p in range(8):
            if not enable >> p & 1:
                continue
            q = times[p]
            if logs is not None:
                logs.pfc(now, p, q)
            until = self._pause_until[p]
            if until <= now:                 # not paused: a new pause interval
                if until > self._pause_start[p] and (p == self.priority
                                                     or p == self.cnp_priority):
                    self._paused_closed_ns += int(until - self._pause_start[p])
                self._pause_start[p] = now
            self._pause_until[p] = now + q * ns_per_quantum

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
            self._acked_through(qp, p + 1, now)
            return
        # NAKs: PSN is the one the responder expects
        if d >= PSN_HALF:
            return
        p = qp.snd_una + d
        if p > qp.snd_max:
            return
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
            if w.signaled:
                if not unix:
                    unix = time.time_ns()
                self._cq.append(Completion(
                    w.wr_id, qp.qpn, WcOpcode.RDMA_WRITE if w.is_write else WcOpcode.SEND,
                    WcStatus.SUCCESS, w.length, w.post_ns, now, w.post_unix_ns, unix,
                    remote_addr=w.remote_addr if w.is_write else None,
                    rkey=w.rkey if w.is_write else None))
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
                w.wr_id, qp.qpn, WcOpcode.RDMA_WRITE if w.is_write else WcOpcode.SEND,
                status if first else WcStatus.WR_FLUSH_ERR, 0, w.post_ns, now,
                w.post_unix_ns, unix))
            self.stats.completions += 1
            first = False
        qp.cur_idx = 0
        qp.snd_nxt = qp.snd_una = qp.snd_max = qp.next_psn

    # -- timers -----------------------------------------------------------------
    def _timers(self, now: int) -> None:
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

    # -- transmit ---------------------------------------------------------------
    def _pick_data(self, slot: float):
        """Round-robin: the next QP allowed to send at ``slot``, or None."""
        qps = self._qp_list
        n = len(qps)
        start = self._rr
        for i in range(n):
            j = start + i
            if j >= n:
                j -= n
            qp = qps[j]
            if (qp.snd_nxt < qp.next_psn and qp.state == QpState.RTS
                    and qp.next_ok_ns <= slot and qp.paused_until_ns <= slot
                    and qp.snd_nxt - qp.snd_una < self.max_outstanding_pkts):
                self._rr = j + 1 if j + 1 < n else 0
                return qp
        return None

    def _tx_service(self, now: int) -> None:
        if now < self._tx_blocked_until:
            return
        st = self.stats
        dline = self._dline
        ctrl = self._ctrl
        cnpq = self._cnpq
        delay = self.tx_delay_ns
        mtu = self.mtu_bytes
        rate = self.rate_bps
        pause_until = self._pause_until
        prio, cnp_prio = self.priority, self.cnp_priority
        for _ in range(self.TX_BURST):
            # frames whose propagation delay has passed leave now
            while dline and dline[0][0] <= now:
                if not self._emit(dline[0], now):
                    return
                dline.popleft()
            # serialize the next frame if its slot has come
            slot = self._slot_free_ns
            if self._wire_idle or slot < now - self.max_lag_ns:
                slot = max(slot, float(now - (0 if self._wire_idle else self.max_lag_ns)))
            if slot > now:
                return
            # strict priority (CNP, then ACK/NAK, then data), skipping paused
            # classes; a frame of a class that was paused starts no earlier
            # than the pause's end
            data_ok = now >= pause_until[prio]
            if cnpq and now >= pause_until[cnp_prio]:
                qp = cnpq.popleft()
                if slot < pause_until[cnp_prio]:
                    slot = pause_until[cnp_prio]
                flen = _CNP_FRAME_LEN
                desc = (slot + delay, 2, qp, None, 0, 0)
            elif ctrl and data_ok:
                qp, psn, syn, msn = ctrl.popleft()
                if slot < pause_until[prio]:
                    slot = pause_until[prio]
                flen = _ACK_FRAME_LEN
                desc = (slot + delay, 1, qp, None, psn, (syn << 24) | msn)
            else:
                if data_ok:
                    if slot < pause_until[prio]:
                        slot = pause_until[prio]
                    qp = self._pick_data(slot)
                else:
                    qp = None
                if qp is None:
                    self._wire_idle = True
                    return
                w = qp.sq[qp.cur_idx]
                k = qp.snd_nxt - w.first_psn
                plen = w.length - k * mtu
                if plen > mtu:
                    plen = mtu
                flen = _HDR_LEN + (16 if (w.is_write and k == 0) else 0) + plen + (-plen & 3) + 4
                desc = (slot + delay, 0, qp, w, k, qp.snd_nxt)
                if qp.snd_nxt < qp.snd_max:
                    st.tx_retransmits += 1
                qp.snd_nxt += 1
                if qp.snd_nxt > qp.snd_max:
                    qp.snd_max = qp.snd_nxt
                if k + 1 >= w.npkts:
                    qp.cur_idx += 1
                if qp.rate_bps:
                    qp.next_ok_ns = max(qp.next_ok_ns, slot) + \
                        (flen + WIRE_OVERHEAD_BYTES) * 8e9 / qp.rate_bps
                qp.last_tx_slot = slot
                qp.last_tx_flen = flen
                cc = qp.cc
                if cc is not None and cc.active:
                    cc.on_tx(flen, int(slot))
            self._wire_idle = False
            lag = now - slot
            if lag > st.tx_lag_max_ns:
                st.tx_lag_max_ns = int(lag)
            st.tx_lag_sum_ns += int(lag)
            self._slot_free_ns = slot + (flen + WIRE_OVERHEAD_BYTES) * 8e9 / rate
            if delay <= 0 and not dline:
                if not self._emit(desc, now):
                    dline.appendleft(desc)
                    return
            else:
                dline.append(desc)

    def _emit(self, desc, now: int) -> bool:
        """Build and send one frame; False (and nothing changed) if the
        socket has no room (retried in 100 us)."""
        _, kind, qp, w, a, b = desc
        st = self.stats
        if kind == 0:
            k, psn = a, b
            n = w.npkts
            mtu = self.mtu_bytes
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
            ack_req = k == n - 1 or (psn + 1) % self.ack_every_n == 0
            reth = (w.remote_addr, w.rkey, w.length) if (w.is_write and k == 0) else None
            frame = qp.tpl.build(op, psn, w.buf[off:end], ack_req=ack_req, reth=reth)
        elif kind == 1:
            frame = qp.tpl.build(RC_ACK, a, aeth=(b >> 24, b & PSN_MASK))
        else:
            tpl = qp.cnp_tpl
            if tpl is None:
                tpl = qp.cnp_tpl = FrameTemplate(
                    self.mac, qp.tpl_dst_mac, self.ip, qp.remote_ip, qp.udp_sport, qp.remote_qpn,
                    dscp=self.cnp_dscp, ecn=ECN_NOT_ECT, max_payload_bytes=len(_CNP_PAD))
            frame = tpl.build(CNP_OPCODE, 0, _CNP_PAD, becn=True)
        try:
            self.sock.send(frame)
        except (BlockingIOError, InterruptedError):
            st.tx_enobufs += 1
            self._tx_blocked_until = now + 100_000
            return False
        except OSError as e:
            if e.errno in (errno.ENOBUFS, errno.EAGAIN):
                st.tx_enobufs += 1
                self._tx_blocked_until = now + 100_000
                return False
            raise
        st.tx_packets += 1
        st.tx_bytes += len(frame)
        if kind == 0:
            st.tx_data_packets += 1
            st.tx_data_payload_bytes += end - off
            if not qp.rto_deadline_ns:
                qp.rto_deadline_ns = now + self._rto_for(qp)
        elif kind == 2:
            st.cnp_tx += 1
            if self.logs is not None:
                self.logs.cnp(now, qp.qpn, qp.remote_qpn, "tx")
        elif (b >> 24) == AETH_ACK_SYNDROME:
            st.tx_acks += 1
        return True
