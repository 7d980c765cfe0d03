"""The traffic manager of the embedded target: shared buffer, priority queues, PFC, ECN.

What ``docs/lossless.md`` specifies, in htsim-style small objects:

* ``SharedBuffer``: one pool of ``buffer_bytes`` per switch. Every admitted
  packet is accounted to its (ingress port, priority) "cell" until it leaves.
  Lossy admission: room in the shared pool (buffer minus the headroom that
  ``pfc_config`` reserves) and Broadcom-style dynamic threshold on the egress
  queue (depth below alpha × free shared bytes, alpha = 1: one congested
  queue gets at most half of the free pool). Lossless admission:
  the shared pool while the cell's counter is below XOFF, then the cell's own
  headroom; a drop only when the headroom is exhausted (``headroom_drops``).
* ``PriorityPort``: one egress port, 8 FIFOs served strict priority (7
  first) at the port's rate, a queue skipped while paused by a received PFC
  frame; MAC control frames the switch generates go out before any queued
  data (after the frame being serialized); then the ``Wire``.
* ``TrafficManager``: admission, ECN marking at enqueue (RED on the depth
  the packet finds, seeded ``random.Random``), PFC generation (XOFF when a
  lossless cell crosses XOFF or spills into headroom, refreshed every half
  pause time while above XON, XON when back at or below XON with the
  headroom empty), PFC reception, P4 counters and per (port, priority)
  statistics and events.

Everything here is pure: times come in as ``now_ns`` arguments (wall
nanoseconds of the switch's clock, ``emulator.clock``), rates already
dilated. A port keeps its own schedule (``busy_until``): frames start back
to back in emulated time even when served late.
"""
from __future__ import annotations

import random
from collections import deque
from typing import Callable

from emulator.clock import TimerHeap
from emulator.dataplane.pfc import XOFF_QUANTA, pause_frame, pause_ns
from emulator.int_md import INT_OFFSET, INT_SHIM_BYTES, INT_UDP_DPORT, push_hop
from emulator.link import Wire
from emulator.wire import CPU_PORT, NUM_PRIORITIES, WIRE_OVERHEAD_BYTES

MAX_PORTS = CPU_PORT + 1       # port numbers index the cells; front-panel ports are below CPU_PORT
CELLS = MAX_PORTS * NUM_PRIORITIES
NEVER = 1 << 62                # a time no event reaches
_INT_HI, _INT_LO = INT_UDP_DPORT >> 8, INT_UDP_DPORT & 0xFF
_INT_MIN_FRAME = INT_OFFSET + INT_SHIM_BYTES

# log(t_ns, port, priority, event, value): the raw events of docs/lossless.md
EventLog = Callable[[int, int, int, str, int], None]


def _no_log(t_ns: int, port: int, priority: int, event: str, value: int) -> None:
    pass


