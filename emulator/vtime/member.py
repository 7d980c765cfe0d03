"""A member process's side of virtual time: its clock and its ports.

``VirtualClock`` is an ``emulator.clock.Clock``: the loops of the switch,
the switch pack, the host agent and the agent pack run on it unchanged.
``now_ns`` is fabric ns (D = 1). ``wait_readable(fds, deadline)`` returns
at the earliest of the deadline and the next frame due on ``fds``, at that
exact time, as long as it lies in the current window; past it, the member
reports to the coordinator and blocks until the next window opens, then
reads its sockets until it holds every frame sent to it, link by link.

``VirtualPort`` wraps a packet socket: ``send`` appends the arrival time
(``due_ns``, set by the link's ``CommitWire``) as a trailer and counts the
frame for the report; ``recv``/``recv_into`` give the next frame of the
port's inbox once its arrival time has come (``BlockingIOError`` before,
as a non-blocking socket with nothing to read). ``send_bad_fcs`` sends a
frame a bit error hit (``emulator.link_faults``): its trailer says the FCS
is bad, and the receiving port drops it as a MAC would (``fcs_errors``)
unless its owner's ``keep_bad_fcs(frame, arrival_ns)`` takes it (a NIC whose
ICRC check then fails, ``nic.link_layer``); a switch port's logs the drop.
"""
from __future__ import annotations

import errno
from heapq import heappop, heappush
from math import ceil
import select
import socket
import time
from typing import Callable, Sequence
from emulator.clock import MONOTONIC

from . import protocol
from .protocol import NEVER
from .trailer import BAD_FCS_MAGIC, MAGIC, TRAILER, TRAILER_BYTES

_pack_trailer = TRAILER.pack
_unpack_trailer = TRAILER.unpack_from
_join = b"".join

# The fabric-time epoch as a Unix time: every virtual run's stamps are the
# same (pcaps, completions), 2023-11-14T22:13:20Z, as tests' ManualClock.
VIRTUAL_UNIX_EPOCH_NS = 1_700_000_000_000_000_000
RX_MAX_BYTES = 9216 + TRAILER_BYTES
STALL_LIMIT_S = 60.0        # frames announced but never read: the run is broken
ENDED_IDLE_S = 0.02         # after the end, a loop's wait sleeps this long (until told to stop)


class VirtualTimeError(RuntimeError):
    """The window protocol broke (a frame lost in the kernel, the coordinator gone mid-window)."""


# The arrival a frame due at a time is stamped with, and the ns the clock
# moves to for it: a paced NIC's and a switch port's due times are
# fractional, and nothing is taken early -- their ceiling.
stamp_ns: Callable[[float], int] = ceil


def _stamped(frame, magic: bytes, due_ns: float) -> tuple[int, bytes]:
    """(arrival ns, the frame with its trailer) (``stamp_ns``); one buffer, not
    sendmsg's two (its vector costs more than a copy of the frame: a switch's
    bytes or bytearray, a NIC's memoryview)."""
    arrival = stamp_ns(due_ns)
    tr = _pack_trailer(magic, arrival)
    kind = type(frame)
    return arrival, (frame + tr if kind is bytes or kind is bytearray else _join((frame, tr)))


