"""A software InfiniBand HCA port: ``RoceNic``'s verbs, queue pairs,
requester, responder, READs and pacer over InfiniBand's link layer. Only
what is around the transport differs (the transport code is shared):

* frames: ``ib.frames.IbFrameTemplate`` (carrier, LRH with our SL and data
  VL, DLID and SLID, BTH onwards as RoCE's, ICRC over the LRH with the VL
  masked, VCRC) and ``parse_ib``; sizes and wire time from ``IB_FRAMING``
  (the 14-byte carrier is not on an IB wire).
* addresses: a LID, ours and the peers'. A QP is still created with the
  peer's IP (the workloads speak IPs): ``lids`` maps it to the peer's LID,
  as a path record from the subnet manager's SA would (the runner fills it
  from ``ib.sm.sweep``, the same sweep that programs the switches).
* flow control (IBA 7.9.4), one data VL: the transmitter sends a frame
  only when the switch's credit covers its blocks (``Transmitter.credit``;
  the head waits, and its wait is a credit stall); flow-control packets from
  the switch bring credit (FCCL) and reset our ABR (FCTBS). Our receive
  buffer frees as soon as a packet is read (the host consumes at line
  rate), and we advertise it like a switch port does: at start, when
  ``update_blocks`` freed, and every ``update_period_ns``.
* congestion: a request that arrives with FECN set is "congestion
  experienced" (``IbPacket.ecn``): the notification point returns a CNP
  (BTH opcode 0x81 with BECN, annex A10) and the sender's reaction point
  runs ``nic.ib_cc.IbCc`` when it is given ``IbCcParams``.
* no PFC: nothing pauses the data class; the ACK timeout is stretched by
  the VL's credit stall time instead, as RoCE's is by PFC pauses.
* virtual time (``emulator.vtime``), as ``RoceNic``: one unfiltered socket,
  the clock's port; a link packet leaves when it is made, stamped with its
  arrival (``link.CommitWire``).
"""
from __future__ import annotations

from emulator.clock import MONOTONIC
from emulator.nic.frames import LinkFrame
from emulator.nic.nic import RoceNic
from emulator.nic.packet_socket import open_packet_socket
from emulator.nic.wall import wall_ns
from emulator.nic.qp import QueuePair
from emulator.ib.credits import CreditParams, VlCredits, blocks
from emulator.ib.frames import IbFrameTemplate, fc_frame, parse_fc, parse_ib, verify_icrc
from emulator.ib.headers import IB_FRAMING, fc_wire_ns
from emulator.wire import CNP_PAD_BYTES, ETH_HDR_BYTES, ETH_P_ALL, ETH_P_IB_DATA, ETH_P_IB_LINK


_LINK_HI, _LINK_LO = ETH_P_IB_LINK >> 8, ETH_P_IB_LINK & 0xFF


class CreditHold:
    """How credit holds our VL back, as the requester asks any link layer
    (``requester.Requester``'s ``hold``; ``pfc.PriorityHold`` on Ethernet):
    stalled time so far, and when the stall in force ends -- unknown while
    it runs (no credit has come yet), so far off."""

    __slots__ = ("credits",)
    _UNKNOWN_END_NS = 1 << 62

    def __init__(self, credits: VlCredits):
        self.credits = credits

    def held_ns(self, now: int) -> int:
        return self.credits.stalled_total_ns(now)

    def resume_ns(self) -> int:
        return self._UNKNOWN_END_NS if self.credits.stalled_since is not None else 0


