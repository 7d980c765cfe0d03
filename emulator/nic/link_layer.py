"""A NIC's link layer, a part the NIC is given (``RoceNic(config, link=...)``):
what lies between the RoCE transport and the wire. ``LinkLayer`` is the
interface the NIC asks; ``EthernetLink`` (here) is RoCEv2's: PFC and the
Ethernet/IP/UDP framing. ``emulator.ib.link.IbLink`` is InfiniBand's:
credits per VL, LRH/VCRC framing and link packets.

The NIC asks its link layer for, in order of use:

* ``framing``: the frame sizes of its packets (``wire.Framing``);
* ``attach(nic)``: bind to the NIC that owns it (its stats, QPs, verbs state);
* ``hold(priority)``: how the link holds our requests back, for the
  requester's ACK timeout (``held_ns``, ``resume_ns``);
* ``open_sockets``: the interface's sockets -> (data, link or None, others);
* ``pause_until_ns`` and ``credit``: the transmitter's gates (PFC's pause
  end per priority; a credit gate, or None);
* ``qp_template`` / ``cnp_template``: the frame templates of a QP's packets
  and of its CNPs;
* ``rx_frame``: one received frame -- a link frame it consumes, or a packet
  it checks and hands to ``nic.deliver``;
* ``timers`` and ``upkeep_ns``: its periodic upkeep, and when it falls due;
* ``pause_stats``: bring the NIC's held-time stats up to date.
"""
from __future__ import annotations

from emulator import int_md
from emulator.link_faults import UNCLASSIFIED
from emulator.wire import (
    CNP_PAD_BYTES, ETH_P_ALL, ETH_P_IP, ETH_P_PAUSE, NUM_PRIORITIES, ROCE_FRAMING, Framing,
)

from .packet_socket import open_packet_socket, open_udp_absorber
from .pfc import PfcReceiver
from .roce import ECN_NOT_ECT, FrameTemplate, parse_roce, verify_icrc

_INT_DPORT_HI, _INT_DPORT_LO = int_md.INT_UDP_DPORT >> 8, int_md.INT_UDP_DPORT & 0xFF
_INT_MIN_FRAME = int_md.INT_OFFSET + int_md.INT_SHIM_BYTES


class LinkLayer:
    """The interface (see the module docstring). ``host_parts``: the host-CPU
    model and tenant partitions run over this link; ``upkeep``: it has
    periodic upkeep (else the NIC's loop never asks ``timers``/``upkeep_ns``)."""

    framing: Framing
    honor_pfc = False
    host_parts = False
    upkeep = False
    credit = None

    def __init__(self):
        self.pause_until_ns = [0.0] * NUM_PRIORITIES    # never paused unless PFC says so
        self.nic = None

    def attach(self, nic) -> None:
        self.nic = nic

    def timers(self, now: int) -> None:
        """The link's periodic upkeep (none unless the link has some)."""

    def upkeep_ns(self, limit: int) -> int:
        """When the upkeep next falls due, at most ``limit``."""
        return limit


class EthernetLink(LinkLayer):
    """RoCEv2 over Ethernet: PFC pauses our classes, frames are
    Ethernet/IPv4/UDP (the INT sink strips a switch's records first)."""

    framing = ROCE_FRAMING
    host_parts = True

    def __init__(self, config):
        super().__init__()
        self.honor_pfc = config.honor_pfc
        self.pfc = None

    def attach(self, nic) -> None:
        super().attach(nic)
        self.pfc = PfcReceiver(nic.rate_bps, (nic.priority, nic.cnp_priority),
                               honor=self.honor_pfc, logs=nic.logs)
        self.pause_until_ns = self.pfc.until_ns

    def hold(self, priority: int):
        return self.pfc.hold(priority)

    def open_sockets(self, rcvbuf_bytes: int, sndbuf_bytes: int, absorb_udp: bool):
        """RoCE on an ETH_P_IP socket, PFC on an ETH_P_PAUSE one (if honored).
        Virtual time: one socket for every frame, unfiltered, as the clock's
        port -- it must read every frame sent to it (``rx_frame`` counts
        what is not ours), or the window waits for it."""
        nic = self.nic
        ifname, ip = nic.ifname, nic.ip
        pfc_sock = absorbers = None
        if nic.virtual:
            sock = open_packet_socket(ifname, None, max(rcvbuf_bytes, 16 << 20), sndbuf_bytes,
                                      ETH_P_ALL)
            sock = nic.clock.attach_port(sock, ifname)
        else:
            sock = open_packet_socket(ifname, ip, rcvbuf_bytes, sndbuf_bytes, ETH_P_IP)
        if self.honor_pfc and not nic.virtual:
            try:
                pfc_sock = open_packet_socket(ifname, ip, 1 << 20, 1 << 16, ETH_P_PAUSE)
            except BaseException:
                sock.close()
                raise
        if absorb_udp:
            absorbers = (open_udp_absorber(), open_udp_absorber(int_md.INT_UDP_DPORT))
        return sock, pfc_sock, absorbers

    def qp_template(self, dst_mac: str, remote_ip: str, udp_sport: int, remote_qpn: int):
        nic = self.nic
        return FrameTemplate(nic.mac, dst_mac, nic.ip, remote_ip, udp_sport, remote_qpn,
                             dscp=nic.dscp, ecn=nic.ecn, max_payload_bytes=nic.mtu_bytes,
                             pkey=nic.pkey)

    def cnp_template(self, qp):
        """The template of the CNPs ``qp`` sends its peer (made at the first):
        its data template in the CNP class, not ECN-capable."""
        return qp.tpl.variant(dscp=self.nic.cnp_dscp, ecn=ECN_NOT_ECT,
                              max_payload_bytes=CNP_PAD_BYTES)

    def rx_frame(self, frame, n: int, now: int) -> None:
        """One received frame (a view of ``n`` bytes, valid until the next
        read): a PFC frame, or a RoCE packet for one of our QPs."""
        nic = self.nic
        st = nic.stats
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
        if pkt is None or pkt.dst_ip != nic.ip_int:
            st.rx_ignored += 1
            return
        if nic.verify_icrc and not verify_icrc(frame):
            st.rx_icrc_errors += 1
            nic.log_drop(now, UNCLASSIFIED, n, "icrc_error")
            return
        hook = nic.rx_hook                   # tenant filter / CPU work (host_cpu); None: off
        if hook is not None and hook(frame, pkt, now):
            return                           # dropped, or held until the CPU delivers it
        qp = nic.qp_by_qpn.get(pkt.dst_qp)
        if qp is None or pkt.src_ip != qp.remote_ip_int:
            st.rx_ignored += 1
            return
        nic.deliver(qp, pkt, n, now)
        if stack is not None:
            nic.rx_int(qp, pkt, stack, now)

    def pause_stats(self, now: int) -> int:
        """``stats.paused_ns``: time our classes (``priority`` and
        ``cnp_priority``) were paused by PFC, summed over the two, up to ``now``."""
        self.nic.stats.paused_ns = total = self.pfc.paused_ns(now)
        return total
