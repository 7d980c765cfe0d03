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

Code layout: ``qp`` (enums, QueuePair, Completion, MemoryRegion),
``packet_socket`` (sockets, BPF, PFC constants), ``nic_verbs`` (verbs API),
``nic_rx`` (receive path, responder), ``nic_requester`` (ACK/NAK handling,
timers), ``nic_tx`` (PFC pause state, pacer, frame emission), ``nic_read``
(RDMA READ: verb, responder, requester), ``host_cpu`` (per-packet CPU work
and the receive-side tenant filter, off by default); ``RoceNic`` here
composes them. ``dpu`` (DPU/plain-NIC endpoint, storage target) and
``gpudirect`` (staging copies) configure or wrap a ``RoceNic``. Their names are re-exported from this module.

Times are ``time.monotonic_ns()``; completions also carry wall-clock
``time.time_ns()`` values (``*_unix_ns``).
"""
from __future__ import annotations

import select
import time
from collections import deque
from typing import Callable

from . import roce
from .dcqcn import Dcqcn, DcqcnParams  # noqa: F401  (re-exported)
from .host_cpu import PacketCpuMixin
from .nic_read import ReadMixin
from .nic_requester import RequesterMixin
from .nic_rx import _REQ, ReceivePathMixin  # noqa: F401
from .nic_tx import (  # noqa: F401
    _ACK_FRAME_LEN, _CNP_FRAME_LEN, _CNP_PAD, _HDR_LEN, TransmitPacerMixin,
)
from .nic_verbs import VerbsMixin
from .packet_socket import (  # noqa: F401
    ETH_P_IP, ETH_P_PAUSE, PACKET_IGNORE_OUTGOING, PACKET_STATISTICS, PFC_DST_MAC, PFC_OPCODE,
    PFC_QUANTUM_BITS, PR_SET_TIMERSLACK, SO_ATTACH_FILTER, SO_RCVBUFFORCE, SO_SNDBUFFORCE,
    SOL_PACKET, PacketSocketMixin, _bpf_assemble, rocev2_bpf, set_timer_slack_ns,
)
from .qp import (  # noqa: F401
    _OPS_SEND, _OPS_WRITE, RNR_TIMER_US, Completion, MemoryRegion, QpState, QueuePair, WcOpcode,
    WcStatus, _RecvWqe, _SendWqe,
)
from .roce import (  # noqa: F401
    AETH_ACK, AETH_ACK_SYNDROME, AETH_RNR_NAK, AETH_TYPE_MASK, CNP_OPCODE, ECN_CE,
    ECN_ECT0, ECN_NOT_ECT, NAK_INVALID_REQUEST, NAK_PSN_SEQ_ERR, NAK_REMOTE_ACCESS_ERR,
    NAK_REMOTE_OP_ERR,
    PSN_HALF, PSN_MASK, RC_ACK, WIRE_OVERHEAD_BYTES, FrameTemplate, ip_to_int, parse_roce,
    verify_icrc,
)

_mono = time.monotonic_ns


class NicStats:
    __slots__ = ("tx_packets", "tx_bytes", "tx_data_packets", "tx_data_payload_bytes",
                 "tx_acks", "tx_naks", "tx_rnr_naks", "tx_retransmits", "tx_enobufs",
                 "tx_lag_max_ns", "tx_lag_sum_ns",
                 "rx_packets", "rx_bytes", "rx_data_packets", "rx_data_payload_bytes",
                 "rx_acks", "rx_naks", "rx_rnr_naks",
                 "cnp_tx", "cnp_rx", "ecn_ce_rx", "pfc_rx", "paused_ns", "rate_changes",
                 "rx_out_of_order", "rx_duplicates", "rx_icrc_errors", "rx_ignored",
                 "rx_bad_requests", "timeouts", "nak_rewinds", "completions", "loops",
                 "rx_batches_max", "rx_socket_drops",
                 "tx_read_requests", "tx_read_responses", "rx_read_requests",
                 "rx_read_responses", "read_rewinds", "tenant_drops", "cpu_rx_drops")

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
class RoceNic(VerbsMixin, ReadMixin, ReceivePathMixin, RequesterMixin, TransmitPacerMixin,
              PacketCpuMixin, PacketSocketMixin):
    """A software RoCEv2 RNIC on one interface. Not thread-safe. The verbs,
    receive path/responder, requester, pacer and socket setup live in the
    mixins (``nic_verbs``, ``nic_rx``, ``nic_requester``, ``nic_tx``,
    ``packet_socket``); this class holds the state and the event loop."""

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
        # RDMA READ (nic_read): QPs with READ responses to send
        self._rd_qps: deque[QueuePair] = deque()
        # BTH P_Key of our frames (dpu: a tenant's partition; 0xFFFF: default);
        # receive-side partition filter and per-packet CPU work (host_cpu):
        # all None / empty unless configured, so they cost nothing per packet
        self.pkey = 0xFFFF
        self.rx_partition: int | None = None
        self.filter_ns = 0.0
        self._filter_cpu = None
        self._pkt_cpu = None
        self._cpu_tx_ready_ns = 0.0
        self._cpu_rxq: list = []
        self._rx_hook = None
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

    # -- teardown ------------------------------------------------------------
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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- event loop ----------------------------------------------------------
    @property
    def rx_fds(self) -> tuple[int, ...]:
        """File descriptors to wait on for frames (an outer loop driving
        several NICs selects on all of them, then calls ``run_once(0)``)."""
        return self._rx_fds

    def next_wake_ns(self, now: int, limit: int) -> int:
        """Monotonic time by which ``run_once`` must run again (timers,
        paced frames, pause expiry), at most ``limit``."""
        return self._next_wake_ns(now, limit)

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