class IbNic(RoceNic):
    """An InfiniBand port with ``RoceNic``'s API, for a config with ``ib``
    (``schema.nic.IbNicConfig``): ``lid`` ours, ``lids`` IP -> LID of every
    peer (path records), ``sl``/``vl`` our packets' SL and the data VL this
    port runs, our receive buffer and how we advertise it, and IB CC for the
    reaction point (``cc``; None: none). The config's ``dscp``/``ecn``/
    ``priority`` and PFC keys have no meaning here."""

    FRAMING = IB_FRAMING
    PFC = False

    def __init__(self, config, *, clock=MONOTONIC, sock=None, logs=None):
        ib = config.ib
        if ib is None:
            raise ValueError("an IbNic's config needs its ib part")
        self.lid, self.sl, self.vl = ib.lid, ib.sl, ib.vl
        self.lids = dict(ib.lids)
        self.credit_params = CreditParams(
            buffer_blocks=ib.buffer_blocks, update_blocks=ib.update_blocks,
            update_period_ns=wall_ns(ib.update_period_ns, config.dilation),
            peer_buffer_blocks=ib.peer_buffer_blocks)
        # the transmitter's credit gate (RoceNic's __init__ asks _link_credit)
        self.vl_credits = VlCredits(self.credit_params, clock.now_ns())
        super().__init__(config, clock=clock, sock=sock, logs=logs)
        self.requester.hold = CreditHold(self.vl_credits)
        self._mac_bytes = bytes.fromhex(config.mac.replace(":", ""))
        self._fc_wire_ns = fc_wire_ns(self.rate_bps)
        self.vl_errors = 0

    # -- the parts RoceNic asks its link layer for ----------------------------
    def _open_sockets(self, rcvbuf_bytes: int, sndbuf_bytes: int, absorb_udp: bool) -> None:
        """Data packets on one socket, link packets on another (each its
        ethertype). Virtual time: one socket for every frame, the clock's
        port (it must read every frame sent to it: ``_rx_frame`` counts
        what is not ours)."""
        if self.virtual:
            sock = open_packet_socket(self.ifname, None, max(rcvbuf_bytes, 16 << 20),
                                      sndbuf_bytes, ETH_P_ALL)
            self.sock = self.clock.attach_port(sock, self.ifname)
            return
        self.sock = open_packet_socket(self.ifname, None, rcvbuf_bytes, sndbuf_bytes,
                                       ETH_P_IB_DATA)
        try:
            self._pfc_sock = open_packet_socket(self.ifname, None, 1 << 20, 1 << 16,
                                                ETH_P_IB_LINK)
        except BaseException:
            self.sock.close()
            raise

    def _link_credit(self):
        return self.vl_credits

    def _dlid(self, remote_ip: str) -> int:
        try:
            return self.lids[remote_ip]
        except KeyError:
            raise ValueError(f"no path to {remote_ip}: the subnet manager gave it no LID") from None

    def _qp_template(self, dst_mac: str, remote_ip: str, udp_sport: int, remote_qpn: int):
        return IbFrameTemplate(self.mac, dst_mac, self.lid, self._dlid(remote_ip), remote_qpn,
                               sl=self.sl, vl=self.vl, pkey=self.pkey,
                               max_payload_bytes=self.mtu_bytes)

    def _cnp_template(self, qp: QueuePair) -> IbFrameTemplate:
        return qp.tpl.variant(max_payload_bytes=CNP_PAD_BYTES)

    def create_qp(self, qpn: int, remote_ip: str, remote_qpn: int, udp_sport: int | None = None,
                  **kw) -> QueuePair:
        qp = super().create_qp(qpn, remote_ip, remote_qpn, udp_sport, **kw)
        qp.remote_lid = qp.tpl.dlid
        return qp

    # -- receive ---------------------------------------------------------------
    def _rx_frame(self, frame, n: int, now: int) -> None:
        """One received frame: flow control for our VL, or an IB packet for
        one of our QPs (its blocks free again at once: we have read it)."""
        st = self.stats
        if frame[12] == _LINK_HI and frame[13] == _LINK_LO:   # a link packet
            fc = parse_fc(frame)
            if fc is not None and fc[0] == self.vl:
                self.vl_credits.on_fc(fc[1], fc[2], now)
                st.fc_rx += 1
            else:
                st.rx_ignored += 1
            return
        pkt = parse_ib(frame)
        if pkt is None:
            st.rx_ignored += 1
            return
        if pkt.vl != self.vl:
            self.vl_errors += 1
            st.rx_ignored += 1
            return
        cr = self.vl_credits
        nb = blocks(n - ETH_HDR_BYTES)
        if not cr.on_data(nb):               # past our credit: never, if the switch obeys
            return
        cr.release(nb)
        if pkt.dlid != self.lid:
            st.rx_ignored += 1
            return
        if self.verify_icrc and not verify_icrc(frame):
            st.rx_icrc_errors += 1
            return
        qp = self._qps.get(pkt.dst_qp)        # (no host-CPU hook: RoCE only)
        if qp is None or pkt.slid != qp.remote_lid:
            st.rx_ignored += 1
            return
        st.rx_packets += 1
        st.rx_bytes += n
        self._dispatch(qp, pkt, now)

    # -- flow control ----------------------------------------------------------
    def _flow_control(self, now: int) -> None:
        cr = self.vl_credits
        if cr.fc_due(now):
            fctbs, fccl = cr.make_fc(now)
            # after the packet being serialized: its blocks are in FCTBS, and
            # the peer resets its ABR to FCTBS -- were the flow-control packet
            # to overtake it, the peer would count those blocks twice
            tx = self.transmitter
            self.transmitter.wire.put(max(now, tx.slot_free_ns) + self._fc_wire_ns,
                                      LinkFrame(fc_frame(self._mac_bytes, self.vl, fctbs, fccl)))

    def _timers(self, now: int) -> None:
        self._flow_control(now)
        super()._timers(now)

    def next_wake_ns(self, now: int, limit: int) -> int:
        fc = self.vl_credits.next_fc_ns()
        return super().next_wake_ns(now, fc if fc < limit else limit)

    def next_work_ns(self, now: int, limit: int) -> int:
        """Without the periodic flow-control update: it falls due every
        ``update_period_ns`` (16 us) whether or not anything moves, so a loop
        that counted it as work would never find itself idle (a server agent's
        result checks, run in idle time, starved: allreduce-rail-ib in virtual
        time). Such a loop's piece of work delays an update by that piece at
        most (no fabric time in virtual time); freed buffer is advertised as
        soon as reads free ``update_blocks`` anyway (``_flow_control``)."""
        return super().next_wake_ns(now, limit)

    # -- stats -----------------------------------------------------------------
    def update_pause_stats(self, now: int | None = None) -> int:
        """No PFC here: bring the credit stall stats up to date (stalls,
        time our VL held a packet for want of credit); returns 0 paused."""
        now = self.clock.now_ns() if now is None else now
        cr = self.vl_credits
        st = self.stats
        st.credit_stalls = cr.stalls
        st.credit_stalled_ns = cr.stalled_total_ns(now)
        st.paused_ns = 0
        return 0

    # -- what runs on Ethernet only ----------------------------------------------
    def set_packet_cpu(self, cpu, rx_backlog_pkts: int = 1024) -> None:
        if cpu is not None:
            raise ValueError("the host-CPU and DPU models run on RoCE NICs only, "
                             "not on InfiniBand")

    def set_partition(self, pkey, filter_cpu=None, filter_ns: float = 0.0) -> None:
        if pkey is not None:
            raise ValueError("tenant partitions run on RoCE NICs only, not on InfiniBand")