class VirtualPort:
    """A packet socket under virtual time (see the module docstring)."""

    __slots__ = ("sock", "clock", "fd", "ifname", "index", "inbox", "due_ns", "_seq",
                 "rx_frames", "tx_frames", "fcs_errors", "keep_bad_fcs", "on_refused")

    def __init__(self, sock: socket.socket, clock: "VirtualClock", ifname: str, index: int):
        self.sock = sock
        self.clock = clock
        self.fd = sock.fileno()
        self.ifname = ifname
        self.index = index
        self.inbox: list[tuple[int, int, bytes]] = []   # heap of (arrival ns, seq, frame)
        self.due_ns: float = 0       # the arrival time of the next frame sent
        self._seq = 0
        self.rx_frames = self.tx_frames = 0
        self.fcs_errors = 0          # frames with a bad FCS dropped on arrival
        self.keep_bad_fcs = None     # (frame, arrival ns) -> True: deliver it anyway (None: drop every one)
        self.on_refused = None       # send_flight: a frame the kernel refused for good (None: raise)

    # ``recv``/``next_frame`` hand out each frame as bytes of its own (a reader needs no buffer)
    owns_frames = True

    def fileno(self) -> int:
        return self.fd

    def setblocking(self, flag: bool) -> None:
        self.sock.setblocking(False)       # reads never block: the inbox is the socket

    def getsockopt(self, *args):
        return self.sock.getsockopt(*args)

    def setsockopt(self, *args):
        return self.sock.setsockopt(*args)

    def close(self) -> None:
        self.sock.close()

    # -- receive ---------------------------------------------------------------
    def recv(self, bufsize: int = RX_MAX_BYTES) -> bytes:
        frame = self.next_frame()
        if frame is None:
            raise BlockingIOError(errno.EAGAIN, "no frame due")
        return frame

    def next_frame(self) -> bytes | None:
        """``recv``, but None when no frame is due (a reader's loop ends
        without an exception: one per wake-up otherwise)."""
        inbox = self.inbox
        if inbox and inbox[0][0] <= self.clock._now:
            frame = heappop(inbox)[2]
            if not inbox:
                self.clock._pending.discard(self)
            return frame
        return None

    def recv_into(self, buf) -> int:
        frame = self.recv()
        n = len(frame)
        buf[:n] = frame
        return n

    # -- send ------------------------------------------------------------------
    def send(self, frame, magic: bytes = MAGIC) -> int:
        arrival, data = _stamped(frame, magic, self.due_ns)
        # VirtualClock._sent, inlined: the per-frame path
        clock, i = self.clock, self.index
        clock._sent_n[i] += 1
        if arrival < clock._sent_min[i]:
            clock._sent_min[i] = arrival
        clock._sent_links.add(i)
        try:
            self.sock.send(data)
        except OSError as e:
            self._send_again(data, e)
        self.tx_frames += 1
        return len(frame)

    def send_flight(self, in_flight) -> None:
        """``send`` of each (arrival ns, frame) ``in_flight`` holds, in
        order, emptying it: a switch port's committed frames, in one call
        (``link.CommitWire``'s ``flush``). A frame the kernel refuses for
        good goes to ``on_refused()`` (None: raised)."""
        clock, i = self.clock, self.index
        sent_min = clock._sent_min
        send = self.sock.send
        n = len(in_flight)
        while in_flight:
            due, frame = in_flight.popleft()
            arrival, data = _stamped(frame, MAGIC, due)
            if arrival < sent_min[i]:
                sent_min[i] = arrival
            try:
                send(data)
            except OSError as e:
                try:
                    self._send_again(data, e)
                except OSError:
                    if self.on_refused is None:
                        raise
                    self.on_refused()
        clock._sent_n[i] += n
        clock._sent_links.add(i)
        self.tx_frames += n

    def _send_again(self, data, refused: OSError) -> None:
        """``send(data)`` again until the kernel takes it (it refused
        with ``refused``): the peer's backlog is full, and fabric time
        waits, the wall does not."""
        for attempt in range(1, 10_000):
            if not isinstance(refused, (BlockingIOError, InterruptedError)) \
                    and refused.errno not in (errno.ENOBUFS, errno.EAGAIN):
                raise refused
            time.sleep(50e-6 if attempt <= 1000 else 1e-3)
            try:
                self.sock.send(data)
                return
            except OSError as e:
                refused = e
        raise VirtualTimeError(f"{self.ifname}: the kernel refused a frame for 10 s")

    def send_at(self, frame, arrival_ns) -> int:
        self.due_ns = arrival_ns
        return self.send(frame)

    def send_bad_fcs(self, frame) -> int:
        """``send``, with a trailer that says the frame's FCS is bad."""
        return self.send(frame, BAD_FCS_MAGIC)


