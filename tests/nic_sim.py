"""Drive ``RoceNic``s for tests (no tests here): one thread, one clock.

``NicLoop(nics, clock)`` runs every NIC's ``run_once(0)`` until nothing is
left to do at the current time (no frame waiting in a socket), then moves
the clock to the earliest ``next_wake_ns`` of any NIC: with a
``ManualClock`` time jumps there (runs are deterministic and independent of
machine load); with the real clock it waits there through
``clock.wait_readable`` (real-socket tests). ``SimNicPair`` keeps the API
the NIC tests use (``start``, ``call``, ``wait``, ``cq``, ``close``) plus
``run_for`` in place of ``time.sleep``.
"""
from __future__ import annotations

import select
from collections import deque

from emulator.clock import ManualClock

_SAME_TIME_PASSES = 10_000       # a bug that never lets time move fails loudly


class NicLoop:
    def __init__(self, nics, clock, peers=(), on_peer_frame=None):
        """``peers``: extra sockets (a test playing a peer) drained after
        each pass into ``on_peer_frame(t_ns, frame)``."""
        self.nics = list(nics)
        self.clock = clock
        self.peers = list(peers)
        self.on_peer_frame = on_peer_frame
        self.after_pass = []         # callables run after each pass (collect completions)
        self.fds = [fd for n in self.nics for fd in n.rx_fds] + [p.fileno() for p in self.peers]

    def _drain_peers(self) -> bool:
        got = False
        for p in self.peers:
            while True:
                try:
                    f = p.recv(16384)
                except (BlockingIOError, InterruptedError):
                    break
                got = True
                self.on_peer_frame(self.clock.now_ns(), f)
        return got

    def pump(self) -> None:
        """Run the NICs until nothing more happens at the current time (on
        the real clock, where time moves by itself: one pass)."""
        manual = isinstance(self.clock, ManualClock)
        for _ in range(_SAME_TIME_PASSES):
            for n in self.nics:
                n.run_once(0)
            self._drain_peers()
            for fn in self.after_pass:
                fn()
            if not manual:
                return
            r, _, _ = select.select(self.fds, (), (), 0)
            if not r and all(n.next_wake_ns(self.clock.now_ns(), self.clock.now_ns() + 1)
                             > self.clock.now_ns() for n in self.nics):
                return
        raise RuntimeError("the NICs never let time move on")

    def run(self, until_ns: int, pred=None) -> bool:
        """Until ``pred()`` holds (True) or the clock reaches ``until_ns``."""
        clock = self.clock
        while True:
            self.pump()
            if pred is not None and pred():
                return True
            now = clock.now_ns()
            if now >= until_ns:
                return False
            wake = min(n.next_wake_ns(now, until_ns) for n in self.nics)
            clock.wait_readable(self.fds, max(wake, now + 1))

    def run_for(self, seconds: float) -> None:
        self.run(self.clock.now_ns() + int(seconds * 1e9))

    def wait(self, pred, timeout_s: float = 10.0) -> bool:
        return self.run(self.clock.now_ns() + int(timeout_s * 1e9), pred)


class DelayLine:
    """A FIFO queue on the wire between a NIC and its peer -- the queues of
    the switches between them, seen from the ends. Used as a ``ShimSock``
    hook (``line.hook``): a frame ``delay_ns(frame)`` gives a delay for
    (None: not queued, sent at once) waits here and goes into ``sock`` (the
    raw socket under the shim) once its delay is over and ``hold_until_ns``
    has passed (a test sets that to hold everything, e.g. a queue paused
    downstream), in order. Put it into the ``NicLoop``'s ``nics``
    (``run_once``, ``next_wake_ns``, ``rx_fds``): the loop's clock then
    stops when a frame is due."""

    rx_fds = ()

    def __init__(self, clock, sock, delay_ns):
        self.clock, self.sock, self.delay_ns = clock, sock, delay_ns
        self.q: deque = deque()            # (due_ns, frame), due times non-decreasing
        self.hold_until_ns = 0

    def hook(self, frame):
        d = self.delay_ns(frame)
        if d is None:
            return frame
        due = self.clock.now_ns() + d
        if self.q and due < self.q[-1][0]:   # FIFO: never overtake
            due = self.q[-1][0]
        self.q.append((due, frame))
        return None

    def _due(self) -> int:
        return max(self.q[0][0], self.hold_until_ns)

    def run_once(self, timeout_s: float = 0.0) -> None:
        now = self.clock.now_ns()
        while self.q and self._due() <= now:
            self.sock.send(self.q.popleft()[1])

    def next_wake_ns(self, now: int, limit: int) -> int:
        return min(limit, self._due()) if self.q else limit


def manual_clock() -> ManualClock:
    return ManualClock(start_ns=1_000_000_000)


class SimNicPair:
    """Two NICs ``a`` and ``b`` (made by a subclass, which then calls
    ``_init_loop``) driven by one ``NicLoop``; completions collect in
    ``cq[nic]``. ``timeout_s`` of ``wait`` is clock time."""

    def _init_loop(self, clock) -> None:
        self.clock = clock
        self.cq = {self.a: [], self.b: []}
        self.loop = NicLoop((self.a, self.b), clock)
        self.loop.after_pass.append(self._collect)

    def _collect(self) -> None:
        for n in (self.a, self.b):
            self.cq[n].extend(n.poll_cq())

    def start(self):
        return self

    def call(self, nic, fn):
        fn()

    def wait(self, pred, timeout_s=10.0) -> bool:
        """Until ``pred(cq_a, cq_b)`` holds (True) or ``timeout_s`` passes (False)."""
        return self.loop.wait(lambda: pred(self.cq[self.a], self.cq[self.b]), timeout_s)

    def run_for(self, seconds: float) -> None:
        self.loop.run_for(seconds)

    def close(self):
        self.a.close()
        self.b.close()
