"""The NIC's transmitter: a pacer that serializes frames at the link rate on
an absolute schedule, and the link beyond it (``emulator.link.Wire``).

Frames come from the parts' queues: CNPs (``NotificationPoint.out``), then
ACK/NAKs (``Responder.out``), then READ responses (``ReadResponder``), then
requests -- data QPs round-robin, one frame at a time, each at most at its
``qp.rate_bps`` (DCQCN's current rate or a configured cap; None = line
rate). A priority that PFC pauses sends nothing; a frame of a class that was
paused starts no earlier than the pause's end.

Schedule: frame k starts at ``slot_k``; the next slot is slot_k + (len_k +
24) x 8e9 / rate (the whole frame plus preamble, SFD, FCS and IFG). A frame
never starts before its slot; a loop that wakes late sends what is due in a
burst (catch-up bounded by ``max_lag_ns``: time lost beyond it is given up,
and counted in ``tx_given_up_ns`` for the run's fidelity).
A frame leaves -- is handed to the socket -- when its serialization ends
plus the link's delay (``tx_delay_ns``), as at a switch port; frames already
serialized are on the wire and leave even if their class is paused since.
Bytes are built only then, by the frame itself (``frames``: ``build`` and
``sent``), from the current message buffers.

The model in full: docs/nic.md, "transmitter".
"""
from __future__ import annotations

import errno

from emulator.link import CommitWire, Wire
from emulator.clock import NEVER_NS
from emulator.wire import ROCE_FRAMING, Framing, ib_credit_blocks

from .frames import LinkFrame, PauseFrame
from .qp import QpState
_BLOCKED_RETRY_NS = 100_000              # socket full: try again this much later


class _SocketFull(Exception):
    """The socket had no room for a frame (kept in ``Transmitter._retry``)."""


