"""The NIC's sockets (``RoceNic`` is made of this and ``nic_rx.NicReceive``):
the sockets of an interface, as its link layer (``link_layer``) opens them,
or a test's socket; closing them, the kernel's drop counters, and the link's
view of how long our classes were held."""
from __future__ import annotations

from emulator.clock import MonotonicClock

from .packet_socket import SocketRxStats, set_timer_slack_ns


class NicLink:
    """The sockets part of ``RoceNic`` (a mixin: the NIC's attributes)."""

    def _open_link(self, config, sock) -> None:
        """The NIC's sockets: ``sock`` (a test's), else the interface's."""
        if config.timer_slack_ns is not None:
            set_timer_slack_ns(config.timer_slack_ns)
        self._link_sock = None
        self._udp_absorber = None
        if sock is not None:
            self.sock = sock
        else:
            self.sock, self._link_sock, self._udp_absorber = self.link.open_sockets(
                config.rcvbuf_bytes, config.sndbuf_bytes, config.absorb_udp)
        self.sock.setblocking(False)
        self._rx_socks = (self.sock,)
        self._rx_fds = (self.sock.fileno(),)
        if self._link_sock is not None:
            self._link_sock.setblocking(False)
            self._rx_socks = (self.sock, self._link_sock)
            self._rx_fds = (self.sock.fileno(), self._link_sock.fileno())
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

    # -- teardown ------------------------------------------------------------
    def close(self):
        self.poll_kernel_stats()
        self.update_pause_stats()
        for s in (self.sock, self._link_sock, *(self._udp_absorber or ())):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass
        self._udp_absorber = None
        self._link_sock = None

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

    # -- PFC / credit ----------------------------------------------------------
    def update_pause_stats(self, now: int | None = None) -> int:
        """Bring the held-time stats up to date (``link_layer``'s
        ``pause_stats``: on Ethernet ``stats.paused_ns``, time our classes
        were paused by PFC, which it returns; on InfiniBand the credit stalls)."""
        return self.link.pause_stats(self.clock.now_ns() if now is None else now)

    def paused(self, priority: int, now: int | None = None) -> bool:
        """Is ``priority`` paused by PFC at ``now``?"""
        return (self.clock.now_ns() if now is None else now) < self.link.pause_until_ns[priority]
