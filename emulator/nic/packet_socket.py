"""Linux plumbing of the software RoCEv2 NIC: socket and prctl constants
Python does not export, timer slack, the classic BPF program that admits only
RoCEv2 (and PFC) frames, opening the AF_PACKET sockets and the UDP absorber,
and reading the kernel's drop counter. PFC and Ethernet constants are in
``emulator.wire``."""
from __future__ import annotations

import ctypes
import socket
import struct
import threading
from typing import Callable, Iterable

from emulator.int_md import INT_UDP_DPORT
from emulator.wire import ETH_P_IP, ETH_P_PAUSE, PFC_DST_MAC, PFC_OPCODE, ROCEV2_UDP_DPORT

from .roce import ip_to_int

# Linux constants Python's socket module does not export
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
PACKET_STATISTICS = 6
SO_ATTACH_FILTER = 26
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
PR_SET_TIMERSLACK = 29


def set_timer_slack_ns(ns: int = 1000) -> bool:
    """Shrink this thread's timer slack (default 50 us) so that short sleeps
    in the pacer wake close to on time. Returns False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(ns), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _bpf_assemble(prog) -> bytes:
    """Classic BPF from (code, jt, jf, k) tuples whose jt/jf may be label
    names; a bare string in the list defines a label at that point."""
    labels, out = {}, []
    for ins in prog:
        if isinstance(ins, str):
            labels[ins] = len(out)
        else:
            out.append(ins)
    code = []
    for i, (op, jt, jf, k) in enumerate(out):
        jt = labels[jt] - i - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - i - 1 if isinstance(jf, str) else jf
        if not (0 <= jt < 256 and 0 <= jf < 256):
            raise ValueError("BPF jump out of range")
        code.append(struct.pack("=HBBI", op, jt, jf, k))
    return b"".join(code)


def rocev2_bpf(ip: str, pfc: bool = True) -> bytes:
    """Classic BPF: accept IPv4 UDP to port 4791 (or to INT's port, RoCEv2
    with an INT stack: ``emulator.int_md``) and to ``ip``, unfragmented;
    with ``pfc`` also 802.1Qbb PFC frames (dst 01:80:C2:00:00:01, ethertype
    0x8808, opcode 0x0101). The NIC attaches it to its ETH_P_IP socket and to
    its ETH_P_PAUSE socket (each sees only its own ethertype; one program for
    both)."""
    mac_hi = int.from_bytes(PFC_DST_MAC[:4], "big")
    mac_lo = int.from_bytes(PFC_DST_MAC[4:], "big")
    prog = [
        (0x28, 0, 0, 12),                        # ldh [12]            ethertype
        (0x15, 0, "not_ip", ETH_P_IP),           # jeq IPv4
        (0x30, 0, 0, 23),                        # ldb [23]            IP proto
        (0x15, 0, "drop", 17),                   # jeq UDP
        (0x20, 0, 0, 30),                        # ld [30]             dst IP
        (0x15, 0, "drop", ip_to_int(ip)),        # jeq ours
        (0x28, 0, 0, 20),                        # ldh [20]            flags/fragment offset
        (0x45, "drop", 0, 0x1FFF),               # jset fragment -> drop
        (0xB1, 0, 0, 14),                        # ldxb 4*([14]&0xf)   IP header length
        (0x48, 0, 0, 16),                        # ldh [x+16]          UDP dport
        (0x15, "accept", 0, ROCEV2_UDP_DPORT),
        (0x15, "accept", "drop", INT_UDP_DPORT),
        "not_ip",
    ]
    if pfc:
        prog += [
            (0x15, 0, "drop", ETH_P_PAUSE),      # jeq 0x8808 (A: ethertype)
            (0x20, 0, 0, 0),                     # ld [0]              dst MAC 0..3
            (0x15, 0, "drop", mac_hi),
            (0x28, 0, 0, 4),                     # ldh [4]             dst MAC 4..5
            (0x15, 0, "drop", mac_lo),
            (0x28, 0, 0, 14),                    # ldh [14]            MAC control opcode
            (0x15, "accept", "drop", PFC_OPCODE),
        ]
    else:
        prog += [(0x06, 0, 0, 0)]                # ret drop
    prog += [
        "accept", (0x06, 0, 0, 0x40000),         # ret accept
        "drop", (0x06, 0, 0, 0),                 # ret drop
    ]
    return _bpf_assemble(prog)


def open_packet_socket(ifname: str, ip: str | None, rcvbuf: int, sndbuf: int, proto: int):
    """An AF_PACKET socket on ``ifname`` bound to ethertype ``proto``, with
    the RoCEv2/PFC filter for ``ip`` (None: no filter beyond the ethertype,
    for InfiniBand's carriers). RoCE goes through an ETH_P_IP socket
    and PFC through a separate ETH_P_PAUSE one (not one ETH_P_ALL socket:
    ETH_P_ALL taps see frames before tc ingress, and would see our own
    frames where PACKET_IGNORE_OUTGOING is missing)."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        if ip is not None:
            prog = rocev2_bpf(ip)
            cbuf = ctypes.create_string_buffer(prog)
            fprog = struct.pack("HL", len(prog) // 8, ctypes.addressof(cbuf))
            s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
        for opt, fallback, size in ((SO_RCVBUFFORCE, socket.SO_RCVBUF, rcvbuf),
                                    (SO_SNDBUFFORCE, socket.SO_SNDBUF, sndbuf)):
            try:
                s.setsockopt(socket.SOL_SOCKET, opt, size)
            except OSError:
                s.setsockopt(socket.SOL_SOCKET, fallback, size)
        try:
            s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        except OSError:
            pass  # < Linux 4.20: our own frames are then dropped by the dst-IP filter
        s.bind((ifname, proto))
    except BaseException:
        s.close()
        raise
    return s


def open_udp_absorber(port: int = ROCEV2_UDP_DPORT):
    """Bind UDP ``port`` (RoCEv2's, or INT's) so that the kernel (if the
    interface has our IP) queues RoCE datagrams to a socket we never read,
    instead of answering each with an ICMP port-unreachable. None if the
    port is taken."""
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        u.bind(("0.0.0.0", port))
        return u
    except OSError:
        u.close()
        return None


_TPACKET_STATS = struct.Struct("II")        # struct tpacket_stats {tp_packets, tp_drops}


class SocketRxStats:
    """The kernel's receive counters of one packet socket, accumulated.

    ``getsockopt(SOL_PACKET, PACKET_STATISTICS)`` gives ``struct
    tpacket_stats`` since the previous read and resets it in the kernel, so
    each reading is added here: ``packets``, frames that reached the socket
    (queued or dropped; not those its BPF filter refused), and ``drops``,
    frames the kernel dropped because the socket's receive buffer was full --
    the process did not read fast enough, a loss no wire has. One system
    call, made where stats are taken (a snapshot; the end of the run, before
    the socket closes), never per frame. A closed socket, or one that is not
    a packet socket (tests' socket pairs), reads nothing."""

    __slots__ = ("sock", "packets", "drops")

    def __init__(self, sock):
        self.sock = sock
        self.packets = 0
        self.drops = 0

    def poll(self) -> int:
        """Add the kernel's counters since the last poll; the drops among them."""
        sock = self.sock
        if sock.fileno() < 0:
            return 0
        try:
            raw = sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, _TPACKET_STATS.size)
        except (OSError, AttributeError):
            return 0
        packets, drops = _TPACKET_STATS.unpack(raw)
        self.packets += packets
        self.drops += drops
        return drops

    def clear(self) -> None:
        """Start a new window (a stats snapshot): totals from 0. What the
        kernel counted since the last poll belonged to the window that
        ended: read, so that the next poll starts from now."""
        self.poll()
        self.packets = 0
        self.drops = 0


def call_together(calls: Iterable[Callable[[], object]]) -> None:
    """Each call in a thread of its own, all joined; the first error raises
    once all are done. Closing a packet socket waits for an RCU grace period
    (~10 ms here): a switch's ports or a pack's NICs closed one after the
    other took tenths of a second of a run's end; together, about one."""
    errors: list[BaseException] = []

    def run(call) -> None:
        try:
            call()
        except BaseException as e:           # raised below, in the caller's thread
            errors.append(e)
    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