class SharedBuffer:
    """Shared pool + per-(ingress port, priority) counters and headroom.

    The admission and release methods are the model; ``TrafficManager.enqueue``
    and ``PriorityPort.serve`` inline them on the per-packet path (a unit test
    keeps both in step).
    """

    __slots__ = ("buffer_bytes", "reserved_bytes", "limit", "shared_used", "max_shared_used",
                 "ingress_bytes", "headroom_used", "max_headroom_used", "xoff", "xon_bytes",
                 "refresh_due")

    def __init__(self, buffer_bytes: int):
        self.buffer_bytes = buffer_bytes
        self.reserved_bytes = 0        # sum of the pfc_config headrooms
        self.limit = buffer_bytes      # shared pool size: buffer - reserved
        self.shared_used = 0
        self.max_shared_used = 0
        self.ingress_bytes = [0] * CELLS
        self.headroom_used = [0] * CELLS
        self.max_headroom_used = [0] * CELLS
        self.xoff = [False] * CELLS     # a pause is in force for this cell
        self.xon_bytes = [0] * CELLS    # its XON threshold (from the XOFF's verdict)
        self.refresh_due = [0] * CELLS  # when its pause is refreshed

    def reserve_headroom(self, reserved_bytes: int) -> None:
        self.reserved_bytes = reserved_bytes
        self.limit = max(0, self.buffer_bytes - reserved_bytes)

    @property
    def used_bytes(self) -> int:
        return self.shared_used + sum(self.headroom_used)

    def admit_lossy(self, cell: int, size: int, queue_depth: int) -> bool:
        """Room in the pool, and dynamic threshold (Broadcom DT, alpha = 1): the
        egress queue must hold less than the free shared bytes."""
        free = self.limit - self.shared_used
        if size > free or queue_depth >= free:
            return False
        self.shared_used += size
        if self.shared_used > self.max_shared_used:
            self.max_shared_used = self.shared_used
        self.ingress_bytes[cell] += size
        return True

    def admit_lossless(self, cell: int, size: int, xoff: int, headroom: int) -> bool:
        """Shared pool while the cell is below XOFF (and the pool has room), then headroom."""
        count = self.ingress_bytes[cell]
        if count < xoff and self.shared_used + size <= self.limit:
            self.shared_used += size
            if self.shared_used > self.max_shared_used:
                self.max_shared_used = self.shared_used
        else:
            used = self.headroom_used[cell] + size
            if used > headroom:
                return False
            self.headroom_used[cell] = used
            if used > self.max_headroom_used[cell]:
                self.max_headroom_used[cell] = used
        self.ingress_bytes[cell] = count + size
        return True

    def clear_stats(self) -> None:
        """Peaks restart from what the buffer holds now."""
        self.max_shared_used = self.shared_used
        self.max_headroom_used[:] = self.headroom_used

    def release(self, cell: int, size: int) -> int:
        """A packet of ``cell`` left: headroom drains first. Returns the cell's new count."""
        used = self.headroom_used[cell]
        if used:
            if used >= size:
                self.headroom_used[cell] = used - size
            else:
                self.headroom_used[cell] = 0
                self.shared_used -= size - used
        else:
            self.shared_used -= size
        count = self.ingress_bytes[cell] - size
        self.ingress_bytes[cell] = count
        return count