class Transmitter:
    """Pacer + link of one NIC. ``service(now)`` serializes what is due and
    sends what has crossed the link; ``next_wake_ns`` says when to call it
    again."""

    TX_BURST = 64      # frames serialized per service pass at most

    def __init__(self, *, sock, rate_bps: int, mtu_bytes: int, ack_every_n: int,
                 max_lag_ns: int, tx_delay_ns: int, priority: int, cnp_priority: int,
                 max_outstanding_pkts: int, pause_until_ns: list, requester, read_responder,
                 cnp_queue, ack_queue, stats, cnp_template, logs=None,
                 framing: Framing = ROCE_FRAMING, credit=None, int_max_hops: int = 0,
                 on_data_tx=None, commit_wire: bool = False, faults=None):
        """``cnp_template``: qp -> the template of its CNPs; ``int_max_hops``
        > 0: data frames carry INT; ``on_data_tx``: the reaction point's
        ``on_tx`` (None: off); ``commit_wire``: virtual time -- a frame
        leaves when committed, stamped with its arrival (``link.CommitWire``);
        ``faults``: its link's scripted faults (``link_faults.LinkFaults``)."""
        self.sock = sock
        self.rate_bps = rate_bps
        self.mtu_bytes = mtu_bytes
        self.ack_every_n = ack_every_n
        self.max_lag_ns = max_lag_ns
        self.priority, self.cnp_priority = priority, cnp_priority
        self.max_outstanding_pkts = max_outstanding_pkts
        self.pause_until_ns = pause_until_ns     # PfcReceiver.until_ns (read only)
        self.requester = requester
        self.read_responder = read_responder
        self.read_busy = read_responder.busy     # QPs with READ responses to send
        self.cnp_queue = cnp_queue               # CnpFrames (NotificationPoint.out)
        self.ack_queue = ack_queue               # AckFrames (Responder.out)
        self.qps = requester.busy                # data QPs with work, round-robin
        self.stats = stats
        self.logs = logs
        self.wire = CommitWire(int(tx_delay_ns), self._send_committed) if commit_wire else \
            Wire(int(tx_delay_ns))
        self.framing = framing
        self.overhead_bytes = framing.wire_overhead_bytes
        self.credit = credit                     # InfiniBand: VlCredits of our data VL
        self.held = None                         # (frame, flen, blocks) waiting for credit
        self.slot_free_ns = 0.0                  # when the wire is free for the next frame
        self.wire_idle = True
        self.blocked_until_ns = 0                # the socket was full: wait until then
        self._retry = None                       # the frame the socket refused
        self._rr = 0
        self._now = 0
        self.on_data_tx = on_data_tx
        self.cnp_template = cnp_template
        self.int_max_hops = int_max_hops
        self.cpu_gate = None                     # the CPU gate's ``tx`` (set_cpu_gate; None: off)
        self.faults = faults
        self.nominal_bps = rate_bps
        if faults is not None:                   # every frame through them (an instance's _send)
            self._send = self._send_faulty

    def set_cpu_gate(self, gate_tx) -> None:
        """Hold frames until ``gate_tx`` says their CPU work is done (None: no gate)."""
        self.cpu_gate = gate_tx

    def put_link_frame(self, data: bytes, now: int, wire_ns: float) -> None:
        """A link packet (``data``, built) goes on the wire now, after the
        frame being serialized, taking ``wire_ns`` and no credit."""
        self.wire.put(max(now, self.slot_free_ns) + wire_ns, LinkFrame(data))

    def put_pause_frame(self, data: bytes, now: int) -> None:
        """A PFC frame the NIC sends (a storm's) goes on the wire now, after
        the frame being serialized, taking its serialization time."""
        self._now = now
        start = max(float(now), self.slot_free_ns)
        end = start + self.frame_time_ns(len(data))
        self.slot_free_ns = end
        self.wire.put(end, PauseFrame(data))

    def _send_committed(self, f, arrival_ns) -> None:
        self.sock.due_ns = arrival_ns
        self._send(f)

    # -- rates -------------------------------------------------------------------------
    def frame_time_ns(self, frame_bytes: int, rate_bps: float | None = None) -> float:
        return (frame_bytes + self.overhead_bytes) * 8e9 / (rate_bps or self.rate_bps)

    def set_qp_rate(self, qp, rate_bps: float) -> None:
        """``qp`` may now send at ``rate_bps`` (>= the link rate: unlimited);
        its next frame is re-timed from its last one at the new rate."""
        qp.rate_bps = None if rate_bps >= self.rate_bps else rate_bps
        if qp.last_tx_slot is not None:
            qp.next_ok_ns = qp.last_tx_slot + \
                (qp.last_tx_flen + self.overhead_bytes) * 8e9 / (qp.rate_bps or self.rate_bps)

    # -- state -------------------------------------------------------------------------
    def idle(self) -> bool:
        """Nothing queued here or on the wire."""
        return not (self.ack_queue or self.cnp_queue or self.wire.in_flight
                    or self.read_busy or self._retry is not None
                    or self.held is not None)

    def next_wake_ns(self, now: int, limit: float, cpu_ready_ns: float = 0.0) -> float:
        """When ``service`` has something to do, at most ``limit`` (not
        rounded; the NIC adds the other parts' timers)."""
        wake = limit
        pause = self.pause_until_ns
        data_resume = pause[self.priority]
        slot, blocked = self.slot_free_ns, self.blocked_until_ns
        if self.held is not None:
            # the head of our VL waits for credit, and all behind it: wake
            # for the wire, or when the credit that came lets it go (else a
            # flow-control packet's arrival wakes the loop)
            if self.wire.in_flight:
                wake = min(wake, max(self.wire.in_flight[0][0], blocked))
            ready = self.credit.send_at_ns(self.held[2])
            if ready is not None:
                wake = min(wake, max(slot, blocked, ready))
            return wake
        if self.cnp_queue:
            wake = min(wake, max(slot, blocked, pause[self.cnp_priority]))
        if self.ack_queue:
            wake = min(wake, max(slot, blocked, data_resume))
        if self.wire.in_flight:
            wake = min(wake, max(self.wire.in_flight[0][0], blocked))
        if self._retry is not None:
            wake = min(wake, blocked)
        # data may start once the wire, socket, PFC and the CPU allow
        base = max(slot, blocked, data_resume, cpu_ready_ns)
        if self.read_busy:
            wake = min(wake, self.read_responder.next_ready_ns(base))
        for qp in self.qps:
            if (qp.snd_nxt < qp.next_psn and qp.state == QpState.RTS
                    and qp.snd_nxt - qp.snd_una < qp.window_pkts):
                t = qp.next_ok_ns
                if qp.paused_until_ns > t:
                    t = qp.paused_until_ns
                if t <= base:           # none can start before base: the rest need no look
                    if base < wake:
                        wake = base
                    break
                if t < wake:
                    wake = t
        if not self.wire_idle and wake > slot + self.max_lag_ns:
            # Nothing to do until after the catch-up window: run at the end of
            # the frame on the wire anyway, to find the wire idle then. Else
            # a long idle (a link delay, an ACK, a paced QP) beyond max_lag_ns
            # would read as time given up when the next frame goes out.
            wake = min(wake, max(slot, blocked))
        return wake

    # -- pacer -------------------------------------------------------------------------
    def _pick_data(self, slot: float):
        """Round-robin: the next QP allowed to send at ``slot``, or None."""
        qps = self.qps
        n = len(qps)
        start = self._rr
        if start >= n:                  # the requester dropped idle QPs since
            start = 0
        for i in range(n):
            j = start + i
            if j >= n:
                j -= n
            qp = qps[j]
            if (qp.snd_nxt < qp.next_psn and qp.state == QpState.RTS
                    and qp.next_ok_ns <= slot and qp.paused_until_ns <= slot
                    and qp.snd_nxt - qp.snd_una < qp.window_pkts):
                self._rr = j + 1 if j + 1 < n else 0
                return qp
        return None

    def service(self, now: int) -> None:
        """Send the frames that crossed the link by ``now``; serialize the
        frames whose slot has come (at most ``TX_BURST``)."""
        if now < self.blocked_until_ns:
            return
        self._now = now
        if self._retry is not None:
            frame, self._retry = self._retry, None
            try:
                self._send(frame)
            except _SocketFull:
                return
        wire = self.wire
        in_flight = wire.in_flight
        send = self._send
        serialize = self._serialize_one
        try:
            for _ in range(self.TX_BURST):
                # frames whose serialization and propagation are over leave now
                if in_flight and in_flight[0][0] <= now:
                    wire.release(now, send)
                if not serialize(now) or self.slot_free_ns > now:
                    break        # (a frame went and the wire is busy past now: nothing more goes)
            if in_flight and in_flight[0][0] <= now:
                wire.release(now, send)
        except _SocketFull:
            return

    def _serialize_one(self, now: int) -> bool:
        """Serialize the next frame if its slot has come and a frame may go:
        True when one went on the wire, False when nothing more goes now."""
        slot = self.slot_free_ns
        given_up = 0.0
        if self.wire_idle:
            if slot < now:
                slot = float(now)
        elif slot <= now - 1 - self.max_lag_ns:
            # served too late to catch up: the time beyond the window
            # is lost to the schedule (run fidelity counts it) -- if a
            # frame was waiting for it; a wire with nothing to send was idle.
            # Loops run at whole ns: a fractional slot is behind only once its
            # ceiling is (virtual time, no window: woken at that ceiling, on time)
            given_up = now - self.max_lag_ns - slot
            slot = float(now - self.max_lag_ns)
        if slot > now:
            return False
        credit = self.credit
        if self.held is not None:
            # InfiniBand: our VL's head waits until credit for it came
            frame, flen, nblocks = self.held
            ready = credit.send_at_ns(nblocks)
            if ready is None:
                self.wire_idle = True
                return False
            if slot < ready:
                slot = ready
            credit.try_send(nblocks, slot)
            self.held = None
        else:
            got = self._next_frame(slot, now, given_up)
            if got is None:
                self.wire_idle = True
                return False
            frame, flen, slot, given_up = got
            if credit is not None:
                nblocks = ib_credit_blocks(flen + self.overhead_bytes)
                if not credit.try_send(nblocks, slot):   # a stall starts at slot
                    self.held = (frame, flen, nblocks)
                    self.wire_idle = True
                    return False
        if given_up:
            self.stats.tx_given_up_ns += int(given_up)
        self.wire_idle = False
        end = slot + (flen + self.overhead_bytes) * 8e9 / self.rate_bps
        self.slot_free_ns = end
        self.wire.put(end, frame)
        return True

    def _next_frame(self, slot: float, now: int, given_up: float):
        """Strict priority (CNP, then ACK/NAK, then data), skipping paused
        classes; a frame of a class that was paused starts no earlier than
        the pause's end. (frame, its length, slot, time given up), or None."""
        pause_until = self.pause_until_ns
        prio, cnp_prio = self.priority, self.cnp_priority
        data_ok = now >= pause_until[prio]
        cnpq = self.cnp_queue
        if cnpq and now >= pause_until[cnp_prio]:
            if slot < pause_until[cnp_prio]:
                slot = pause_until[cnp_prio]
            return cnpq.popleft(), self.framing.cnp_frame_bytes, slot, given_up
        ctrl = self.ack_queue
        if ctrl and data_ok:
            if slot < pause_until[prio]:
                slot = pause_until[prio]
            return ctrl.popleft(), self.framing.ack_frame_bytes, slot, given_up
        if not data_ok:
            return None
        if slot < pause_until[prio]:
            slot = pause_until[prio]
        return self._next_data(slot, now, given_up)

    def _next_data(self, slot: float, now: int, given_up: float):
        """The next data-bearing frame: a READ response, else the next data
        QP's frame once its CPU work is done; paced, counted, or None."""
        gate = self.cpu_gate
        got = self.read_responder.take(slot, now, gate) if self.read_busy else None
        if got is not None:
            frame, flen, slot = got
            qp = frame.qp
        else:
            qp = self._pick_data(slot)
            if qp is None:
                return None
            if given_up and qp.next_ok_ns > self.slot_free_ns:
                # a paced QP could not have sent before next_ok_ns
                given_up = max(0.0, now - self.max_lag_ns - qp.next_ok_ns)
            if gate is not None:     # the CPU must have done this packet's work
                w, k, plen = self.requester.peek(qp)
                slot = gate(qp, slot, now, w.post_ns, 0 if w.is_read else plen)
                if slot < 0:
                    return None
            frame, flen = self.requester.take(qp)
            # No frame starts before its work request was posted. A wire last
            # seen busy went idle at its frame's end if nobody served it then
            # (a loop woken for something else later): that slot would send a
            # credit posted after it early and read as lag.
            posted = frame.wqe.post_ns
            if posted > slot:
                given_up = 0.0 if posted >= now - self.max_lag_ns \
                    else now - self.max_lag_ns - posted
                slot = float(posted)
        # per-QP pacing and DCQCN's byte counter
        if qp.rate_bps:
            qp.next_ok_ns = max(qp.next_ok_ns, slot) + \
                (flen + self.overhead_bytes) * 8e9 / qp.rate_bps
        qp.last_tx_slot = slot
        qp.last_tx_flen = flen
        if self.on_data_tx is not None:
            self.on_data_tx(qp, flen, slot)
        # the lag of data-bearing frames: what a late loop bursts into a queue
        # (ACKs and CNPs mostly leave an idle wire)
        st = self.stats
        lag = now - slot
        if lag > st.tx_lag_max_ns:
            st.tx_lag_max_ns = int(lag)
        st.tx_lag_sum_ns += int(lag)
        st.tx_lag_frames += 1
        return frame, flen, slot, given_up

    # -- the socket --------------------------------------------------------------------
    def _send(self, f) -> None:
        """Build and send frame ``f`` now; raises ``_SocketFull`` (the frame
        kept for a retry in 100 us) if the socket has no room."""
        frame = f.build(self)
        now = self._now
        try:                              # ``_put``, inlined: the per-frame path
            self.sock.send(frame)
        except OSError as e:
            self._refused(e, f, now)
        f.sent(self, len(frame), now)

    def _put(self, send, frame, f, now: int) -> None:
        """``send(frame)``; a full socket keeps ``f`` for a retry (``_blocked``)."""
        try:
            send(frame)
        except OSError as e:
            self._refused(e, f, now)

    def _refused(self, e: OSError, f, now: int):
        """The socket refused ``f``'s bytes with ``e``: full (``_blocked``:
        ``_SocketFull``); its link down (counted, the frame lost); else ``e``
        raised again."""
        if isinstance(e, (BlockingIOError, InterruptedError)) \
                or e.errno in (errno.ENOBUFS, errno.EAGAIN):
            self._blocked(f, now)
        if e.errno == errno.ENETDOWN:     # its link is down (BMv2's link faults set the veth
            self.stats.tx_link_down += 1  # down): the frame is lost on a dark wire, as an RNIC's
            return                        # on a dead port; the ACK timeout brings it again
        raise e

    def _send_faulty(self, f) -> None:
        """``_send`` through the link's faults: the frame is judged when its
        serialization ended (its arrival, or now on a dilated wire, less the
        link's delay); one lost on the link still counts as sent."""
        frame = f.build(self)
        now = self._now
        sock = self.sock
        end_ns = (sock.due_ns if isinstance(self.wire, CommitWire) else now) - self.wire.delay_ns
        out, bad_fcs = self.faults.judge(frame, end_ns)
        if out is not None:
            self._put(getattr(sock, "send_bad_fcs", sock.send) if bad_fcs else sock.send, out, f, now)
        f.sent(self, len(frame), now)

    def next_rate_change_ns(self) -> int | None:
        """When a degrade next changes the rate (None: never)."""
        if self.faults is None:
            return None
        t = self.faults.next_rate_change_ns()
        return t if t < NEVER_NS else None

    def apply_rate_changes(self, now: int) -> None:
        """A degrade's rate change due by ``now``: frames that start from now serialize at it."""
        fraction = self.faults.rate_changes_due(now)
        if fraction is not None:
            self.rate_bps = self.nominal_bps * fraction

    def _blocked(self, f, now: int):
        self.stats.tx_enobufs += 1
        self.blocked_until_ns = now + _BLOCKED_RETRY_NS
        self._retry = f
        raise _SocketFull
