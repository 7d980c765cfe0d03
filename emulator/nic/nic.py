"""A software RoCEv2 NIC with a verbs-like API: RC queue pairs on AF_PACKET.

One ``RoceNic`` owns one interface (a raw ``AF_PACKET`` socket bound to it,
or a test's socket) and is driven by its caller's thread through
``run_once`` / ``run_until``: there are no threads inside. Its config is a
``schema.nic.NicConfig`` (fabric units), handed as is; ``nic.wall`` puts it
on the NIC's clock. Each pass of the loop: receive (``nic_rx``: drain the
sockets, check, dispatch by destination QP), timers (retransmission, RNR,
the reaction point's, CPU work done), transmit (``transmitter``: the pacer
and the link).

Parts (htsim style: small parts that hand frames on, time owned by the
caller and passed in as ``now``): ``qp`` (QueuePair, Completion,
MemoryRegion), ``frames``, ``requester`` (WQEs, ACK/NAKs, go-back-N, ACK
timeouts), ``responder`` (PSN check, placement, coalesced ACK/NAKs),
``read`` (RDMA READ), ``transmitter``, ``pfc`` (pause reception),
``notification`` / ``reaction`` (CNPs and per-QP rate control: DCQCN, HPCC,
IB CC), ``host_cpu`` (CPU gate, tenant filter), ``packet_socket`` and
``nic_link`` (sockets), ``nic_rx`` (receive). ``RoceNic`` owns and wires
them and keeps the verbs API.

Time: the ``clock`` given (``emulator.clock``; a test's ``ManualClock``, or
virtual time's): ``*_ns`` values are its ``now_ns()``, completions'
``*_unix_ns`` its ``unix_ns()``. The protocol's own times (the RNR timer
codes) are fabric time, which the NIC multiplies by its ``dilation``.
The model, in full: docs/nic.md.
"""
from __future__ import annotations

import dataclasses
from collections import deque
from typing import Callable, Sequence

from emulator import int_md
from emulator.clock import MONOTONIC
from emulator.link_faults import UNCLASSIFIED, LinkFaults
from emulator.wire import RETH_BYTES

from . import roce
from .host_cpu import CpuGate, CpuServers, TenantFilter
from .link_layer import EthernetLink, LinkLayer
from .nic_link import NicLink
from .nic_rx import NicReceive
from .nic_stats import NicStats  # noqa: F401  (re-exported)
from .notification import NotificationPoint
from .pfc import PfcStormer
from .rx_stall import RxStall
from .qp import (  # noqa: F401  (re-exported)
    RNR_TIMER_US, Completion, MemoryRegion, QpState, QueuePair, WcOpcode, WcStatus, _RecvWqe,
)
from .reaction import ReactionPoint
from .read import ReadRequester, ReadResponder
from .requester import Requester
from .responder import Responder
from .roce import (  # noqa: F401  (re-exported)
    AETH_ACK, AETH_TYPE_MASK, CNP_OPCODE, ECN_CE, ECN_ECT0, ECN_NOT_ECT, PSN_HALF, PSN_MASK,
    RC_ACK, RC_READ_REQUEST, FrameTemplate, ip_to_int, parse_roce, verify_icrc,
)
from .transmitter import Transmitter
from .wall import nic_wall