class PriorityPort:
    """One egress port: 8 FIFOs, strict priority, PFC pause state, MAC control slot, wire."""

    __slots__ = ("port_no", "rate_bps", "ns_per_byte", "wire", "send", "log", "queues", "depth",
                 "max_depth", "nonempty", "paused", "paused_until", "paused_since", "next_expiry",
                 "paused_ns", "busy_until", "ctrl", "sampled", "tx_packets", "tx_bytes", "drops",
                 "drop_bytes", "headroom_drops", "ecn_marks", "pause_tx", "resume_tx",
                 "pause_rx", "resume_rx", "int_cfg", "int_tx_bytes")

    def __init__(self, port_no: int, rate_bps: int, delay_ns: int, log: EventLog = _no_log):
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
        """Put on the wire every frame whose turn has come by ``now_ns``.

        At each start time ``t``: a pending MAC control frame first, else the
        highest-priority non-paused queue; an idle link jumps to the next
        pause expiry or control frame, or to ``now_ns``. A frame leaves the
        buffer when its serialization starts: its ingress cell is released
        (headroom first), XON goes out if the cell is back at or below XON,
        and the egress counters count it. (The TM's accounting is inlined:
        this is the per-packet path.)
        """
        t = self.busy_until
        if t > now_ns:
            return
        queues, depth, ctrl = self.queues, self.depth, self.ctrl
        wire = self.wire
        in_flight, delay = wire.in_flight, wire.delay_ns
        ns_per_byte = self.ns_per_byte
        buf = tm.buffer
        headroom_used, ingress_bytes, xoff = buf.headroom_used, buf.ingress_bytes, buf.xoff
        tx, tx_prio = tm.tx, tm.tx_prio
        tx_packets, tx_bytes = self.tx_packets, self.tx_bytes
        no = self.port_no
        base = no * NUM_PRIORITIES
        freed = 0                                   # shared bytes released
        int_cfg = self.int_cfg
        int_tx_bytes = self.int_tx_bytes
        while t <= now_ns:
            if ctrl and ctrl[0][0] <= t:
                frame = ctrl.popleft()[1]
                t += int((len(frame) + WIRE_OVERHEAD_BYTES) * ns_per_byte)
                wire.put(t, frame)
                continue
            paused = self.paused
            if paused and self.next_expiry <= t:
                self._expire(t)
                paused = self.paused
            eligible = self.nonempty & ~paused
            if eligible:
                p = eligible.bit_length() - 1
                q = queues[p]
                frame, cell = q.popleft()
                if not q:
                    self.nonempty &= ~(1 << p)
                size = len(frame)
                depth[p] -= size
                # SharedBuffer.release, inlined.
                used = headroom_used[cell]
                if used:
                    if used >= size:
                        headroom_used[cell] = used - size
                    else:
                        headroom_used[cell] = 0
                        freed += size - used
                else:
                    freed += size
                count = ingress_bytes[cell] - size
                ingress_bytes[cell] = count
                if xoff[cell] and count <= buf.xon_bytes[cell] and not headroom_used[cell]:
                    xoff[cell] = False
                    tm._send_pfc(t, cell, 0)
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
                    # fabric.p4's egress: this port's INT record, at the
                    # dequeue time in fabric ns (int_port's factor, per wall us)
                    if type(frame) is not bytearray:
                        frame = bytearray(frame)
                    push_hop(frame, depth[p], int_tx_bytes, t * int_cfg[1] // 65_536_000, int_cfg[0])
                t += int((size + WIRE_OVERHEAD_BYTES) * ns_per_byte)
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
        self.busy_until = t
        self.int_tx_bytes = int_tx_bytes
        if freed:
            buf.shared_used -= freed


class TrafficManager:
    """The switch's buffer and egress: enqueue, serve, PFC in and out, ECN."""

    def __init__(self, ports: list[tuple[int, int, int]], buffer_bytes: int, router_mac: bytes,
                 seed: int = 0, log: EventLog | None = None):
        """ports: (port_no, rate_bps, delay_ns) each, rates and delays dilated."""
        self.log = log or _no_log
        self.ports = {no: PriorityPort(no, rate, delay, self.log) for no, rate, delay in ports}
        for no in self.ports:
            if not 0 <= no < CPU_PORT:
                raise ValueError(f"port {no}: front-panel ports are 0..{CPU_PORT - 1}")
        self.port_list = list(self.ports.values())
        # Port by number for every 9-bit egress_spec value (no bounds check per packet).
        self._by_no: list[PriorityPort | None] = [self.ports.get(no) for no in range(512)]
        self.buffer = SharedBuffer(buffer_bytes)
        self.router_mac = router_mac
        self.rng = random.Random(seed)
        self.timers = TimerHeap()                    # cells whose pause is refreshed then
        self._pfc_frames: dict[tuple[int, int], bytes] = {}
        self.tx = self.tx_prio = self.ecn_mark = self.pfc_tx = None   # P4 counter arrays

    def set_tables(self, tables) -> None:
        """A new generation of the pipeline's tables: headroom to reserve, counter arrays."""
        self.buffer.reserve_headroom(tables.headroom_reserved_bytes)
        if tables.tx is not self.tx:
            # a new pipeline config: fresh registers, as on BMv2
            for port in self.port_list:
                port.int_tx_bytes = 0
        self.tx, self.tx_prio = tables.tx, tables.tx_prio
        self.ecn_mark, self.pfc_tx = tables.ecn_mark, tables.pfc_tx
        for no, port in self.ports.items():
            port.int_cfg = tables.int_port.get(no)

    # ------------------------------------------------------------ enqueue
    def enqueue(self, now_ns: int, frame, verdict) -> bool:
        """Admit (or drop) one frame the pipeline sent to ``verdict.egress_port``.

        ``SharedBuffer.admit_lossy``/``admit_lossless`` inlined: this is the
        per-packet path. A frame arriving on an idle link starts serializing
        when it arrives (``now_ns``), not earlier.
        """
        port = self._by_no[verdict.egress_port]
        if port is None:       # like BMv2, a frame to a port that does not exist vanishes
            return False
        prio = verdict.priority
        size = len(frame)
        buf = self.buffer
        cell = verdict.in_cell
        depth = port.depth[prio]
        pfc = verdict.pfc
        if pfc is None:
            used = buf.shared_used
            free = buf.limit - used
            if size > free or depth >= free:            # DT, alpha = 1
                self._drop(now_ns, port, prio, size, None)
                return False
            used += size
            buf.shared_used = used
            if used > buf.max_shared_used:
                buf.max_shared_used = used
            buf.ingress_bytes[cell] += size
        else:
            xoff, xon, headroom = pfc
            count = buf.ingress_bytes[cell]
            used = buf.shared_used + size
            if count < xoff and used <= buf.limit:
                buf.shared_used = used
                if used > buf.max_shared_used:
                    buf.max_shared_used = used
                in_headroom = False
            else:
                used = buf.headroom_used[cell] + size
                if used > headroom:
                    self._drop(now_ns, port, prio, size, cell)
                    return False
                buf.headroom_used[cell] = used
                if used > buf.max_headroom_used[cell]:
                    buf.max_headroom_used[cell] = used
                in_headroom = True
            count += size
            buf.ingress_bytes[cell] = count
            if (count >= xoff or in_headroom) and not buf.xoff[cell]:
                buf.xoff[cell] = True
                buf.xon_bytes[cell] = xon
                self._send_pfc(now_ns, cell, XOFF_QUANTA)
        ecn = verdict.ecn
        if ecn is not None and (depth > ecn[0] or depth >= ecn[1]) and frame[15] & 3:
            frame = self._ecn(now_ns, port, prio, frame, depth, ecn)
        if port.paused:                    # pauses that ran out, frames due before now;
            port.serve(now_ns, self)       # an idle link is then free from now on
        elif port.busy_until < now_ns and not port.nonempty and not port.ctrl:
            port.busy_until = now_ns       # idle link: serialization starts now
        port.queues[prio].append((frame, cell))
        port.nonempty |= 1 << prio
        depth += size
        port.depth[prio] = depth
        if depth > port.max_depth[prio]:
            port.max_depth[prio] = depth
        return True

    def _drop(self, now_ns: int, port: PriorityPort, prio: int, size: int, cell: int | None) -> None:
        port.drops[prio] += 1
        port.drop_bytes[prio] += size
        if cell is not None:             # lossless: the ingress headroom was exhausted
            ingress = self.ports.get(cell >> 3)
            if ingress is not None:
                ingress.headroom_drops[cell & 7] += 1
        self.log(now_ns, port.port_no, prio, "drop", size)

    def _ecn(self, now_ns: int, port: PriorityPort, prio: int, frame, depth: int, ecn) -> bytearray:
        """RED on the depth found at enqueue: mark CE with P = pmax (depth-kmin)/(kmax-kmin)."""
        kmin, kmax, pmax_per_mille = ecn
        if depth < kmax and self.rng.random() * (kmax - kmin) * 1000 >= pmax_per_mille * (depth - kmin):
            return frame
        if not isinstance(frame, bytearray):
            frame = bytearray(frame)
        set_ce(frame)
        port.ecn_marks[prio] += 1
        c = self.ecn_mark
        if c is not None:
            c.count(port.port_no * NUM_PRIORITIES + prio, len(frame))
        self.log(now_ns, port.port_no, prio, "ecn_mark", depth)
        return frame

    # ------------------------------------------------------------ dequeue
    def transmit(self, now_ns: int) -> None:
        """Serve every port up to ``now_ns`` and release what its wire delivers by then."""
        for port in self.port_list:
            if port.busy_until <= now_ns and (port.nonempty or port.ctrl or port.paused):
                port.serve(now_ns, self)
            wire = port.wire
            in_flight = wire.in_flight
            if in_flight and in_flight[0][0] <= now_ns:
                wire.release(now_ns, port.send)

    # ------------------------------------------------------------ PFC
    def _send_pfc(self, now_ns: int, cell: int, quanta: int) -> None:
        """A pause (quanta > 0) or resume for (ingress port, priority) ``cell``, out of that port."""
        port = self.ports.get(cell >> 3)
        if port is None:
            return
        prio = cell & 7
        frame = self._pfc_frames.get((prio, quanta))
        if frame is None:
            frame = self._pfc_frames[(prio, quanta)] = pause_frame(self.router_mac, prio, quanta)
        port.ctrl.append((now_ns, frame))
        c = self.pfc_tx
        if c is not None:
            c.count(cell, len(frame))
        if quanta:
            port.pause_tx[prio] += 1
            self.log(now_ns, port.port_no, prio, "pause_tx", quanta)
            due = now_ns + pause_ns(quanta, port.rate_bps) // 2
            self.buffer.refresh_due[cell] = due
            self.timers.push(due, cell)
        else:
            port.resume_tx[prio] += 1
            self.log(now_ns, port.port_no, prio, "resume_tx", 0)

    def pfc_received(self, now_ns: int, port_no: int, class_enable: int, timers) -> None:
        """A PFC frame came in on ``port_no``: pause or resume that port's egress queues."""
        port = self.ports.get(port_no)
        if port is None:
            return
        port.serve(now_ns, self)               # what started before the pause still goes
        for prio in range(NUM_PRIORITIES):
            if class_enable >> prio & 1:
                quanta = timers[prio]
                if quanta:
                    port.pause_rx[prio] += 1
                    self.log(now_ns, port_no, prio, "pause_rx", quanta)
                    port.pause(prio, now_ns, now_ns + pause_ns(quanta, port.rate_bps))
                else:
                    port.resume_rx[prio] += 1
                    port.resume(prio, now_ns)

    def poll(self, now_ns: int) -> None:
        """Timers due by ``now_ns``: refresh the pauses still in force."""
        timers = self.timers
        due = timers.next_due_ns()
        if due is None or due > now_ns:        # the common case: once per loop of the switch
            return
        buf = self.buffer
        # Refreshes due at the same time go out by cell (port, then priority),
        # whatever order they were scheduled in. A timer whose cell resumed or
        # was paused again since is stale: ``refresh_due`` tells.
        for due, cell in sorted(timers.pop_due_with_time(now_ns)):
            if buf.xoff[cell] and buf.refresh_due[cell] == due:
                self._send_pfc(now_ns, cell, XOFF_QUANTA)

    def next_wake_ns(self) -> int | None:
        """The earliest time anything is due: a serialization, a release, a pause expiry, a timer."""
        wake = self.timers.next_due_ns()
        for port in self.port_list:
            t = port.next_event_ns()
            if t is not None and (wake is None or t < wake):
                wake = t
            in_flight = port.wire.in_flight
            if in_flight:
                t = in_flight[0][0]
                if wake is None or t < wake:
                    wake = t
        return wake

    # ------------------------------------------------------------ observation
    def sample(self, now_ns: int, write: Callable[[str], None]) -> None:
        """Queue-depth rows (``t_ns,port,priority,depth_bytes``) for queues that changed."""
        for port in self.port_list:
            depth = port.depth
            if depth != port.sampled:
                sampled = port.sampled
                for p in range(NUM_PRIORITIES):
                    if depth[p] != sampled[p]:
                        write(f"{now_ns},{port.port_no},{p},{depth[p]}\n")
                port.sampled = depth[:]

    def port_stats(self, port_no: int, now_ns: int) -> dict:
        port = self.ports[port_no]
        prios = [{
            "priority": p,
            "tx_packets": port.tx_packets[p], "tx_bytes": port.tx_bytes[p],
            "drops": port.drops[p], "drop_bytes": port.drop_bytes[p],
            "headroom_drops": port.headroom_drops[p], "ecn_marks": port.ecn_marks[p],
            "pause_tx": port.pause_tx[p], "resume_tx": port.resume_tx[p],
            "pause_rx": port.pause_rx[p], "resume_rx": port.resume_rx[p],
            "paused_ns": port.paused_ns_at(p, now_ns),
            "max_depth_bytes": port.max_depth[p],
            "max_headroom_bytes": self.buffer.max_headroom_used[port_no * NUM_PRIORITIES + p],
        } for p in range(NUM_PRIORITIES)]
        return {
            "port": port_no, "rate_bps": port.rate_bps,
            "tx_packets": sum(port.tx_packets), "tx_bytes": sum(port.tx_bytes),
            "queue_drops": sum(port.drops), "max_depth_bytes": max(port.max_depth),
            **port.wire.lateness_stats(),
            "priorities": prios,
        }

    def clear_stats(self, now_ns: int) -> None:
        """Every port's counters and peaks, and the buffer's peaks, start anew at ``now_ns``."""
        for port in self.port_list:
            port.clear_stats(now_ns)
        self.buffer.clear_stats()

    def buffer_stats(self) -> dict:
        buf = self.buffer
        return {"buffer_bytes": buf.buffer_bytes, "headroom_reserved_bytes": buf.reserved_bytes,
                "shared_limit_bytes": buf.limit, "max_shared_used_bytes": buf.max_shared_used,
                "used_bytes": buf.used_bytes}


def set_ce(frame: bytearray) -> None:
    """ECN := CE (11) in an IPv4 frame; RFC 1624 incremental header checksum update."""
    old = frame[14] << 8 | frame[15]
    new = old | 3
    if new == old:
        return
    frame[15] = new & 0xFF
    s = (~(frame[24] << 8 | frame[25]) & 0xFFFF) + (~old & 0xFFFF) + new
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    s = ~s & 0xFFFF
    frame[24] = s >> 8
    frame[25] = s & 0xFF
