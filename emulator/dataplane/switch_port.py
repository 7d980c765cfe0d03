"""A front-panel port of the embedded switch (``dataplane/switch.py``):
its packet socket (or virtual time's port), its pcap, and the scripted
faults of the link it sends on (``emulator.link_faults``): each frame is
judged when committed to the link, a degrade changes the port's rate."""
from __future__ import annotations

import socket
from typing import Callable

from emulator.clock import MONOTONIC, Clock
from emulator.dataplane.pcap import PcapWriter
from emulator.link import CommitWire
from emulator.link_faults import DROP_EVENT, UNCLASSIFIED, LinkFaults
from emulator.nic.packet_socket import SocketRxStats
from emulator.schema.switch import PortConfig
from emulator.vtime.member import stamp_ns
from emulator.wire import ETH_P_ALL

SOL_PACKET = 263
PACKET_QDISC_BYPASS = 20
PACKET_IGNORE_OUTGOING = 23


def open_port_socket(ifname: str) -> socket.socket:
    # Protocol 0 until bound: a socket opened with ETH_P_ALL taps every
    # interface at once, and binding it to one then waits for an RCU grace
    # period (synchronize_net: ~17 ms a port here, 70 ms of a leaf's start).
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    sock.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.bind((ifname, ETH_P_ALL))       # host order: Python sets sll_protocol = htons()
    sock.setblocking(False)
    return sock


RX_MAX_BYTES = 9216        # jumbo frames (a 4096-byte RoCE MTU frame is 4170 bytes)


def polling_reader(sock: socket.socket) -> Callable[[], bytes | None]:
    """A non-blocking socket's next frame, None when it holds none (as
    virtual time's ``VirtualPort.next_frame``)."""
    recv = sock.recv

    def next_frame() -> bytes | None:
        try:
            return recv(RX_MAX_BYTES)
        except BlockingIOError:
            return None
    return next_frame


class SwitchPort:
    """A front-panel port: its socket (and pcap); its queues live in the traffic manager.

    ``rx_kernel``: the kernel's counters of the port's socket. A frame the
    switch did not read before the socket's receive buffer filled is dropped
    by the kernel before ingress sees it -- a real switch's ingress discard,
    which no P4 counter can count: the stats' ``rx_socket_drops``."""

    def __init__(self, cfg: PortConfig, tm_port, pcap: PcapWriter | None = None,
                 clock: Clock = MONOTONIC, open_socket=open_port_socket):
        self.cfg = cfg
        self.port_no = cfg.port_no
        sock = open_socket(cfg.ifname)
        self.rx_kernel = SocketRxStats(sock)
        attach = getattr(clock, "attach_port", None)     # virtual time
        self.sock = sock if attach is None else attach(sock, cfg.ifname)
        # the switch's read of the next frame: None once none is left
        self.next_frame = polling_reader(sock) if attach is None else self.sock.next_frame
        self.tm_port = tm_port
        self.pcap = pcap
        self.clock = clock
        self.send_errors = 0
        # scripted faults of the link this port sends on (emulator.link_faults)
        self.faults = LinkFaults(cfg.faults) if cfg.faults is not None else None
        self.nominal_bps = cfg.rate_bps
        # the run's drop table (drops.csv): frames this port's link lost, and
        # frames with a bad FCS it dropped on arrival
        if self.faults is not None:
            self.faults.on_drop = self._link_lost
        # (arrival ns, bytes) of each: virtual time's port judges a frame's
        # FCS as the kernel hands it over, in an order of the kernel's
        # choosing, so they are logged at the end, in fabric-time order
        self.fcs_drops: list[tuple[int, int]] = []
        if attach is not None:
            self.sock.keep_bad_fcs = self._bad_fcs
        if self.faults is not None:
            tm_port.send = self.send_faulty
        else:
            tm_port.send = self.send if pcap is None else self.send_and_capture
        if attach is not None:
            sink = self.send_at if pcap is None else self.send_at_and_capture
            plain = pcap is None and self.faults is None   # (the per-frame path: no call per frame)
            self.sock.on_refused = self._refused
            tm_port.wire = CommitWire(tm_port.wire.delay_ns,
                                      sink if self.faults is None else self.send_at_faulty,
                                      self.sock.send_flight if plain else None)

    def _link_lost(self, sent_ns: float, c: int, nbytes: int, reason: str) -> None:
        self.tm_port.log(int(sent_ns), self.port_no, c, DROP_EVENT + reason, nbytes)

    def _bad_fcs(self, frame, arrival_ns: int) -> bool:
        """A frame with a bad FCS: dropped by the MAC, before any class is known."""
        self.fcs_drops.append((arrival_ns, len(frame)))
        return False

    def log_fcs_drops(self) -> None:
        """Log the frames dropped for a bad FCS (at the end of the run)."""
        for t_ns, nbytes in sorted(self.fcs_drops):
            self.tm_port.log(t_ns, self.port_no, UNCLASSIFIED, DROP_EVENT + "fcs_error", nbytes)
        self.fcs_drops.clear()

    def _refused(self) -> None:
        self.send_errors += 1

    def send(self, frame) -> None:
        try:
            self.sock.send(frame)
        except OSError:  # ENOBUFS/EAGAIN: the veth peer's backlog is full
            self.send_errors += 1

    def send_and_capture(self, frame) -> None:
        self.send(frame)
        self.pcap.write(self.clock.now_ns(), frame)

    def send_at(self, frame, arrival_ns: float) -> None:
        """Virtual time: hand ``frame`` over now, arriving at ``arrival_ns``
        (``send`` inlined: the per-frame path)."""
        sock = self.sock
        sock.due_ns = arrival_ns
        try:
            sock.send(frame)
        except OSError:
            self.send_errors += 1

    def send_at_and_capture(self, frame, arrival_ns: float) -> None:
        # stamped when it reaches the far end, as a dilated run's release is
        self.send_at(frame, arrival_ns)
        self.pcap.write(stamp_ns(arrival_ns), frame)

    def send_at_faulty(self, frame, arrival_ns: float) -> None:
        """``send_at`` through the link's faults: judged when its
        serialization ended (its arrival less the link's delay)."""
        frame, bad_fcs = self.faults.judge(frame, arrival_ns - self.tm_port.wire.delay_ns)
        if frame is None:
            return
        self.sock.due_ns = arrival_ns
        self._send_judged(frame, bad_fcs, stamp_ns(arrival_ns))

    def send_faulty(self, frame) -> None:
        """A dilated wire's release (``send``) through the link's faults."""
        now = self.clock.now_ns()
        frame, bad_fcs = self.faults.judge(frame, now - self.tm_port.wire.delay_ns)
        if frame is not None:
            self._send_judged(frame, bad_fcs, now)

    def _send_judged(self, frame, bad_fcs: bool, at_ns: int) -> None:
        send = getattr(self.sock, "send_bad_fcs", self.sock.send) if bad_fcs else self.sock.send
        try:
            send(frame)
        except OSError:
            self.send_errors += 1
        if self.pcap is not None:           # the bytes on the veth, a flipped bit included
            self.pcap.write(at_ns, frame)

    def set_rate(self, now_ns: int) -> None:
        """A degrade's rate change due by ``now_ns``: the port serializes at it from now."""
        fraction = self.faults.rate_changes_due(now_ns)
        if fraction is not None:
            rate = max(1, int(self.nominal_bps * fraction))
            self.tm_port.rate_bps = rate
            self.tm_port.ns_per_byte = 8e9 / rate
