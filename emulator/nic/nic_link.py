"""The NIC's sockets and link-layer upkeep (``RoceNic`` is made of this and
``nic_rx.NicReceive``): opening the AF_PACKET sockets of an interface (or
taking a test's socket), closing them, the kernel's drop counters, and PFC's
view of the data classes. ``ib.nic.IbNic`` overrides ``_open_sockets`` and
``_link_credit`` for InfiniBand's link layer."""
from __future__ import annotations

from emulator import int_md
from emulator.clock import MonotonicClock
from emulator.wire import ETH_P_ALL, ETH_P_IP, ETH_P_PAUSE

from .packet_socket import (
    SocketRxStats, open_packet_socket, open_udp_absorber, set_timer_slack_ns,
)


class NicLink:
    """The sockets part of ``RoceNic`` (a mixin: the NIC's attributes)."""

    def _open_link(self, config, sock) -> None:
        """The NIC's sockets: ``sock`` (a test's), else the interface's."""
        if config.timer_slack_ns is not None:
            set_timer_slack_ns(config.timer_slack_ns)
        self._pfc_sock = None
        self._udp_absorber = None
        if sock is not None:
            self.sock = sock
        else:
            self._open_sockets(config.rcvbuf_bytes, config.sndbuf_bytes, config.absorb_udp)
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
        self._rx_stamp = isinstance(self.clock, MonotonicClock)

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
