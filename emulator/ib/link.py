"""InfiniBand's link layer for a NIC (``nic.link_layer.LinkLayer``): a
software HCA port is ``RoceNic``'s verbs, queue pairs, requester, responder,
READs and pacer given an ``IbLink`` (``ib.nic.IbNic`` makes one). Only what
is around the transport differs:

* frames: ``ib.frames.IbFrameTemplate`` (carrier, LRH with our SL and data
  VL, DLID and SLID, BTH onwards as RoCE's, ICRC over the LRH with the VL
  masked, VCRC) and ``parse_ib``; sizes and wire time from ``IB_FRAMING``.
* addresses: a LID, ours and the peers'. A QP is created with the peer's
  IP: ``lids`` maps it to the peer's LID, as a path record from the SA
  would (the runner fills it from ``ib.sm.sweep``).
* flow control (IBA 7.9.4), one data VL: the transmitter sends a frame only
  when the switch's credit covers its blocks (the ``credit`` gate; the head
  waits, its wait a credit stall); flow-control packets bring credit (FCCL)
  and reset our ABR (FCTBS). Our receive buffer frees as soon as a packet is
  read, and we advertise it as a switch port does: at start, when
  ``update_blocks`` freed, and every ``update_period_ns``.
* congestion: a request with FECN is "congestion experienced": the NIC
  returns a CNP (BTH opcode 0x81 with BECN, annex A10) and its reaction
  point runs ``nic.ib_cc.IbCc`` when the config has IB CC.
* no PFC: the ACK timeout is stretched by the VL's credit stall time instead.
* virtual time: one unfiltered socket, the clock's port; a link packet
  leaves when it is made, stamped with its arrival (``link.CommitWire``).
"""
from __future__ import annotations

from emulator.clock import NEVER_NS         # a stalled link's end is not known
from emulator.nic.link_layer import LinkLayer
from emulator.nic.packet_socket import open_packet_socket
from emulator.nic.wall import wall_ns
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

    def __init__(self, credits: VlCredits):
        self.credits = credits

    def held_ns(self, now: int) -> int:
        return self.credits.stalled_total_ns(now)

    def resume_ns(self) -> int:
        return NEVER_NS if self.credits.stalled_since is not None else 0


class IbLink(LinkLayer):
    """An InfiniBand port's link layer, for a config with ``ib``
    (``schema.nic.IbNicConfig``): ``lid`` ours, ``lids`` IP -> LID of every
    peer (path records), ``sl``/``vl`` our packets' SL and the data VL this
    port runs, our receive buffer and how we advertise it. The config's
    ``dscp``/``ecn``/``priority`` and PFC keys have no meaning here."""

    framing = IB_FRAMING
    upkeep = True

    def __init__(self, config, clock):
        super().__init__()
        ib = config.ib
        if ib is None:
            raise ValueError("an InfiniBand link's config needs its ib part")
        self.lid, self.sl, self.vl = ib.lid, ib.sl, ib.vl
        self.lids = dict(ib.lids)
        self.credit_params = CreditParams(
            buffer_blocks=ib.buffer_blocks, update_blocks=ib.update_blocks,
            update_period_ns=wall_ns(ib.update_period_ns, config.dilation),
            peer_buffer_blocks=ib.peer_buffer_blocks)
        self.credits = self.credit = VlCredits(self.credit_params, clock.now_ns())
        self._mac_bytes = bytes.fromhex(config.mac.replace(":", ""))
        self._fc_wire_ns = 0
        self.vl_errors = 0

    def attach(self, nic) -> None:
        super().attach(nic)
        self._fc_wire_ns = fc_wire_ns(nic.rate_bps)

    def hold(self, priority: int) -> CreditHold:
        return CreditHold(self.credits)

    def open_sockets(self, rcvbuf_bytes: int, sndbuf_bytes: int, absorb_udp: bool):
        """Data packets on one socket, link packets on another (each its
        ethertype). Virtual time: one socket for every frame, the clock's
        port (it must read every frame sent to it: ``rx_frame`` counts what
        is not ours)."""
        nic = self.nic
        if nic.virtual:
            sock = open_packet_socket(nic.ifname, None, max(rcvbuf_bytes, 16 << 20),
                                      sndbuf_bytes, ETH_P_ALL)
            return nic.clock.attach_port(sock, nic.ifname), None, None
        sock = open_packet_socket(nic.ifname, None, rcvbuf_bytes, sndbuf_bytes, ETH_P_IB_DATA)
        try:
            link_sock = open_packet_socket(nic.ifname, None, 1 << 20, 1 << 16, ETH_P_IB_LINK)
        except BaseException:
            sock.close()
            raise
        return sock, link_sock, None

    def _dlid(self, remote_ip: str) -> int:
        try:
            return self.lids[remote_ip]
        except KeyError:
            raise ValueError(f"no path to {remote_ip}: the subnet manager gave it no LID") from None

    def qp_template(self, dst_mac: str, remote_ip: str, udp_sport: int, remote_qpn: int):
        nic = self.nic
        return IbFrameTemplate(nic.mac, dst_mac, self.lid, self._dlid(remote_ip), remote_qpn,
                               sl=self.sl, vl=self.vl, pkey=nic.pkey,
                               max_payload_bytes=nic.mtu_bytes)

    def cnp_template(self, qp) -> IbFrameTemplate:
        return qp.tpl.variant(max_payload_bytes=CNP_PAD_BYTES)

    def rx_frame(self, frame, n: int, now: int) -> None:
        """One received frame: flow control for our VL, or an IB packet for
        one of our QPs (its blocks free again at once: we have read it)."""
        nic = self.nic
        st = nic.stats
        if frame[12] == _LINK_HI and frame[13] == _LINK_LO:   # a link packet
            fc = parse_fc(frame)
            if fc is not None and fc[0] == self.vl:
                self.credits.on_fc(fc[1], fc[2], now)
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
        cr = self.credits
        nb = blocks(n - ETH_HDR_BYTES)
        if not cr.on_data(nb):               # past our credit: never, if the switch obeys
            return
        cr.release(nb)
        if pkt.dlid != self.lid:
            st.rx_ignored += 1
            return
        if nic.verify_icrc and not verify_icrc(frame):
            st.rx_icrc_errors += 1
            return
        qp = nic.qp_by_qpn.get(pkt.dst_qp)        # (no host-CPU hook: RoCE only)
        if qp is None or pkt.slid != qp.tpl.dlid:
            st.rx_ignored += 1
            return
        nic.deliver(qp, pkt, n, now)

    def timers(self, now: int) -> None:
        """Flow control: a flow-control packet when one is owed, after the
        packet being serialized -- its blocks are in FCTBS, and the peer resets
        its ABR to FCTBS: were the flow-control packet to overtake it, the
        peer would count those blocks twice."""
        cr = self.credits
        if cr.fc_due(now):
            fctbs, fccl = cr.make_fc(now)
            self.nic.transmitter.put_link_frame(
                fc_frame(self._mac_bytes, self.vl, fctbs, fccl), now, self._fc_wire_ns)

    def upkeep_ns(self, limit: int) -> int:
        fc = self.credits.next_fc_ns()
        return fc if fc < limit else limit

    def pause_stats(self, now: int) -> int:
        """No PFC here: the credit stall stats (stalls, time our VL held a
        packet for want of credit); returns 0 paused."""
        cr = self.credits
        st = self.nic.stats
        st.credit_stalls = cr.stalls
        st.credit_stalled_ns = cr.stalled_total_ns(now)
        st.paused_ns = 0
        return 0
