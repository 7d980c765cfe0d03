"""The traffic manager of the embedded target: admission, ECN, PFC in and out.

What ``docs/lossless.md`` specifies, in htsim-style small objects, one
module each:

* ``SharedBuffer`` (``emulator.dataplane.shared_buffer``): the switch's one
  pool and its per-(ingress port, priority) accounting and headroom.
* ``PriorityPort`` (``emulator.dataplane.priority_port``): one egress port,
  8 strict-priority FIFOs paused by received PFC, MAC control slot, wire.
* ``TrafficManager`` (here): admission, ECN marking at enqueue (RED on the
  depth the packet finds, seeded ``random.Random``), PFC generation (XOFF
  when a lossless cell crosses XOFF or spills into headroom, refreshed every
  half pause time while above XON, XON when back at or below XON with the
  headroom empty), PFC reception, P4 counters and per (port, priority)
  statistics and events.

Everything here is pure: times come in as ``now_ns`` arguments (wall
nanoseconds of the switch's clock, ``emulator.clock``), rates already
dilated.
"""
from __future__ import annotations

import random
from typing import Callable

from emulator.clock import NEVER_NS as NEVER, TimerHeap
from emulator.dataplane.pfc import XOFF_QUANTA, pause_frame, pause_ns
from emulator.dataplane.pfcwd import PfcWatchdog
from emulator.dataplane.priority_port import EventLog, PriorityPort, no_log
from emulator.dataplane.shared_buffer import SharedBuffer
from emulator.wire import CPU_PORT, NUM_PRIORITIES


class TrafficManager:
    """The switch's buffer and egress: enqueue, serve, PFC in and out, ECN."""

    def __init__(self, ports: list[tuple[int, int, int]], buffer_bytes: int, router_mac: bytes,
                 seed: int = 0, log: EventLog | None = None):
        """ports: (port_no, rate_bps, delay_ns) each, rates and delays dilated."""
        self.log = log or no_log
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
        self.wd: PfcWatchdog | None = None           # the PFC watchdog (enable_watchdog)
        self._wd_drops: set[int] = set()             # cells whose storm drops their frames

    def enable_watchdog(self, detection_ns: int, restoration_ns: int, action: str) -> None:
        """SONiC's PFC watchdog on every queue (``emulator.dataplane.pfcwd``)."""
        self.wd = PfcWatchdog(self, detection_ns, restoration_ns, action)
        if self.wd.drop:
            self._wd_drops = self.wd.storming

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
        stormed = self._wd_drops
        if stormed and self._wd_dropped(stormed, port.port_no << 3 | prio, cell):
            return False
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
        elif port.busy_until < now_ns and not port.nonempty:
            # Idle link: serialization starts now -- also when a MAC control
            # frame made this turn waits (an XOFF this arrival triggered on
            # its own port): from the old busy_until the frame would start,
            # and leave, before it arrived.
            port.busy_until = now_ns
        port.queues[prio].append((frame, cell))
        port.nonempty |= 1 << prio
        depth += size
        port.depth[prio] = depth
        if depth > port.max_depth[prio]:
            port.max_depth[prio] = depth
        return True

    def _wd_dropped(self, stormed: set[int], out_cell: int, in_cell) -> bool:
        """A storm's drop action takes the frame: bound for the stormed queue,
        or arriving on its port in its priority."""
        if out_cell in stormed:
            self.wd.dropped(out_cell, egress=True)
            return True
        if in_cell in stormed:
            self.wd.dropped(in_cell, egress=False)
            return True
        return False

    def flush_queue(self, now_ns: int, port: PriorityPort, prio: int) -> int:
        """Discard every frame queue ``prio`` of ``port`` holds (a storm's drop
        action), releasing their buffer (an XON where a cell is back at XON);
        returns how many."""
        q = port.queues[prio]
        n = len(q)
        buf = self.buffer
        while q:
            frame, cell = q.popleft()
            count = buf.release(cell, len(frame))
            if buf.xoff[cell] and count <= buf.xon_bytes[cell] and not buf.headroom_used[cell]:
                buf.xoff[cell] = False
                self._send_pfc(now_ns, cell, 0)
        port.depth[prio] = 0
        port.nonempty &= ~(1 << prio)
        return n

    def serve_port(self, now_ns: int, port: PriorityPort) -> None:
        """``port``'s frames due by ``now_ns`` go (its pauses that ran out end)."""
        if port.busy_until <= now_ns:
            port.serve(now_ns, self)

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

    def commit(self, now_ns: int) -> None:
        """``transmit`` under virtual time: every frame whose serialization
        has started is handed over (``link.CommitWire``), however far its
        arrival lies ahead."""
        for port in self.port_list:
            if port.busy_until <= now_ns and (port.nonempty or port.ctrl or port.paused):
                port.serve(now_ns, self)
            if port.wire.in_flight:
                port.wire.release(now_ns)

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
                    wd = self.wd
                    if wd is not None and wd.pause_rx(now_ns, port, prio):
                        continue                 # a storm: the queue ignores PFC
                    port.pause(prio, now_ns, now_ns + pause_ns(quanta, port.rate_bps))
                    if wd is not None:
                        wd.watch(now_ns, port, prio)
                else:
                    port.resume_rx[prio] += 1
                    port.resume(prio, now_ns)

    def poll(self, now_ns: int) -> None:
        """Timers due by ``now_ns``: refresh the pauses still in force."""
        if self.wd is not None:
            self.wd.poll(now_ns)
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
        if wake is None:
            wake = NEVER
        if self.wd is not None:
            t = self.wd.next_due_ns()
            if t is not None and t < wake:
                wake = t
        for port in self.port_list:
            # PriorityPort.next_event_ns, inlined: every port, every turn
            paused = port.paused
            if port.ctrl or port.nonempty & ~paused:
                if port.busy_until < wake:
                    wake = port.busy_until
            elif paused:
                t = port.busy_until if port.busy_until > port.next_expiry else port.next_expiry
                if t < wake:
                    wake = t
            in_flight = port.wire.in_flight
            if in_flight and in_flight[0][0] < wake:
                wake = in_flight[0][0]
        return wake if wake < NEVER else None

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

    def unsampled(self) -> bool:
        """A queue's depth changed since the last ``sample``: one is worth taking."""
        for port in self.port_list:
            if port.depth != port.sampled:
                return True
        return False

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
        if self.wd is not None:
            for row, wd in zip(prios, self.wd.port_stats(port_no)):
                row.update(wd)
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
        if self.wd is not None:
            self.wd.clear_stats()

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