class RoceNic(NicLink, NicReceive):
    """A software RoCEv2 RNIC on one interface. Not thread-safe. Owns the
    parts (see the module docstring), demultiplexes received frames to them
    and runs the event loop."""

    def __init__(self, config, *, clock=MONOTONIC, sock=None, logs=None,
                 link: LinkLayer | None = None):
        """``config``: a ``schema.nic.NicConfig``. ``clock``: where every part
        gets its time (``emulator.clock``). ``sock``: use this connected
        datagram socket (send, recv_into, fileno; e.g. one end of an AF_UNIX
        socketpair) instead of opening AF_PACKET on ``config.ifname`` -- for
        tests; it carries PFC frames too. ``logs``: an object with ``qp(t_ns,
        qpn, rate_bps, alpha, event)``, ``cnp(t_ns, local_qpn, remote_qpn,
        direction)`` and ``pfc(t_ns, priority, quanta)`` (``agents.run_logs``), and
        optionally ``drop(t_ns, priority, reason, bytes)``; or None.
        ``link``: the link layer (``link_layer``; None: ``EthernetLink``,
        ``ib.link.IbLink`` for InfiniBand). Hooks: ``on_ecn_ce`` / ``on_cnp``
        (called with (qp, pkt) for every CE-marked request packet to a known
        QP, every CNP)."""
        if config.ifname is None and sock is None:
            raise ValueError("a NIC needs an interface (ifname) or a socket")
        self.config = config
        self.link = link = EthernetLink(config) if link is None else link
        self._link_upkeep = link.upkeep
        if not link.upkeep:        # (Ethernet) one call less, every pass of a loop
            self.next_wake_ns = self.next_work_ns
        self.wall = w = nic_wall(config)
        self.clock = clock
        self.dilation = config.dilation
        self.ifname, self.mac, self.ip = config.ifname, config.mac, config.ip
        self.ip_int = ip_to_int(config.ip)
        self.gateway_mac = config.gateway_mac
        self.rate_bps = w.rate_bps
        self.mtu_bytes = config.mtu_bytes
        self.dscp, self.ecn = config.dscp, config.ecn
        self.tx_delay_ns = w.tx_delay_ns
        self.ack_every_n = config.ack_every_n
        self.int_max_hops = config.int_max_hops
        base = link.framing
        self.framing = framing = base if not self.int_max_hops else dataclasses.replace(
            base, hdr_bytes=base.hdr_bytes + int_md.int_bytes(self.int_max_hops))
        max_frame_ns = (framing.frame_bytes(RETH_BYTES, self.mtu_bytes)
                        + framing.wire_overhead_bytes) * 8e9 / self.rate_bps
        self.rto_ns = w.rto_ns
        self.retry_cnt = config.retry_cnt
        # virtual time (emulator.vtime): never late, so no catch-up window
        self.virtual = hasattr(clock, "attach_port")
        self.max_lag_ns = 0 if self.virtual else int(
            config.max_lag_ns if config.max_lag_ns is not None else max(500_000, 4 * max_frame_ns))
        self.verify_icrc = config.verify_icrc
        self.priority, self.cnp_priority = config.priority, config.cnp_priority
        self.cnp_dscp = config.cnp_dscp
        self.honor_pfc = link.honor_pfc
        self.cc_params = w.cc        # the reaction point's: DCQCN's, HPCC's or IB CC's
        self.logs = logs
        self.stats = NicStats()
        self.on_ecn_ce: Callable[[QueuePair, roce.RocePacket], None] | None = None
        self.on_cnp: Callable[[QueuePair, roce.RocePacket], None] | None = None
        # BTH P_Key of our frames (dpu: a tenant's partition; 0xFFFF: default)
        self.pkey = 0xFFFF
        self.last_rx_ns = 0                  # clock time of the last received frame
        # QPs by local QPN: the link layer delivers a frame to its QP from here
        # (read only outside create_qp)
        self.qp_by_qpn: dict[int, QueuePair] = {}
        self._mrs: dict[int, MemoryRegion] = {}
        self._next_rkey = 0x100
        self._next_addr = 0x10000000
        self._cq: deque[Completion] = deque()
        self._make_parts(config)
        self._open_link(config, sock)
        self._make_faults(config)
        self._make_transmitter()

    def _make_parts(self, config) -> None:
        """The link layer bound; requester, responder, READs, notification and
        reaction points."""
        st, logs, mtu, unix_ns = self.stats, self.logs, self.mtu_bytes, self.clock.unix_ns
        self._max_out = max_out = min(config.max_outstanding_pkts, PSN_HALF - 1)
        self.link.attach(self)
        self.requester = Requester(
            link_rate_bps=self.rate_bps, mtu_bytes=mtu, ack_every_n=self.ack_every_n,
            rto_ns=self.rto_ns, retry_cnt=self.retry_cnt, rnr_retry=config.rnr_retry,
            max_outstanding_pkts=max_out, cq=self._cq, stats=st, unix_ns=unix_ns,
            dilation=self.dilation, hold=self.link.hold(self.priority), framing=self.framing)
        self.responder = Responder(
            mrs=self._mrs, mtu_bytes=mtu, min_rnr_timer=config.min_rnr_timer,
            report_remote_writes=config.report_remote_writes, cq=self._cq, stats=st,
            unix_ns=unix_ns)
        self.read_responder = ReadResponder(self.responder, self._mrs, mtu, st, self.framing)
        self.read_requester = ReadRequester(self.requester, mtu, st)
        self.notification = NotificationPoint(self.wall.cnp_interval_ns)
        self.cnp_interval_ns = self.notification.interval_ns
        self.reaction = ReactionPoint(self.cc_params, self._on_rate_change, logs,
                                      max_window_pkts=max_out)
        self.cpu_gate: CpuGate | None = None          # host_cpu: off unless configured
        self.tenant_filter: TenantFilter | None = None
        # what the link layer calls on a received frame before delivering it: None, or
        # hook(frame, pkt, now) -> True when consumed (tenant filter, host CPU work)
        self.rx_hook = None

    def _make_faults(self, config) -> None:
        """Its link's scripted faults (``emulator.link_faults``): the
        transmitter applies them to what it sends; a frame that arrives
        with a bad FCS (virtual time's trailer) reaches the ICRC check if it
        is a RoCE packet for us, else the MAC drops it (``rx_fcs_errors``)."""
        self.link_faults = LinkFaults(config.link_faults) if config.link_faults is not None else None
        self.stats.link_faults = self.link_faults
        # (t_ns, class, reason, bytes) -> None: the raw log ``drops``, if any
        self.drop_log = getattr(self.logs, "drop", None)
        if self.link_faults is not None:
            self.link_faults.on_drop = self.log_drop
        self._fcs_drops: list[tuple[int, int]] = []
        self.stormer = PfcStormer(self.link_faults, self.rate_bps, self.mac) \
            if self.link_faults is not None and self.link_faults.storms else None
        stalls = config.link_faults.stalls if config.link_faults is not None else []
        self.rx_stall = self.stats.rx_stall = RxStall(
            [(w.from_ns, w.until_ns, w.xoff_bytes) for w in stalls], self.priority, self.rate_bps,
            self.mac) if stalls else None
        self._update_rx_hook()
        if hasattr(self.sock, "keep_bad_fcs"):
            self.sock.keep_bad_fcs = self._keep_bad_fcs

    def log_drop(self, t_ns: float, c: int, nbytes: int, reason: str) -> None:
        """A frame of class ``c`` lost on our link or dropped on arrival, for
        the run's drop table (the raw log ``drops``, if we keep one)."""
        if self.drop_log is not None:
            self.drop_log(t_ns, c, reason, nbytes)

    def _keep_bad_fcs(self, frame, arrival_ns: int) -> bool:
        pkt = parse_roce(frame)
        if pkt is not None and pkt.dst_ip == self.ip_int and self.verify_icrc \
                and not verify_icrc(frame):
            return True
        self.stats.rx_fcs_errors += 1
        # judged as the kernel hands frames over (its order): logged at the end
        self._fcs_drops.append((arrival_ns, len(frame)))
        return False

    def log_fcs_drops(self) -> None:
        """Log the frames our MAC dropped for a bad FCS, in fabric-time order
        (before the logs close)."""
        for t_ns, nbytes in sorted(self._fcs_drops):
            self.log_drop(t_ns, UNCLASSIFIED, nbytes, "fcs_error")
        self._fcs_drops.clear()

    def _make_transmitter(self) -> None:
        self.transmitter = Transmitter(
            sock=self.sock, rate_bps=self.rate_bps, mtu_bytes=self.mtu_bytes,
            ack_every_n=self.ack_every_n, max_lag_ns=self.max_lag_ns,
            tx_delay_ns=self.tx_delay_ns, priority=self.priority,
            cnp_priority=self.cnp_priority, max_outstanding_pkts=self._max_out,
            pause_until_ns=self.link.pause_until_ns, requester=self.requester,
            read_responder=self.read_responder, cnp_queue=self.notification.out,
            ack_queue=self.responder.out, stats=self.stats, cnp_template=self.link.cnp_template,
            logs=self.logs, framing=self.framing, credit=self.link.credit,
            int_max_hops=self.int_max_hops,
            on_data_tx=self.reaction.on_tx if self.cc_params.enabled else None,
            commit_wire=self.virtual, faults=self.link_faults)

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
        if qpn in self.qp_by_qpn:
            raise ValueError(f"QP {qpn} exists")
        if udp_sport is None:
            udp_sport = 49152 + ((qpn * 2654435761 ^ remote_qpn) & 0x3FFF)
        if rate_bps is not None and rate_bps <= 0:
            raise ValueError("a QP's rate_bps must be > 0 (or None: line rate)")
        dst_mac = remote_mac or self.gateway_mac
        tpl = self.link.qp_template(dst_mac, remote_ip, udp_sport, remote_qpn)
        qp = QueuePair(qpn, remote_ip, remote_qpn, udp_sport, sq_psn, rq_psn, rate_bps,
                       dst_mac, tpl, self.mtu_bytes)
        qp.window_pkts = self.transmitter.max_outstanding_pkts
        self.qp_by_qpn[qpn] = qp
        self.requester.qps.append(qp)
        self.reaction.attach(qp, self.qp_line_rate_bps(qp), self.clock.now_ns())
        return qp

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
        return self.qp_by_qpn[qpn]

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


    # -- per-packet CPU work and tenant filter (host_cpu, set by dpu.Endpoint) --
    def set_packet_cpu(self, cpu: CpuServers | None, rx_backlog_pkts: int = 1024) -> None:
        """Charge per-packet work (the QPs' ``cpu_*`` costs) to ``cpu``
        (None: nobody, no per-packet cost)."""
        if not self.link.host_parts:
            if cpu is not None:
                raise ValueError("the host-CPU and DPU models run on RoCE NICs only, "
                                 "not on InfiniBand")
            return
        self.cpu_gate = None if cpu is None else CpuGate(cpu, rx_backlog_pkts, self.stats)
        self.transmitter.set_cpu_gate(None if cpu is None else self.cpu_gate.tx)
        self._update_rx_hook()

    def set_partition(self, pkey: int | None, filter_cpu: CpuServers | None = None,
                      filter_ns: float = 0.0) -> None:
        """Tag our frames with BTH P_Key ``pkey`` and accept only frames of
        its partition (None: default P_Key 0xFFFF, accept all). Inspecting a
        frame costs ``filter_ns`` on ``filter_cpu`` (a host-software filter)."""
        if not self.link.host_parts:
            if pkey is not None:
                raise ValueError("tenant partitions run on RoCE NICs only, not on InfiniBand")
            return
        self.pkey = 0xFFFF if pkey is None else pkey
        self.tenant_filter = None if pkey is None else \
            TenantFilter(pkey, filter_cpu, filter_ns, self.stats)
        for qp in self.requester.qps:
            qp.tpl.pkey = self.pkey
            if qp.cnp_tpl is not None:
                qp.cnp_tpl.pkey = self.pkey
        self._update_rx_hook()


    # -- event loop ----------------------------------------------------------
    def _timers(self, now: int) -> None:
        if self._link_upkeep:
            self.link.timers(now)
        gate = self.cpu_gate
        if gate is not None and gate.rxq:    # received packets whose CPU work is done
            self._cpu_rx_release(now)
        reaction = self.reaction            # (each timer pass only when it may have work)
        if reaction.running_qps:
            reaction.advance(now)
        requester = self.requester
        if now >= requester.next_pass_ns:
            requester.timers(now)
        if self.link_faults is not None:
            t = self.transmitter.next_rate_change_ns()
            if t is not None and t <= now:
                self.transmitter.apply_rate_changes(now)
            stall = self.rx_stall
            if stall is not None and stall.next_ns() <= now:
                self._stall_release(now)
            stormer = self.stormer
            if stormer is not None and stormer.next_ns <= now:
                frame = stormer.fire(now)
                if frame is not None:
                    self.transmitter.put_pause_frame(frame, now)

    @property
    def rx_fds(self) -> tuple[int, ...]:
        """File descriptors to wait on for frames (an outer loop driving
        several NICs waits on all of them, then calls ``run_once(0)``)."""
        return self._rx_fds

    def next_wake_ns(self, now: int, limit: int) -> int:
        """Clock time by which ``run_once`` must run again (timers, paced
        frames, frames on the wire, pause expiry, the link's upkeep), at
        most ``limit``."""
        return self.next_work_ns(now, self.link.upkeep_ns(limit) if self._link_upkeep else limit)

    def next_work_ns(self, now: int, limit: int) -> int:
        """``next_wake_ns`` but for the link layer's periodic upkeep (none on
        Ethernet; InfiniBand's flow-control updates, due every
        ``update_period_ns`` whether or not anything moves): when the NIC next
        has work, as a loop's idle-time choice asks (``collectives.engine.drive``).
        A loop that counted the upkeep as work would never find itself idle;
        its piece of work delays an update by that piece at most, and freed
        buffer is advertised as soon as reads free ``update_blocks`` anyway."""
        gate = self.cpu_gate
        wake = self.transmitter.next_wake_ns(
            now, limit, gate.tx_ready_ns if gate is not None else 0.0)
        first = self.requester.next_pass_ns      # next_timer_ns, inlined where it is exact
        if first:
            wake = first if first < wake else wake
        else:
            wake = self.requester.next_timer_ns(wake)
        if self.link_faults is not None:
            t = self.transmitter.next_rate_change_ns()
            if t is not None and t < wake:
                wake = t
            if self.stormer is not None and self.stormer.next_ns < wake:
                wake = self.stormer.next_ns
            if self.rx_stall is not None and self.rx_stall.next_ns() < wake:
                wake = self.rx_stall.next_ns()
        if self.reaction.running_qps:        # none: no rate-increase timer runs
            wake = self.reaction.next_timer_ns(wake)
        if gate is not None:
            t = gate.next_rx_ns()
            if t is not None and t < wake:
                wake = t
        if wake <= now:
            return now
        w = int(wake)          # a paced frame's due time is fractional: never wake before it
        return w if w == wake else w + 1

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
        if readable is None or readable:     # (every receive flushes its ACKs: none wait)
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
