"""The runner's side of virtual time: members register, then windows open one after another.

``Coordinator`` listens on a Unix stream socket (``path``; members connect
to it from any network namespace, a cluster's remote servers through the
runner's ssh connection). Each member says hello with the veth ends it
owns; ``peer_of`` (from the topology) says which member receives what a
link's other end sends (a NIC no process drives has none: what is sent to
it is nobody's to wait for). Once every process of the run has joined (the
runner knows how many) and each has reported once, the window loop runs in
a thread:

    T   = the earliest next event of any member (an idle stretch is skipped)
    end = T + lookahead_ns
    GO(end, frames it must hold) to each member with an event before end
    their REPORTs: next events, then frames sent per link (a receiver's
    next event is at most the earliest arrival sent to it)

until every agent member is done (or has left), or ``finish`` is called:
then END to everyone. A member that dies mid-window ends the run too
(``error`` says which).

``between_windows(end)``, if set, is called once every member has reported
a window and before the next opens: nothing before ``end`` can happen any
more (the controller handles the port reports of the window in fabric
order then, ``control/reroute.py``). What it raises ends the run (``error``).
"""
from __future__ import annotations

import os
import select
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from emulator.wire import IB_FC_PACKET_BYTES, WIRE_OVERHEAD_BYTES

from . import protocol
from .protocol import NEVER

MIN_FRAME_BYTES = 60             # an Ethernet frame without FCS, padded (PFC, ACKs are longer)
# the least time a frame takes on a link, in bytes: Ethernet's smallest frame
# and its preamble, FCS and gap; InfiniBand's flow-control packet
ETHERNET_MIN_WIRE_BYTES = MIN_FRAME_BYTES + WIRE_OVERHEAD_BYTES
IB_MIN_WIRE_BYTES = IB_FC_PACKET_BYTES


def lookahead_ns(links, min_wire_bytes: int = ETHERNET_MIN_WIRE_BYTES) -> int:
    """The window: no frame committed at t arrives before t + this, on any
    link (``links``: ``topo.graph.Link``s, fabric rates and delays): its
    delay plus the serialization of the shortest thing a link carries."""
    best = NEVER
    for link in links:
        best = min(best, int(link.delay_ns + min_wire_bytes * 8e9 / link.rate_bps))
    return max(1, best if best < NEVER else 1)


def peer_map(fabric) -> dict[str, str]:
    """Every link end's interface name -> the other end's."""
    peers = {}
    for link in fabric.links:
        a = fabric.port(link.a, link.a_port).ifname
        b = fabric.port(link.b, link.b_port).ifname
        peers[a], peers[b] = b, a
    return peers


@dataclass(eq=False)
class Member:
    conn: socket.socket
    name: str
    agent: bool
    ifnames: list[str]
    # per link index: the member receiving what it sends there, and its link index
    targets: list["tuple[Member, int] | None"] = field(default_factory=list)
    next_ns: int = NEVER
    new_rx: dict[int, int] = field(default_factory=dict)    # link index -> frames since its GO
    done: bool = False
    alive: bool = True


