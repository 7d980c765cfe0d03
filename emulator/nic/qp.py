"""Verbs-level objects of the software RoCEv2 NIC (``nic.RoceNic``): the
work-completion enums (values follow libibverbs), the QP state, the RNR timer
table, registered memory (``MemoryRegion``), completions (``Completion``),
send/receive work requests and the RC ``QueuePair`` with its requester and
responder state. The NIC's behaviour is documented in ``nic``."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import IntEnum

from . import roce
from .dcqcn import Dcqcn
from .roce import PSN_MASK, FrameTemplate, ip_to_int

# ---------------------------------------------------------------------------
# Verbs-like enums (values follow libibverbs' ibv_wc_opcode / ibv_wc_status)
# ---------------------------------------------------------------------------


class WcOpcode(IntEnum):
    SEND = 0
    RDMA_WRITE = 1
    RDMA_READ = 2
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


# IBA table 45: RNR NAK timer field -> minimum delay (microseconds; fabric
# time: the requester waits it x its NIC's dilation)
RNR_TIMER_US = (655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
                2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
                163840, 245760, 327680, 491520)

_OPS_WRITE = (roce.RC_WRITE_FIRST, roce.RC_WRITE_MIDDLE, roce.RC_WRITE_LAST, roce.RC_WRITE_ONLY)
_OPS_SEND = (roce.RC_SEND_FIRST, roce.RC_SEND_MIDDLE, roce.RC_SEND_LAST, roce.RC_SEND_ONLY)


# ---------------------------------------------------------------------------
# Objects
# ---------------------------------------------------------------------------
class MemoryRegion:
    """Registered memory: ``buf`` holds bytes [addr, addr + size_bytes)."""

    __slots__ = ("addr", "rkey", "size_bytes", "buf", "mv", "read_latency_ns")

    def __init__(self, addr: int, rkey: int, buf: bytearray):
        self.addr, self.rkey, self.buf = addr, rkey, buf
        self.size_bytes = len(buf)
        self.mv = memoryview(buf)
        self.read_latency_ns = 0    # responder: READ responses start this long after the request

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
                 "first_psn", "npkts", "post_ns", "post_unix_ns", "signaled",
                 "is_read", "rd_got")     # READ: responses received in order so far


class _RecvWqe:
    __slots__ = ("wr_id", "buf", "size", "post_ns", "post_unix_ns")


class QueuePair:
    """An RC QP: the per-flow record the NIC's parts share (htsim's per-flow
    state). Each group of fields below has one writer, named in its comment;
    others only read it. Sender PSNs are kept unwrapped (Python ints)
    internally and masked to 24 bits on the wire."""

    def __init__(self, qpn: int, remote_ip: str, remote_qpn: int, udp_sport: int,
                 sq_psn: int, rq_psn: int, rate_bps: int | None, dst_mac: str,
                 tpl: FrameTemplate, mtu_bytes: int):
        self.mtu_bytes = mtu_bytes
        self.qpn = qpn
        self.remote_ip = remote_ip
        self.remote_ip_int = ip_to_int(remote_ip)
        self.remote_qpn = remote_qpn
        self.udp_sport = udp_sport
        self.cap_bps = rate_bps         # configured cap (DCQCN's line rate for this QP)
        self.cc: Dcqcn | None = None    # reaction point: DCQCN state (None: disabled)
        self.state = QpState.RTS        # requester (fail)
        self.tpl = tpl                  # transmitter: frame template (P_Key set by the NIC)
        self.cnp_tpl: FrameTemplate | None = None   # transmitter: built at our first CNP
        self.tpl_dst_mac = dst_mac
        # transmitter: what the pacer enforces (None = line rate), rate limiter,
        # slot and length of the last data frame
        self.rate_bps = rate_bps
        self.window_pkts = 1 << 30          # reaction point (HPCC): packets in flight at most
        self.next_ok_ns = 0.0
        self.last_tx_slot = None
        self.last_tx_flen = 0
        # requester
        self.sq: deque[_SendWqe] = deque()
        self.next_psn = sq_psn & PSN_MASK   # next PSN to allocate
        self.snd_una = self.next_psn        # oldest unacknowledged
        self.snd_nxt = self.next_psn        # next to serialize
        self.snd_max = self.next_psn        # highest serialized + 1
        self.cur_idx = 0                    # index in sq of the WQE holding snd_nxt
        self.rto_deadline_ns = 0            # 0 = timer not armed
        self.rto_held_ns = 0.0              # PFC-held time of the data class, as of the deadline
        self.ackreq_max = self.next_psn     # responses are owed for PSNs below (AckReq, READ)
        self.retries = 0
        self.busy = False                   # requester: in Requester.busy
        # counters of this QP's sending side: packets sent again (go-back-N),
        # ACK timeouts that expired, NAKs received (any kind)
        self.retransmits = 0
        self.timeouts = 0
        self.naks = 0
        self.rnr_retries = 0
        self.paused_until_ns = 0            # RNR back-off: no data before this
        # responder
        self.epsn = rq_psn & PSN_MASK       # expected PSN (unwrapped)
        self.msn = 0
        self.nak_sent = False
        self.dup_acked = False
        self.ack_pending = False
        self.rq: deque[_RecvWqe] = deque()
        # INT sink (nic): (max_hops, packed records) of the last collecting
        # stack received, echoed in our ACKs; None: none received
        self.int_echo: tuple[int, bytes] | None = None
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
        # RDMA READ (read): requester READ WQEs in sq, the expected PSN we
        # last went back to on a response gap; responder jobs still to answer
        self.n_reads = 0
        self.rd_gap_psn = -1
        self.rd_jobs: deque = deque()
        self.rd_max = self.epsn             # responder: highest READ response PSN sent + 1
        # per-packet CPU work (dpu.Endpoint sets the costs): ns per packet
        # sent / received, ns per payload byte; host_cpu.CpuGate: when the
        # last received packet's work ends
        self.cpu_tx_ns = 0.0
        self.cpu_rx_ns = 0.0
        self.cpu_ns_per_byte = 0.0
        self.cpu_rx_done = 0.0
        # transmitter: data frames (incl. retransmissions) this QP put on the
        # wire: how many packets a flow sent, e.g. into another tenant's filter
        self.tx_data_packets = 0

    # -- introspection -------------------------------------------------------
    def outstanding_pkts(self) -> int:
        return self.snd_max - self.snd_una

    def has_tx_data(self) -> bool:
        return self.snd_nxt < self.next_psn and self.state == QpState.RTS

    def send_progress(self) -> dict[int, int]:
        """wr_id -> bytes acknowledged so far, for WQEs not yet completed."""
        mtu = self.mtu_bytes
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