class VirtualClock:
    """The clock of one member process (see the module docstring).

    ``done``: a member whose end matters (an agent) says whether its work is
    done; the run ends once every such member's is. ``on_end``: called once
    when the coordinator ends the run (a loop's stop flag)."""

    def __init__(self, socket_path: str, name: str, agent: bool = False,
                 unix_epoch_ns: int = VIRTUAL_UNIX_EPOCH_NS):
        self.name = name
        self.agent = agent
        self.unix_epoch_ns = unix_epoch_ns
        self._now = 0
        self._end = 0                 # the open window's end (exclusive); none open yet
        self._ports: dict[int, VirtualPort] = {}
        self._port_list: list[VirtualPort] = []
        self._pending: set[VirtualPort] = set()     # ports with frames in their inbox
        self._fds: Sequence[int] | None = None      # the fds of the last wait, and
        self._fd_rank: dict[int, int] = {}          # each one's place in them
        self._waits_all = False                     # they are every port's
        self._sent_n: list[int] = []
        self._sent_min: list[int] = []
        self._sent_links: set[int] = set()
        self._rx_expected: list[int] = []     # per port: frames sent to it in all (GO)
        self.rx_frames = 0            # trailered frames read from the sockets
        self.foreign_frames = 0       # frames without our trailer: dropped (counted)
        self.early_frames = 0         # frames that arrived before now (a protocol bug if ever > 0)
        self.windows = 0
        self.wait_wall_ns = 0         # blocked for the next window (the others' work, the barrier)
        self.ended = False
        self.done: Callable[[], bool] = lambda: True
        self.on_end: Callable[[], None] | None = None
        self._hello_sent = False
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conn.connect(socket_path)

    # -- the Clock protocol -------------------------------------------------------
    def now_ns(self) -> int:
        return self._now

    def unix_ns(self) -> int:
        return self.unix_epoch_ns + self._now

    def sleep_until_ns(self, deadline_ns: int) -> None:
        self.wait_readable((), deadline_ns)

    def wait_readable(self, fds: Sequence[int], deadline_ns: int) -> Sequence[int]:
        if self.ended:
            time.sleep(ENDED_IDLE_S)
            return ()
        if fds is not self._fds:        # a loop waits on the same list until its set changes
            self._fds = fds
            self._fd_rank = {fd: i for i, fd in enumerate(fds)}
            # a loop that waits on every port (a pack's): none to leave out
            self._waits_all = all(fd in self._fd_rank for fd in self._ports)
        rank = self._fd_rank
        pending = self._pending
        while True:
            # only the ports with frames waiting, of those waited on: a
            # switch pack has dozens of ports and few hold a frame at a time
            t = deadline_ns
            if self._waits_all:
                for p in pending:
                    head = p.inbox[0][0]
                    if head < t:
                        t = head
            else:
                for p in pending:
                    head = p.inbox[0][0]
                    if head < t and p.fd in rank:
                        t = head
            if t < self._end:
                if t > self._now:
                    self._now = ceil(t)
                now = self._now
                if self._waits_all:
                    due = [p.fd for p in pending if p.inbox[0][0] <= now]
                else:
                    due = [p.fd for p in pending if p.inbox[0][0] <= now and p.fd in rank]
                if len(due) > 1:            # in the caller's order, as a select's would be
                    due.sort(key=rank.__getitem__)
                return due
            self._next_window(t)
            if self.ended:
                if self.on_end is not None:
                    self.on_end()
                return ()

    # -- ports -------------------------------------------------------------------
    def attach_port(self, sock: socket.socket, ifname: str) -> VirtualPort:
        """``sock`` (a packet socket on the veth end ``ifname``) as a port of this member."""
        if self._hello_sent:
            raise VirtualTimeError(f"{self.name}: port {ifname} attached after the first window")
        sock.setblocking(False)
        port = VirtualPort(sock, self, ifname, len(self._port_list))
        self._ports[port.fd] = port
        self._port_list.append(port)
        self._sent_n.append(0)
        self._sent_min.append(NEVER)
        self._rx_expected.append(0)
        self._fds = None                # the next wait ranks its fds again
        return port

    def _sent(self, index: int, arrival_ns: int) -> None:
        self._sent_n[index] += 1
        if arrival_ns < self._sent_min[index]:
            self._sent_min[index] = arrival_ns
        self._sent_links.add(index)

    # -- windows -----------------------------------------------------------------
    def _next_window(self, next_ns: int) -> None:
        """Report (next event ``next_ns``, what was sent), then wait for the next window."""
        conn = self._conn
        if not self._hello_sent:
            protocol.send_msg(conn, protocol.hello(self.name, [p.ifname for p in self._port_list],
                                                   self.agent))
            self._hello_sent = True
        protocol.send_msg(conn, protocol.report(int(next_ns) if next_ns < NEVER else NEVER,
                                                self.done(), self._take_sent()))
        t0 = time.monotonic_ns()          # wall time: how the run's CPU was spent, never a model input
        msg = protocol.recv_msg(conn)
        self.wait_wall_ns += time.monotonic_ns() - t0
        if not msg or msg[:1] == protocol.END:
            self.ended = True
            return
        start_ns, end_ns, new_rx = protocol.parse_go(msg)
        self._end = end_ns
        for index, frames in new_rx:
            self._rx_expected[index] += frames
        self.windows += 1
        self._read_sockets(start_ns)

    def _take_sent(self) -> list[tuple[int, int, int]]:
        out = []
        for i in sorted(self._sent_links):
            out.append((i, self._sent_n[i], self._sent_min[i]))
            self._sent_n[i] = 0
            self._sent_min[i] = NEVER
        self._sent_links.clear()
        return out

    def _read_sockets(self, start_ns: int) -> None:
        """Read the ports' sockets until each port holds every frame sent to
        it (``_rx_expected``), and no more: a port owed nothing is not read
        (a syscall and an exception each, every window), and what a peer
        sends in this window waits in its socket for the GO that counts it.
        None may arrive before the window's start (``start_ns``): its time
        would be gone for us already -- a broken protocol, never a result:
        ``VirtualTimeError``."""
        stalled_since = None
        expected = self._rx_expected
        short = [p for p in self._port_list if p.rx_frames < expected[p.index]]
        while short:
            got = 0
            for p in short:
                got += self._read_port(p, start_ns, expected[p.index] - p.rx_frames)
            short = [p for p in short if p.rx_frames < expected[p.index]]
            if not short:
                return
            if got:
                stalled_since = None
            elif stalled_since is None:
                stalled_since = time.monotonic()
            elif time.monotonic() - stalled_since > STALL_LIMIT_S:
                raise VirtualTimeError(
                    f"{self.name}: {expected[short[0].index] - short[0].rx_frames} frames sent "
                    f"to it on {short[0].ifname} never arrived (lost in the kernel?)")
            select.select([p.fd for p in short], (), (), 0.5)

    def _read_port(self, p: VirtualPort, start_ns: int, owed: int) -> int:
        """Up to ``owed`` of our frames from ``p``'s socket, into its inbox
        (``_read_sockets``), fewer if it holds fewer yet; returns how many."""
        recv = p.sock.recv
        inbox = p.inbox
        got = 0
        while got < owed:
            try:
                data = recv(RX_MAX_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            n = len(data) - TRAILER_BYTES
            if n < 0:
                self.foreign_frames += 1
                continue
            magic, arrival = _unpack_trailer(data, n)
            bad_fcs = magic != MAGIC
            if bad_fcs and magic != BAD_FCS_MAGIC:
                self.foreign_frames += 1
                continue
            if arrival < start_ns:
                self.early_frames += 1
                raise VirtualTimeError(
                    f"{self.name}: a frame on {p.ifname} arrives at {arrival} ns, before "
                    f"the window that opened at {start_ns} ns")
            got += 1
            if bad_fcs and (p.keep_bad_fcs is None or not p.keep_bad_fcs(data[:n], arrival)):
                p.fcs_errors += 1       # arrived (the window counts it), and dropped
                continue
            # into the inbox (its arrival, then the order read, first)
            p._seq += 1
            heappush(inbox, (arrival, p._seq, data[:n]))
        if inbox:
            self._pending.add(p)
        p.rx_frames += got
        self.rx_frames += got
        return got

    def leave(self) -> None:
        """Say goodbye (with what was sent since the last report) and close.
        A member that leaves before the end: its peers' frames to it are not waited for."""
        if self._conn.fileno() < 0:
            return
        try:
            if not self.ended:
                if not self._hello_sent:
                    protocol.send_msg(self._conn, protocol.hello(
                        self.name, [p.ifname for p in self._port_list], self.agent))
                    self._hello_sent = True
                protocol.send_msg(self._conn, protocol.report(NEVER, True, self._take_sent(), bye=True))
        except OSError:
            pass
        finally:
            self._conn.close()

    def stats(self) -> dict:
        return {"clock": self.name, "windows": self.windows, "rx_frames": self.rx_frames,
                "rx_expected": sum(self._rx_expected),
                "foreign_frames": self.foreign_frames, "early_frames": self.early_frames,
                "end_ns": self._now, "wait_wall_s": round(self.wait_wall_ns / 1e9, 3),
                "cpu_s": round(time.process_time(), 3)}


def process_clock(vtime_socket: str | None, name: str, agent: bool = False, default=None):
    """The clock of a run's process: its ``VirtualClock`` when the config
    names a coordinator (a virtual-time run), else ``default`` (the real
    clock: ``emulator.clock.MONOTONIC``)."""
    if vtime_socket:
        return VirtualClock(vtime_socket, name, agent)
    if default is None:
        return MONOTONIC
    return default


def join_virtual_time(clock, done, stop_flag: list) -> Callable[[], None]:
    """Under virtual time (``emulator.vtime``), tell ``clock`` how to ask
    whether the process's work is ``done`` and to set ``stop_flag`` when the
    run ends; returns what to call once the loop has ended (the member
    leaves: nobody waits for it any more). Else nothing to do."""
    if not hasattr(clock, "leave"):
        return lambda: None
    clock.done = done
    clock.on_end = lambda: stop_flag.__setitem__(0, True)
    return clock.leave