class Coordinator:
    """See the module docstring. ``start()`` once the agents were released;
    ``finish()`` ends the run from outside (wall limit, Ctrl-C)."""

    def __init__(self, peer_of: dict[str, str], lookahead_ns: int, path: str | None = None):
        self.peer_of = peer_of
        self.lookahead_ns = int(lookahead_ns)
        self._dir = None
        if path is None:
            self._dir = tempfile.mkdtemp(prefix="fabric-emu-vt-")
            path = os.path.join(self._dir, "coordinator")
        self.path = path
        self._listen = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listen.bind(path)
        os.chmod(path, 0o600)
        self._listen.listen(256)
        self.members: list[Member] = []
        self._pending: list[socket.socket] = []     # accepted, hello not read yet
        self._owner: dict[str, Member] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.windows = 0
        self.now_ns = 0                 # the last window's start
        self.ended = threading.Event()
        self.wall_s = 0.0
        self.between_windows: Callable[[int], None] | None = None

    # -- registration ---------------------------------------------------------------
    def _accept_ready(self, timeout_s: float) -> None:
        """Accept connections and read hellos for up to ``timeout_s``."""
        r, _, _ = select.select([self._listen, *self._pending], (), (), timeout_s)
        for s in r:
            if s is self._listen:
                conn, _ = self._listen.accept()
                self._pending.append(conn)
                continue
            self._pending.remove(s)
            msg = protocol.recv_msg(s)
            if not msg:
                s.close()
                continue
            h = protocol.parse_hello(msg)
            m = Member(s, h["name"], bool(h["agent"]), list(h["ifnames"]))
            self.members.append(m)
            for ifname in m.ifnames:
                self._owner[ifname] = m

    def missing(self) -> list[str]:
        """Link ends no member has claimed yet."""
        return sorted(set(self.peer_of) - set(self._owner))

    def _register_all(self, timeout_s: float, expected: int | None) -> None:
        """Until ``expected`` members said hello (None: until every link end
        has its member; a NIC no process drives has none, and what is sent
        to it is nobody's to wait for)."""
        deadline = time.monotonic() + timeout_s
        while len(self.members) < expected if expected is not None else self.missing():
            if self._stop.is_set():
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{len(self.members)} of {expected} processes joined; no member "
                                   f"yet for {', '.join(self.missing()[:4])}")
            self._accept_ready(min(left, 0.1))
        for m in self.members:
            m.targets = [None if (r := self._owner.get(peer := self.peer_of.get(i, ""))) is None
                         else (r, r.ifnames.index(peer)) for i in m.ifnames]
        # each one's first report: its first event, and what it sent at fabric
        # time 0 before its first wait (an agent's first frames)
        self._deliver([(m, self._take_report(m)) for m in self.members], end=0)

    # -- the window loop ------------------------------------------------------------
    def start(self, expected_members: int | None = None, register_timeout_s: float = 120.0) -> None:
        """Open the windows once ``expected_members`` processes joined (the
        run's switch and agent processes)."""
        self._thread = threading.Thread(target=self._run,
                                        args=(register_timeout_s, expected_members),
                                        name="vtime-coordinator", daemon=True)
        self._thread.start()

    def _run(self, register_timeout_s: float, expected: int | None) -> None:
        t0 = time.monotonic()
        try:
            self._register_all(register_timeout_s, expected)
            self._loop()
        except Exception as e:              # a member died, a timeout: the run ends, saying why
            self.error = f"virtual time: {e}"
        finally:
            self._end_all()
            self.wall_s = time.monotonic() - t0
            self.ended.set()

    def _loop(self) -> None:
        L = self.lookahead_ns
        members = self.members
        while not self._stop.is_set():
            alive = [m for m in members if m.alive]
            agents = [m for m in alive if m.agent]
            if not agents or all(m.done for m in agents):
                return
            t = min(m.next_ns for m in alive)
            if t >= NEVER:
                return                                  # nothing will ever happen again
            end = t + L
            active = [m for m in alive if m.next_ns < end]
            self.now_ns = t
            self.windows += 1
            for m in active:
                new_rx, m.new_rx = sorted(m.new_rx.items()), {}
                protocol.send_msg(m.conn, protocol.go(t, end, new_rx))
            self._deliver([(m, self._take_report(m)) for m in active], end)
            if self.between_windows is not None:
                self.between_windows(end)

    def _deliver(self, reports: list[tuple[Member, list]], end: int) -> None:
        """The frames each report says its member sent: counted for their
        receivers, whose next event is at most the earliest arrival. After
        every report's next event is in (a receiver's report would raise it)."""
        for m, entries in reports:
            for index, frames, first_ns in entries:
                if first_ns < end:
                    raise RuntimeError(
                        f"{m.name} sent a frame on {m.ifnames[index]} arriving at {first_ns} ns, "
                        f"inside the window it was sent in (until {end} ns): a link faster than "
                        f"the lookahead of {self.lookahead_ns} ns")
                target = m.targets[index] if index < len(m.targets) else None
                if target is None or not target[0].alive:
                    continue
                r, r_index = target
                r.new_rx[r_index] = r.new_rx.get(r_index, 0) + frames
                if first_ns < r.next_ns:
                    r.next_ns = first_ns

    def _take_report(self, m: Member) -> list[tuple[int, int, int]]:
        try:
            msg = protocol.recv_msg(m.conn)
        except OSError as e:                 # reset: its process died
            msg = b""
            m.alive = False
            raise RuntimeError(f"{m.name} went away mid-window ({e.strerror})") from None
        if not msg:
            m.alive = False
            raise RuntimeError(f"{m.name} went away mid-window")
        kind, next_ns, done, entries = protocol.parse_report(msg)
        m.next_ns = next_ns
        m.done = done
        if kind == protocol.BYE:
            m.alive = False
            m.next_ns = NEVER
        return entries

    def _end_all(self) -> None:
        for m in self.members:
            if m.alive:
                try:
                    protocol.send_msg(m.conn, protocol.END)
                except OSError:
                    pass
        for s in self._pending:
            s.close()

    def finish(self, timeout_s: float = 10.0) -> None:
        """End the run (the window in progress completes first) and wait for the loop."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        else:
            self._end_all()
            self.ended.set()

    def close(self) -> None:
        self.finish()
        for m in self.members:
            m.conn.close()
        self._listen.close()
        try:
            os.unlink(self.path)
            if self._dir is not None:
                os.rmdir(self._dir)
        except OSError:
            pass

    def stats(self) -> dict:
        return {"windows": self.windows, "lookahead_ns": self.lookahead_ns,
                "members": len(self.members), "fabric_ns": self.now_ns,
                "coordinator_wall_s": round(self.wall_s, 3)}
