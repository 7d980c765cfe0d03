"""One egress port of the embedded target's traffic manager: its queues, scheduler and wire.

``PriorityPort`` (``docs/lossless.md``): 8 FIFOs served strict priority (7
first) at the port's rate, a queue skipped while paused by a received PFC
frame; MAC control frames the switch generates go out before any queued data
(after the frame being serialized); then the ``Wire``. The port keeps its
own schedule (``busy_until``, fractional ns: a frame's time is not rounded,
or an MTU frame at 100 Gb/s would take 88 ns, not 88.48, and every link run
0.5 % fast): frames start back to back in emulated time even when served
late. It also holds the port's per-priority statistics and fabric.p4's
egress INT stamping, which happen at dequeue.

Pure, like the rest of the traffic manager: times come in as ``now_ns``
arguments, the rate is already dilated. ``serve`` is the per-packet dequeue
path: it inlines the shared buffer's release and the P4 egress counters
rather than calling out (see ``emulator.dataplane.shared_buffer``).
"""
from __future__ import annotations

from collections import deque
from math import ceil
from typing import TYPE_CHECKING, Callable

from emulator.clock import NEVER_NS as NEVER
from emulator.int_md import INT_OFFSET, INT_SHIM_BYTES, INT_UDP_DPORT, push_hop
from emulator.link import Wire
from emulator.wire import NUM_PRIORITIES, WIRE_OVERHEAD_BYTES

if TYPE_CHECKING:  # serve() is handed the traffic manager that owns the port
    from emulator.dataplane.tm import TrafficManager

_INT_HI, _INT_LO = INT_UDP_DPORT >> 8, INT_UDP_DPORT & 0xFF
_INT_MIN_FRAME = INT_OFFSET + INT_SHIM_BYTES
# the highest set bit of a priority mask: an index per frame, not a method call
_HIGHEST = tuple(mask.bit_length() - 1 for mask in range(1 << NUM_PRIORITIES))

# log(t_ns, port, priority, event, value): the raw events of docs/lossless.md
EventLog = Callable[[int, int, int, str, int], None]


def no_log(t_ns: int, port: int, priority: int, event: str, value: int) -> None:
    pass


