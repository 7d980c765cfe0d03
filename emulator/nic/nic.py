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
  after its serialization ends (``emulator.link.Wire``, the switch's link
  model: ``tx_delay_ns`` is the host link's propagation delay). CNPs, then
  ACK/NAKs, get the next slot before data; data QPs share the rest
  round-robin, one frame at a time.

Reliability (RC, go-back-N, as ConnectX/rxe do it):

* requester: messages are cut into ``mtu_bytes`` packets (FIRST/MIDDLE/
  LAST or ONLY; RETH on WRITE FIRST/ONLY), each with the next 24-bit PSN.
  AckReq is set on the last packet of a message and on every packet whose
  PSN+1 is a multiple of ``ack_every_n``. Packets are not stored: they are
  rebuilt from the message buffer when (re)sent. An ACK for PSN p completes
  every message whose packets are all <= p. A NAK (PSN sequence error) for
  p acknowledges < p and restarts sending at p. With no ACK progress for
  ``rto_ns`` while a response is owed (the timer starts when a packet with
  AckReq, or a READ request, leaves the wire: packets without AckReq are
  owed nothing until the next one that has it, so a sender slower than its
  link does not time out between two), sending restarts at the oldest
  unacknowledged PSN; the timeout doubles with each consecutive expiry (up
  to 8 x ``rto_ns``, like ConnectX's adaptive retransmission) and after
  ``retry_cnt`` consecutive timeouts the QP fails (completions with
  RETRY_EXC_ERR / WR_FLUSH_ERR).
  An RNR NAK pauses the QP for the time its timer code says, then resends
  from the NAK'd PSN. Per QP, ``retransmits``, ``timeouts`` and ``naks``
  count what its sending side went through.
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
  ``logs.pfc``. Time our data class is paused does not count against an
  ACK timeout: the deadline moves out by as much (``Requester.timers``; no
  retry is counted). A QP paced below the link rate gets a longer ACK
  timeout (see ``Requester.rto_for``).
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
  ``pfc(t_ns, priority, quanta)`` (``run_logs.RunLogs``), or None.

Code layout (htsim style: small parts that hand frames on, time owned by
the caller and passed in as ``now``): ``qp`` (enums, QueuePair -- the per-QP
record the parts share, each field with one writer -- Completion,
MemoryRegion), ``frames`` (the named frames of the transmit queues),
``requester`` (WQEs, ACK/NAKs, go-back-N, ACK timeouts), ``responder`` (PSN
check, placement, coalesced ACK/NAKs), ``read`` (RDMA READ, both sides),
``transmitter`` (pacer + ``link.Wire``), ``pfc`` (pause reception),
``notification`` / ``reaction`` (DCQCN's CNP generation and per-QP rate
control), ``host_cpu`` (CPU gate and tenant filter, off by default),
``packet_socket`` (AF_PACKET sockets, BPF). ``RoceNic`` here owns and wires
them: it demultiplexes received frames to them, runs the event loop and
keeps the verbs API. ``dpu`` (DPU/plain-NIC endpoint, storage target) and
``gpudirect`` (staging copies) configure or wrap a ``RoceNic``.

Time: the ``clock`` given to ``RoceNic`` (``emulator.clock``; default the
real ``MONOTONIC``, tests a ``ManualClock``): ``*_ns`` values are its
``now_ns()``, completions' ``*_unix_ns`` its ``unix_ns()``; the event loop
waits through ``clock.wait_readable``. Under time dilation D the clock runs
D times fabric time: every ``*_ns`` argument is clock time (the runner
multiplied the fabric value by D), and the time values the NIC takes from
the protocol itself -- the default ACK timeout
(``requester.DEFAULT_RTO_FABRIC_NS``) and the RNR timer codes on the wire --
are fabric time, which the NIC multiplies by its ``dilation``.
"""
from __future__ import annotations

import dataclasses
import fcntl
import struct
from collections import deque
from typing import Callable, Sequence

from emulator import int_md
from emulator.clock import MONOTONIC, MonotonicClock
from emulator.link import CommitWire, lateness_bucket
from emulator.wire import (CNP_PAD_BYTES, ETH_P_ALL, ETH_P_IP, ETH_P_PAUSE, RETH_BYTES,
                           ROCE_FRAMING)

from . import roce
from .dcqcn import Dcqcn, DcqcnParams  # noqa: F401  (re-exported)
from .host_cpu import CpuGate, CpuServers, TenantFilter
from .nic_stats import NicStats  # noqa: F401  (re-exported)
from .notification import NotificationPoint
from .packet_socket import (
    SocketRxStats, open_packet_socket, open_udp_absorber, set_timer_slack_ns,
)
from .pfc import PfcReceiver
from .qp import (  # noqa: F401  (re-exported)
    RNR_TIMER_US, Completion, MemoryRegion, QpState, QueuePair, WcOpcode, WcStatus, _RecvWqe,
)
from .reaction import ReactionPoint
from .read import READ_OPS, ReadRequester, ReadResponder
from .requester import DEFAULT_RTO_FABRIC_NS, Requester
from .responder import REQUEST_OPS, Responder
from .roce import (  # noqa: F401  (re-exported)
    AETH_ACK, AETH_TYPE_MASK, CNP_OPCODE, ECN_CE, ECN_ECT0, ECN_NOT_ECT, PSN_HALF, PSN_MASK,
    RC_ACK, RC_READ_REQUEST, FrameTemplate, ip_to_int, parse_roce, verify_icrc,
)
from .transmitter import Transmitter

SIOCGSTAMPNS = 0x8907                 # linux/sockios.h: last frame's receive stamp
_STAMP = struct.Struct("qq")         # struct timespec
_STAMP_BUF = bytes(_STAMP.size)
_DATA_OPS = frozenset(REQUEST_OPS) | READ_OPS    # what per-packet CPU work applies to
_INT_DPORT_HI, _INT_DPORT_LO = int_md.INT_UDP_DPORT >> 8, int_md.INT_UDP_DPORT & 0xFF
_INT_MIN_FRAME = int_md.INT_OFFSET + int_md.INT_SHIM_BYTES


# ---------------------------------------------------------------------------
# The NIC
# ---------------------------------------------------------------------------
class RoceNic:
    """A software RoCEv2 RNIC on one interface. Not thread-safe. Owns the
    parts (see the module docstring), demultiplexes received frames to them
    and runs the event loop."""

    RX_BATCH = 256     # frames drained per wakeup at most
    FRAMING = ROCE_FRAMING   # the link layer's frame sizes (ib.nic.IbNic: InfiniBand's)

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
                 dcqcn: DcqcnParams | dict | None = None, logs=None, clock=MONOTONIC,
                 dilation: float = 1.0, int_max_hops: int = 0):
        """``rto_ns``: the ACK timeout on the clock; default (None):
        ``DEFAULT_RTO_FABRIC_NS`` (320 us of fabric time, IRN's RTO_high;
        why, in ``requester``) x ``dilation``: long against the queueing and
        pause delays of a fabric, so that only a real loss times out, and
        the same fabric time whatever the dilation. ``retry_cnt``:
        consecutive timeouts before the QP fails. ``rnr_retry``: consecutive
        RNR NAKs before it fails (None: forever, like IBA's 7).
        ``min_rnr_timer``: the RNR timer code (IBA table 45) our RNR NAKs
        carry; 14 = 1.28 ms of fabric time. ``max_lag_ns`` (default
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
        rate. ``logs``: see the module docstring. ``clock``: where every
        part gets its time (``emulator.clock``). ``dilation``: clock ns per
        fabric ns (the experiment's D; 1: the clock is fabric time).
        ``int_max_hops``: > 0 makes this NIC an INT source (``emulator.int_md``):
        its data frames carry that many empty records for the switches to
        fill, and its frame sizes count them (its ACKs echo as many); the
        records that come back in ACKs go to the reaction point (HPCC's,
        ``nic.hpcc``). Any NIC is an INT sink: a data frame's records
        go back in the QP's ACKs."""
        if rate_bps <= 0 or mtu_bytes < 256 or mtu_bytes > 9000 or mtu_bytes % 4:
            raise ValueError("rate_bps must be > 0 and mtu_bytes a multiple of 4 in 256..9000")
        if ack_every_n < 1:
            raise ValueError("ack_every_n must be >= 1")
        if not (0 <= priority < 8 and 0 <= cnp_priority < 8 and 0 <= cnp_dscp < 64):
            raise ValueError("priorities must be 0..7 and cnp_dscp 0..63")
        if not dilation >= 1:
            raise ValueError("dilation must be >= 1")
        self.clock = clock
        self.dilation = dilation
        self.ifname, self.mac, self.ip = ifname, mac, ip
        self.ip_int = ip_to_int(ip)
        self.gateway_mac = gateway_mac
        self.rate_bps = rate_bps
        self.mtu_bytes = mtu_bytes
        self.dscp, self.ecn = dscp, ecn
        self.tx_delay_ns = int(tx_delay_ns)
        self.ack_every_n = ack_every_n
        framing = self.FRAMING
        if not 0 <= int_max_hops <= int_md.INT_MAX_HOPS:
            raise ValueError(f"int_max_hops must be 0..{int_md.INT_MAX_HOPS}")
        self.int_max_hops = int_max_hops
        if int_max_hops:
            framing = dataclasses.replace(
                framing, hdr_bytes=framing.hdr_bytes + int_md.int_bytes(int_max_hops))
        max_frame_ns = (framing.frame_bytes(RETH_BYTES, mtu_bytes)
                        + framing.wire_overhead_bytes) * 8e9 / rate_bps
        self.rto_ns = int(rto_ns if rto_ns is not None else DEFAULT_RTO_FABRIC_NS * dilation)
        self.retry_cnt = retry_cnt
        # virtual time (emulator.vtime): never late, so no catch-up window
        self.virtual = hasattr(clock, "attach_port")
        self.max_lag_ns = 0 if self.virtual else int(
            max_lag_ns if max_lag_ns is not None else max(500_000, 4 * max_frame_ns))
        self.verify_icrc = verify_icrc
        self.priority, self.cnp_priority, self.cnp_dscp = priority, cnp_priority, cnp_dscp
        self.honor_pfc = honor_pfc
        if dcqcn is None:
            dcqcn = DcqcnParams(enabled=False)
        elif isinstance(dcqcn, dict):
            dcqcn = DcqcnParams.from_config(dcqcn)
        self.dcqcn = dcqcn          # the reaction point's params: DCQCN's (or IB CC's, ib.nic)
        self.logs = logs
        self.stats = st = NicStats()
        self.on_ecn_ce: Callable[[QueuePair, roce.RocePacket], None] | None = None
        self.on_cnp: Callable[[QueuePair, roce.RocePacket], None] | None = None
        # BTH P_Key of our frames (dpu: a tenant's partition; 0xFFFF: default)
        self.pkey = 0xFFFF
        self.last_rx_ns = 0                  # clock time of the last received frame

        self._qps: dict[int, QueuePair] = {}
        self._mrs: dict[int, MemoryRegion] = {}
        self._next_rkey = 0x100
        self._next_addr = 0x10000000
        self._cq: deque[Completion] = deque()

        # -- the parts ---------------------------------------------------------
        unix_ns = clock.unix_ns
        max_out = min(max_outstanding_pkts, PSN_HALF - 1)
        self.pfc = PfcReceiver(rate_bps, (priority, cnp_priority), honor=honor_pfc, logs=logs)
        self.requester = Requester(
            link_rate_bps=rate_bps, mtu_bytes=mtu_bytes, ack_every_n=ack_every_n,
            rto_ns=self.rto_ns, retry_cnt=retry_cnt, rnr_retry=rnr_retry,
            max_outstanding_pkts=max_out, cq=self._cq, stats=st, unix_ns=unix_ns,
            dilation=dilation, hold=self.pfc.hold(priority), framing=framing)
        self.responder = Responder(
            mrs=self._mrs, mtu_bytes=mtu_bytes, min_rnr_timer=min_rnr_timer,
            report_remote_writes=report_remote_writes, cq=self._cq, stats=st, unix_ns=unix_ns)
        self.read_responder = ReadResponder(self.responder, self._mrs, mtu_bytes, st, framing)
        self.read_requester = ReadRequester(self.requester, mtu_bytes, st)
        self.notification = NotificationPoint(cnp_interval_ns)
        self.cnp_interval_ns = self.notification.interval_ns
        self.reaction = ReactionPoint(dcqcn, self._on_rate_change, logs, max_window_pkts=max_out)
        self.cpu_gate: CpuGate | None = None          # host_cpu: off unless configured
        self.tenant_filter: TenantFilter | None = None
        self._rx_hook = None

        if timer_slack_ns is not None:
            set_timer_slack_ns(timer_slack_ns)
        self._pfc_sock = None
        self._udp_absorber = None
        if sock is not None:
            self.sock = sock
        else:
            self._open_sockets(rcvbuf_bytes, sndbuf_bytes, absorb_udp)
        self.sock.setblocking(False)
        self._rx_socks = (self.sock,)
        self._rx_fds = (self.sock.fileno(),)
        if self._pfc_sock is not None:
            self._pfc_sock.setblocking(False)
            self._rx_socks = (self.sock, self._pfc_sock)
            self._rx_fds = (self.sock.fileno(), self._pfc_sock.fileno())
        self._rx_sock_of = {sock.fileno(): sock for sock in self._rx_socks}
        # the kernel's drop counters of the packet sockets opened here (a
        # test's ``sock`` has none)
        self._rx_kernel = tuple(SocketRxStats(s) for s in self._rx_socks) if sock is None else ()
        self._rxbuf = bytearray(16384)
        self._rxmv = memoryview(self._rxbuf)
        # receive lateness (run fidelity): how long the first frame of each
        # wake-up waited in the socket before this process read it -- the
        # kernel's receive stamp (SIOCGSTAMPNS, realtime) against now. Only
        # on the real clock: a manual clock's time is not the kernel's.
        self._rx_stamp = isinstance(clock, MonotonicClock)

        self.transmitter = Transmitter(
            sock=self.sock, rate_bps=rate_bps, mtu_bytes=mtu_bytes, ack_every_n=ack_every_n,
            max_lag_ns=self.max_lag_ns, tx_delay_ns=self.tx_delay_ns, priority=priority,
            cnp_priority=cnp_priority, max_outstanding_pkts=max_out,
            pause_until_ns=self.pfc.until_ns, requester=self.requester,
            read_responder=self.read_responder, cnp_queue=self.notification.out,
            ack_queue=self.responder.out, stats=st, logs=logs, framing=framing,
            credit=self._link_credit())
        self.transmitter.cnp_template = self._cnp_template
        self.transmitter.int_max_hops = int_max_hops
        if dcqcn.enabled:
            self.transmitter.on_data_tx = self.reaction.on_tx
        if self.virtual:           # a frame leaves when committed, stamped with its arrival
            self.transmitter.wire = CommitWire(self.tx_delay_ns, self._send_committed)

    def _send_committed(self, f, arrival_ns) -> None:
        self.sock.due_ns = arrival_ns
        self.transmitter._send(f)

    def _open_sockets(self, rcvbuf_bytes: int, sndbuf_bytes: int, absorb_udp: bool) -> None:
        """RoCE on an ETH_P_IP socket, PFC on an ETH_P_PAUSE one (if honored).
        Virtual time: one socket for every frame, unfiltered, as the clock's
        port -- it must read every frame sent to it (``_rx_frame`` counts
        what is not ours), or the window waits for it."""
        ifname, ip = self.ifname, self.ip
        if self.virtual:
            sock = open_packet_socket(ifname, None, max(rcvbuf_bytes, 16 << 20), sndbuf_bytes,
                                      ETH_P_ALL)
            self.sock = self.clock.attach_port(sock, ifname)
        else:
            self.sock = open_packet_socket(ifname, ip, rcvbuf_bytes, sndbuf_bytes, ETH_P_IP)
        if self.honor_pfc and not self.virtual:
            try:
                self._pfc_sock = open_packet_socket(ifname, ip, 1 << 20, 1 << 16, ETH_P_PAUSE)
            except BaseException:
                self.sock.close()
                raise
        if absorb_udp:
            self._udp_absorber = (open_udp_absorber(), open_udp_absorber(int_md.INT_UDP_DPORT))

    def _link_credit(self):
        """The transmitter's credit gate: none on Ethernet (PFC pauses instead)."""
        return None

    # -- teardown ------------------------------------------------------------
    def close(self):
        self.poll_kernel_stats()
        self.update_pause_stats()
        for s in (self.sock, self._pfc_sock, *(self._udp_absorber or ())):
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

    def poll_kernel_stats(self) -> None:
        """Add the kernel's count of frames our packet sockets dropped (their
        receive buffer was full: this process read too slowly) to
        ``stats.rx_socket_drops``: the data socket's and the PFC (or
        InfiniBand link) socket's. Called where the stats are taken, and by
        ``close`` before the sockets go."""
        st = self.stats
        for k in self._rx_kernel:
            st.rx_socket_drops += k.poll()

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
        dst_mac = remote_mac or self.gateway_mac
        tpl = self._qp_template(dst_mac, remote_ip, udp_sport, remote_qpn)
        qp = QueuePair(qpn, remote_ip, remote_qpn, udp_sport, sq_psn, rq_psn, rate_bps,
                       dst_mac, tpl, self.mtu_bytes)
        qp.window_pkts = self.transmitter.max_outstanding_pkts
        self._qps[qpn] = qp
        self.requester.qps.append(qp)
        self.reaction.attach(qp, self.qp_line_rate_bps(qp), self.clock.now_ns())
        return qp

    def _qp_template(self, dst_mac: str, remote_ip: str, udp_sport: int, remote_qpn: int):
        """The frame template of a new QP's packets."""
        return FrameTemplate(self.mac, dst_mac, self.ip, remote_ip, udp_sport, remote_qpn,
                             dscp=self.dscp, ecn=self.ecn, max_payload_bytes=self.mtu_bytes,
                             pkey=self.pkey)

    def _cnp_template(self, qp: QueuePair) -> FrameTemplate:
        """The template of the CNPs ``qp`` sends its peer (made at the first):
        its data template in the CNP class, not ECN-capable."""
        return qp.tpl.variant(dscp=self.cnp_dscp, ecn=ECN_NOT_ECT, max_payload_bytes=CNP_PAD_BYTES)

    def qp_line_rate_bps(self, qp: QueuePair) -> float:
        """The most a QP may send: the link rate, or its cap if lower."""
        cap = qp.cap_bps
        return self.rate_bps if cap is None or cap > self.rate_bps else cap

    def _on_rate_change(self, qp: QueuePair, rate_bps: float, t_ns: int, event: str) -> None:
        """DCQCN moved ``qp``'s current rate: the pacer follows; a cut (CNP)
        stretches the running ACK timeout."""
        self.transmitter.set_qp_rate(qp, rate_bps)
        if event == "cnp":
            self.requester.rate_cut(qp, t_ns)
        self.stats.rate_changes += 1

    def _check_local(self, mr, off, length):
        if off < 0 or length < 0 or off + length > mr.size_bytes:
            raise ValueError("local range outside the memory region")

    def post_write(self, qp: QueuePair, wr_id: int, local: tuple[MemoryRegion, int, int],
                   remote_addr: int, rkey: int, *, signaled: bool = True) -> None:
        """RDMA WRITE ``local`` = (mr, offset, length) to ``remote_addr`` under ``rkey``."""
        mr, off, length = local
        self._check_local(mr, off, length)
        self.requester.post(qp, wr_id, mr.mv[off:off + length], True, remote_addr, rkey,
                            signaled, self.clock.now_ns())

    def post_send(self, qp: QueuePair, wr_id: int, data, *, signaled: bool = True) -> None:
        """SEND ``data``: bytes-like, or (mr, offset, length)."""
        if isinstance(data, tuple):
            mr, off, length = data
            data = mr.mv[off:off + length]
        elif not isinstance(data, memoryview):
            data = memoryview(data)
        self.requester.post(qp, wr_id, data, False, 0, 0, signaled, self.clock.now_ns())

    def post_read(self, qp: QueuePair, wr_id: int, local: tuple[MemoryRegion, int, int],
                  remote_addr: int, rkey: int, *, signaled: bool = True) -> None:
        """RDMA READ ``local[2]`` bytes at ``remote_addr`` under ``rkey`` into
        ``local`` = (mr, offset, length); completes (``RDMA_READ``) when the
        last response has been placed."""
        mr, off, length = local
        self._check_local(mr, off, length)
        self.requester.post(qp, wr_id, mr.mv[off:off + length], False, remote_addr, rkey,
                            signaled, self.clock.now_ns(), is_read=True)

    def post_recv(self, qp: QueuePair, wr_id: int, size: int, buf=None) -> None:
        """Post a receive buffer of ``size`` bytes (``buf``: a writable
        buffer to use, else a new bytearray) for one incoming SEND."""
        r = _RecvWqe()
        r.wr_id, r.size = wr_id, size
        r.buf = memoryview(buf if buf is not None else bytearray(size))
        if len(r.buf) < size:
            raise ValueError("buf shorter than size")
        r.post_ns, r.post_unix_ns = self.clock.now_ns(), self.clock.unix_ns()
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
        return list(self.requester.qps)

    def frame_time_ns(self, frame_len: int, rate_bps: int | None = None) -> float:
        """Serialization time of a frame of ``frame_len`` bytes (as handed to
        AF_PACKET) including the 24 bytes of wire overhead."""
        return self.transmitter.frame_time_ns(frame_len, rate_bps)

    def idle(self) -> bool:
        """Nothing left to send or to be acknowledged."""
        if not self.transmitter.idle() or (self.cpu_gate is not None and self.cpu_gate.rxq):
            return False
        return self.requester.idle()

    # -- PFC -----------------------------------------------------------------
    def update_pause_stats(self, now: int | None = None) -> int:
        """Bring ``stats.paused_ns`` (time our classes -- ``priority`` and
        ``cnp_priority`` -- were paused by PFC, summed over the two, up to
        ``now``) up to date; returns it."""
        now = self.clock.now_ns() if now is None else now
        self.stats.paused_ns = total = self.pfc.paused_ns(now)
        return total

    def paused(self, priority: int, now: int | None = None) -> bool:
        """Is ``priority`` paused by PFC at ``now``?"""
        return self.pfc.paused(priority, self.clock.now_ns() if now is None else now)

    # -- per-packet CPU work and tenant filter (host_cpu, set by dpu.Endpoint) --
    def set_packet_cpu(self, cpu: CpuServers | None, rx_backlog_pkts: int = 1024) -> None:
        """Charge per-packet work (the QPs' ``cpu_*`` costs) to ``cpu``
        (None: nobody, no per-packet cost)."""
        self.cpu_gate = None if cpu is None else CpuGate(cpu, rx_backlog_pkts, self.stats)
        self.transmitter.cpu_gate = None if cpu is None else self.cpu_gate.tx
        self._update_rx_hook()

    def set_partition(self, pkey: int | None, filter_cpu: CpuServers | None = None,
                      filter_ns: float = 0.0) -> None:
        """Tag our frames with BTH P_Key ``pkey`` and accept only frames of
        its partition (None: default P_Key 0xFFFF, accept all). Inspecting a
        frame costs ``filter_ns`` on ``filter_cpu`` (a host-software filter)."""
        self.pkey = 0xFFFF if pkey is None else pkey
        self.tenant_filter = None if pkey is None else \
            TenantFilter(pkey, filter_cpu, filter_ns, self.stats)
        for qp in self.requester.qps:
            qp.tpl.pkey = self.pkey
            if qp.cnp_tpl is not None:
                qp.cnp_tpl.pkey = self.pkey
        self._update_rx_hook()

    @property
    def rx_partition(self) -> int | None:
        return None if self.tenant_filter is None else self.tenant_filter.partition

    def _update_rx_hook(self) -> None:
        on = self.cpu_gate is not None or self.tenant_filter is not None
        self._rx_hook = self._cpu_rx_hook if on else None

    def _cpu_rx_hook(self, frame, pkt, now: int) -> bool:
        """True when the frame is consumed here: dropped (other tenant, CPU
        backlog full) or held until its CPU work is done."""
        tf = self.tenant_filter
        if tf is not None and tf.drops(frame, now):
            return True
        gate = self.cpu_gate
        if gate is None or pkt.opcode not in _DATA_OPS:
            return False
        qp = self._qps.get(pkt.dst_qp)
        if qp is None or pkt.src_ip != qp.remote_ip_int:
            return False
        return gate.rx_admit(frame, pkt, qp, now)

    # -- receive ---------------------------------------------------------------
    def _rx_drain(self, now: int, readable: Sequence[int] | None = None) -> None:
        """Read the sockets that ``readable`` names (None: all of them)."""
        n_batch = 0
        if readable is None:
            for sock in self._rx_socks:
                n_batch += self._rx_drain_sock(sock, now)
        else:      # a select said so: no read that finds nothing (a syscall and an exception)
            sock_of = self._rx_sock_of
            for fd in readable:
                n_batch += self._rx_drain_sock(sock_of[fd], now)
        st = self.stats
        if n_batch:
            self.last_rx_ns = now
            if n_batch > st.rx_batches_max:
                st.rx_batches_max = n_batch
        self.responder.flush_acks()

    def _rx_drain_sock(self, sock, now: int) -> int:
        """Read what ``sock`` holds (at most ``RX_BATCH`` frames) into
        ``_rx_frame``; returns how many frames."""
        buf, mv = self._rxbuf, self._rxmv
        on_frame = self._rx_frame
        recv_into = sock.recv_into
        n_batch = 0
        for _ in range(self.RX_BATCH):
            try:
                n = recv_into(buf)
            except (BlockingIOError, InterruptedError):
                break
            if not n_batch and self._rx_stamp:
                self._sample_rx_lateness(sock)
            n_batch += 1
            on_frame(mv[:n], n, now)
        return n_batch

    def _rx_frame(self, frame, n: int, now: int) -> None:
        """One received frame (a view of ``n`` bytes, valid until the next
        read): a PFC frame, or a RoCE packet for one of our QPs."""
        st = self.stats
        if frame[12] == 0x88 and frame[13] == 0x08 and n >= 34:
            if self.pfc.on_frame(frame, now):
                st.pfc_rx += 1
            else:
                st.rx_ignored += 1
            return
        stack = None
        if n > _INT_MIN_FRAME and frame[37] == _INT_DPORT_LO and frame[36] == _INT_DPORT_HI \
                and int_md.is_int(frame):
            # the INT sink: the packet as its source built it, and the records
            stack = int_md.strip(frame)
            if stack is None:
                st.rx_int_errors += 1
                return
            frame = stack.frame
        pkt = parse_roce(frame)
        if pkt is None or pkt.dst_ip != self.ip_int:
            st.rx_ignored += 1
            return
        if self.verify_icrc and not verify_icrc(frame):
            st.rx_icrc_errors += 1
            return
        hook = self._rx_hook                 # tenant filter / CPU work (host_cpu); None: off
        if hook is not None and hook(frame, pkt, now):
            return                           # dropped, or held until the CPU delivers it
        qp = self._qps.get(pkt.dst_qp)
        if qp is None or pkt.src_ip != qp.remote_ip_int:
            st.rx_ignored += 1
            return
        st.rx_packets += 1
        st.rx_bytes += n
        self._dispatch(qp, pkt, now)
        if stack is not None:
            self._rx_int(qp, pkt, stack, now)

    def _rx_int(self, qp: QueuePair, pkt, stack, now: int) -> None:
        """A received INT stack: a data packet's goes back in the QP's ACKs;
        an ACK's to the reaction point (after the ACK moved the QP on)."""
        if stack.kind == int_md.INT_KIND_COLLECT:
            if pkt.opcode in REQUEST_OPS:
                qp.int_echo = (stack.max_hops, stack.hops)
        elif pkt.opcode == RC_ACK and pkt.aeth_syndrome & AETH_TYPE_MASK == AETH_ACK:
            self.reaction.on_int_ack(qp, stack.hops, now)

    def _sample_rx_lateness(self, sock) -> None:
        try:
            sec, nsec = _STAMP.unpack(fcntl.ioctl(sock, SIOCGSTAMPNS, _STAMP_BUF))
        except OSError:                      # not a socket the kernel stamps
            self._rx_stamp = False
            return
        late = self.clock.unix_ns() - (sec * 1_000_000_000 + nsec)
        if late < 0:                         # realtime stepped back: no sample
            return
        st = self.stats
        st.rx_late_samples += 1
        st.rx_late_sum_ns += late
        st.rx_late_hist[lateness_bucket(late)] += 1
        if late > self.max_lag_ns:           # beyond the catch-up window: a stall
            st.rx_stall_ns += late - self.max_lag_ns
        if late > st.rx_late_max_ns:
            st.rx_late_max_ns = late

    def lost_ns(self) -> int:
        """Clock time this NIC lost to its process being late beyond its
        catch-up window (``max_lag_ns``): transmit time given up, or receive
        stalls, whichever is larger (one stall shows in both). A part that
        times a phase takes the difference over it (``collectives.bench``)."""
        st = self.stats
        return max(st.tx_given_up_ns, st.rx_stall_ns)

    def _dispatch(self, qp: QueuePair, pkt, now: int) -> None:
        """Hand a received RoCE packet for ``qp`` to its part."""
        op = pkt.opcode
        if op == RC_ACK:
            self.requester.on_ack(qp, pkt, now)
        elif op in REQUEST_OPS or op in READ_OPS:
            if pkt.ecn == ECN_CE:            # requests and READ responses notify congestion
                self.stats.ecn_ce_rx += 1
                self.notification.on_ce(qp, now)
                if self.on_ecn_ce is not None:
                    self.on_ecn_ce(qp, pkt)
            if op in REQUEST_OPS:
                self.responder.on_request(qp, pkt, now)
            elif op == RC_READ_REQUEST:
                self.read_responder.on_request(qp, pkt, now)
            else:
                self.read_requester.on_response(qp, pkt, now)
        elif op == CNP_OPCODE:
            self.stats.cnp_rx += 1
            self.reaction.on_cnp(qp, now)
            if self.on_cnp is not None:
                self.on_cnp(qp, pkt)
        else:
            self.stats.rx_bad_requests += 1

    def _cpu_rx_release(self, now: int) -> None:
        """Deliver the received packets whose CPU work is done (then the
        responder's coalesced ACKs)."""
        st = self.stats
        n = 0
        for frame in self.cpu_gate.rx_due(now):
            pkt = parse_roce(frame)
            qp = self._qps.get(pkt.dst_qp)
            if qp is None:
                continue
            st.rx_packets += 1
            st.rx_bytes += len(frame)
            self._dispatch(qp, pkt, now)
            n += 1
        if n:
            self.last_rx_ns = now
        self.responder.flush_acks()

    # -- event loop ----------------------------------------------------------
    def _timers(self, now: int) -> None:
        gate = self.cpu_gate
        if gate is not None and gate.rxq:    # received packets whose CPU work is done
            self._cpu_rx_release(now)
        if self.reaction.enabled:
            self.reaction.advance(now)
        self.requester.timers(now)

    @property
    def rx_fds(self) -> tuple[int, ...]:
        """File descriptors to wait on for frames (an outer loop driving
        several NICs waits on all of them, then calls ``run_once(0)``)."""
        return self._rx_fds

    def next_wake_ns(self, now: int, limit: int) -> int:
        """Clock time by which ``run_once`` must run again (timers, paced
        frames, frames on the wire, pause expiry), at most ``limit``."""
        gate = self.cpu_gate
        wake = self.transmitter.next_wake_ns(
            now, limit, gate.tx_ready_ns if gate is not None else 0.0)
        wake = self.requester.next_timer_ns(wake)
        if self.reaction.enabled:
            wake = self.reaction.next_timer_ns(wake)
        if gate is not None:
            t = gate.next_rx_ns()
            if t is not None and t < wake:
                wake = t
        if wake <= now:
            return now
        w = int(wake)          # a paced frame's due time is fractional: never wake before it
        return w if w == wake else w + 1

    def next_work_ns(self, now: int, limit: int) -> int:
        """``next_wake_ns`` but for the link layer's periodic upkeep (none on
        Ethernet; InfiniBand's flow-control updates): when the NIC next has
        work, as a loop's idle-time choice asks (``collectives.engine.drive``)."""
        return self.next_wake_ns(now, limit)

    def run_once(self, timeout_s: float = 0.0, readable: Sequence[int] | None = None) -> None:
        """Wait up to ``timeout_s`` (not at all if something is due now, less
        if a frame arrives or a timer is due sooner), then process: frames
        received, timers, what the transmitter has due. One pass per call:
        the loop's caller (``HostAgent.step``) changes nothing the NIC would
        see between a pass and the next wait but what it posts, and a post
        makes the next wait zero. ``readable``: the caller waited itself (a
        loop over several NICs, ``rx_fds``) and these of ours have frames:
        no wait, only those are read."""
        clock = self.clock
        now = clock.now_ns()
        self.stats.loops += 1
        if readable is None and timeout_s > 0:
            wake = self.next_wake_ns(now, now + int(timeout_s * 1e9))
            if wake > now:
                readable = clock.wait_readable(self._rx_fds, wake)
                now = clock.now_ns()
        self._rx_drain(now, readable)
        self._timers(now)
        self.transmitter.service(now)

    def doorbell(self, now: int | None = None) -> None:
        """Serialize what new posts made sendable, now (``run_once`` does it
        too, after reading what came in): a loop over several NICs rings each
        after its posts, so a credit waits for no other NIC's receive."""
        self.transmitter.service(self.clock.now_ns() if now is None else now)

    def run_until(self, predicate: Callable[[], bool], timeout_s: float,
                  poll_s: float = 0.05) -> bool:
        """Run the loop until ``predicate()`` is true (-> True) or
        ``timeout_s`` seconds passed (-> False)."""
        clock = self.clock
        end = clock.now_ns() + int(timeout_s * 1e9)
        while True:
            if predicate():
                return True
            left = end - clock.now_ns()
            if left <= 0:
                return False
            self.run_once(min(poll_s, left / 1e9))