class PriorityPort:
    """One egress port: 8 FIFOs, strict priority, PFC pause state, MAC control slot, wire."""

    __slots__ = ("port_no", "rate_bps", "ns_per_byte", "wire", "send", "log", "queues", "depth",
                 "max_depth", "nonempty", "paused", "paused_until", "paused_since", "next_expiry",
                 "paused_ns", "busy_until", "ctrl", "sampled", "tx_packets", "tx_bytes", "drops",
                 "drop_bytes", "headroom_drops", "ecn_marks", "pause_tx", "resume_tx",
                 "pause_rx", "resume_rx", "int_cfg", "int_tx_bytes")

    def __init__(self, port_no: int, rate_bps: int, delay_ns: int, log: EventLog = no_log):
        self.port_no = port_no
        self.rate_bps = rate_bps
        self.ns_per_byte = 8e9 / rate_bps
        self.wire = Wire(delay_ns)
        self.send: Callable = lambda frame: None   # the socket, set by the switch
        self.log = log
        self.queues = [deque() for _ in range(NUM_PRIORITIES)]   # (frame, ingress cell)
        self.depth = [0] * NUM_PRIORITIES
        self.max_depth = [0] * NUM_PRIORITIES
        self.nonempty = 0                       # bit p: queue p holds frames
        self.paused = 0                         # bit p: queue p is paused
        self.paused_until = [0] * NUM_PRIORITIES
        self.paused_since = [0] * NUM_PRIORITIES
        self.next_expiry = NEVER                # earliest paused_until of a paused queue
        self.paused_ns = [0] * NUM_PRIORITIES
        self.busy_until = 0                     # the link is serializing until then
        self.ctrl: deque = deque()              # (ready_ns, MAC control frame)
        self.sampled = [0] * NUM_PRIORITIES     # depths at the last queue-depth sample
        z = [0] * NUM_PRIORITIES
        self.tx_packets, self.tx_bytes = z[:], z[:]
        self.drops, self.drop_bytes, self.headroom_drops = z[:], z[:], z[:]
        self.ecn_marks = z[:]
        self.pause_tx, self.resume_tx, self.pause_rx, self.resume_rx = z[:], z[:], z[:], z[:]
        self.int_cfg = None                     # int_port: (rate_mbps, ts_q16); None: no INT
        self.int_tx_bytes = 0                   # fabric.p4's int_tx_bytes register (never cleared)

    # ------------------------------------------------------------ pause state
    def pause(self, priority: int, now_ns: int, until_ns: int) -> None:
        bit = 1 << priority
        if self.paused & bit and self.paused_until[priority] < now_ns:
            self.resume(priority, self.paused_until[priority])   # it ran out unserved: a new pause
        if not self.paused & bit:
            self.paused |= bit
            self.paused_since[priority] = now_ns
        self.paused_until[priority] = until_ns
        self._next_expiry()

    def resume(self, priority: int, at_ns: int) -> None:
        bit = 1 << priority
        if self.paused & bit:
            self.paused &= ~bit
            self.paused_ns[priority] += at_ns - self.paused_since[priority]
            self.log(at_ns, self.port_no, priority, "resume_rx", 0)
            self._next_expiry()

    def lift_pause(self, priority: int, now_ns: int) -> None:
        """The watchdog's storm: the queue stops honouring the pause in force
        (its paused time ends now; no PFC frame came, so no ``resume_rx``)."""
        bit = 1 << priority
        if self.paused & bit:
            self.paused &= ~bit
            self.paused_ns[priority] += max(0, min(now_ns, self.paused_until[priority])
                                            - self.paused_since[priority])
            self._next_expiry()

    def held(self, priority: int, now_ns: int) -> bool:
        """``priority`` is paused at ``now_ns`` (a pause that ran out by then is not)."""
        return bool(self.paused >> priority & 1) and self.paused_until[priority] > now_ns

    def _next_expiry(self) -> None:
        paused, until = self.paused, self.paused_until
        self.next_expiry = min((until[p] for p in range(NUM_PRIORITIES) if paused >> p & 1),
                               default=NEVER)

    def _expire(self, t_ns: int) -> None:
        """Resume, at their expiry times, the queues whose pause ran out by ``t_ns``."""
        until = self.paused_until
        for p in range(NUM_PRIORITIES):
            if self.paused >> p & 1 and until[p] <= t_ns:
                self.resume(p, until[p])

    def paused_ns_at(self, priority: int, now_ns: int) -> int:
        """Paused time so far, counting a pause still in force up to ``now_ns``."""
        total = self.paused_ns[priority]
        if self.paused >> priority & 1:
            total += max(0, min(now_ns, self.paused_until[priority]) - self.paused_since[priority])
        return total

    def clear_stats(self, now_ns: int) -> None:
        """Counters to zero, peaks from the depths held now, paused time from
        ``now_ns`` (a pause in force counts on from here), as a switch's
        "clear counters" does."""
        for counters in (self.tx_packets, self.tx_bytes, self.drops, self.drop_bytes,
                         self.headroom_drops, self.ecn_marks, self.pause_tx, self.resume_tx,
                         self.pause_rx, self.resume_rx, self.paused_ns):
            counters[:] = [0] * NUM_PRIORITIES
        self.max_depth[:] = self.depth
        for p in range(NUM_PRIORITIES):
            if self.paused >> p & 1:     # a pause that ran out by now adds nothing more
                self.paused_since[p] = min(now_ns, self.paused_until[p])
        self.wire.clear_stats()

    # ------------------------------------------------------------ scheduling
    def next_event_ns(self) -> int | None:
        """When ``serve`` next has something to do (None: not before a new frame)."""
        if self.ctrl or self.nonempty & ~self.paused:
            return self.busy_until
        if self.paused:
            return self.busy_until if self.busy_until > self.next_expiry else self.next_expiry
        return None

    def serve(self, now_ns: int, tm: "TrafficManager") -> None:
        """Put on the wire every frame whose turn has come by ``now_ns``: at each start
        time a pending MAC control frame first, else the highest non-paused queue; an idle
        link jumps to the next pause expiry or control frame, or to ``now_ns``. A frame
        leaves the buffer as its serialization starts: its cell is released (headroom first,
        XON if back at XON) and the egress counters count it -- inlined: per-packet path."""
        t = self.busy_until
        if t > now_ns:
            return
        # the loop's state in locals (one attribute lookup per call, not per frame)
        queues, depth, ctrl, wire, ns_per_byte = (self.queues, self.depth, self.ctrl, self.wire,
                                                  self.ns_per_byte)
        in_flight, delay, buf = wire.in_flight, wire.delay_ns, tm.buffer
        headroom_used, ingress_bytes, xoff = buf.headroom_used, buf.ingress_bytes, buf.xoff
        tx, tx_prio, tx_packets, tx_bytes = tm.tx, tm.tx_prio, self.tx_packets, self.tx_bytes
        no, int_cfg, int_tx_bytes = self.port_no, self.int_cfg, self.int_tx_bytes
        base = no * NUM_PRIORITIES
        freed = 0                                   # shared bytes released
        while t <= now_ns:
            if ctrl and ctrl[0][0] <= t:
                frame = ctrl.popleft()[1]
                t += (len(frame) + WIRE_OVERHEAD_BYTES) * ns_per_byte
                wire.put(t, frame)
                continue
            paused = self.paused
            if paused and self.next_expiry <= t:
                self._expire(t)
                paused = self.paused
            eligible = self.nonempty & ~paused
            if eligible:
                p = _HIGHEST[eligible]
                q = queues[p]
                frame, cell = q.popleft()
                if not q:
                    self.nonempty &= ~(1 << p)
                size = len(frame)
                depth[p] -= size
                # SharedBuffer.release, inlined (no headroom used: the else frees it all)
                used = headroom_used[cell]
                if used >= size:
                    headroom_used[cell] = used - size
                else:
                    headroom_used[cell] = 0
                    freed += size - used
                ingress_bytes[cell] = count = ingress_bytes[cell] - size
                if xoff[cell] and count <= buf.xon_bytes[cell] and not headroom_used[cell]:
                    xoff[cell] = False
                    tm._send_pfc(ceil(t), cell, 0)
                tx_packets[p] += 1
                tx_bytes[p] += size
                if tx is not None:
                    tx.packets[no] += 1
                    tx.bytes[no] += size
                    tx_prio.packets[base + p] += 1
                    tx_prio.bytes[base + p] += size
                int_tx_bytes += size
                if (int_cfg is not None and size > _INT_MIN_FRAME and frame[36] == _INT_HI
                        and frame[37] == _INT_LO and frame[23] == 17):
                    # fabric.p4's egress INT record; dequeue time in fabric ns (int_port's factor)
                    if type(frame) is not bytearray:
                        frame = bytearray(frame)
                    push_hop(frame, depth[p], int_tx_bytes, int(t * int_cfg[1]) // 65_536_000, int_cfg[0])
                t += (size + WIRE_OVERHEAD_BYTES) * ns_per_byte
                due = t + delay
                if in_flight and due < in_flight[-1][0]:
                    wire.put(t, frame)
                else:
                    in_flight.append((due, frame))
                continue
            # Idle at t: the next thing that can start, if it is due by now.
            nxt = self.next_expiry if paused else NEVER
            if ctrl and ctrl[0][0] < nxt:
                nxt = ctrl[0][0]
            if nxt > now_ns:
                t = now_ns
                break
            t = nxt
        self.busy_until, self.int_tx_bytes = t, int_tx_bytes
        if freed:
            buf.shared_used -= freed

