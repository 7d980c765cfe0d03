"""The NIC's receive path (``RoceNic`` is made of this and
``nic_link.NicLink``): draining the sockets into the link layer's
``rx_frame`` (``link_layer``: link frames, framing checks), the host-CPU
hook, and dispatch of a RoCE packet to the part that owns it (requester,
responder, READ, notification and reaction points)."""
from __future__ import annotations

import errno

import fcntl
import struct
from typing import Sequence

from emulator import int_md
from emulator.link import lateness_bucket

from .qp import QueuePair
from .read import READ_OPS
from .responder import REQUEST_OPS
from .roce import AETH_ACK, AETH_TYPE_MASK, CNP_OPCODE, ECN_CE, RC_ACK, RC_READ_REQUEST, \
    parse_roce

SIOCGSTAMPNS = 0x8907                 # linux/sockios.h: last frame's receive stamp
_STAMP = struct.Struct("qq")         # struct timespec
_STAMP_BUF = bytes(_STAMP.size)
_DATA_OPS = frozenset(REQUEST_OPS) | READ_OPS    # what per-packet CPU work applies to


class NicReceive:
    """The receive part of ``RoceNic`` (a mixin: the NIC's attributes)."""

    RX_BATCH = 256     # frames drained per wakeup at most

    @property
    def rx_partition(self) -> int | None:
        return None if self.tenant_filter is None else self.tenant_filter.partition

    def _update_rx_hook(self) -> None:
        on = self.cpu_gate is not None or self.tenant_filter is not None or self.rx_stall is not None
        self.rx_hook = self._cpu_rx_hook if on else None

    def _cpu_rx_hook(self, frame, pkt, now: int) -> bool:
        """True when the frame is consumed here: dropped (other tenant, CPU
        backlog full) or held until its CPU work is done."""
        tf = self.tenant_filter
        if tf is not None and tf.drops(frame, now):
            return True
        stall = self.rx_stall
        if stall is not None and pkt.opcode in _DATA_OPS and self._stall_holds(stall, frame, now):
            return True
        gate = self.cpu_gate
        if gate is None or pkt.opcode not in _DATA_OPS:
            return False
        qp = self.qp_by_qpn.get(pkt.dst_qp)
        if qp is None or pkt.src_ip != qp.remote_ip_int:
            return False
        return gate.rx_admit(frame, pkt, qp, now)

    # -- receive ---------------------------------------------------------------
    def _rx_drain(self, now: int, readable: Sequence[int] | None = None) -> None:
        """Read the sockets that ``readable`` names (None: all of them)."""
        n_batch = 0
        if readable is None:
            for sock in self._rx_socks:
                n_batch += self._rx_drain_sock(sock, now)
        else:      # a select said so: no read that finds nothing (a syscall and an exception)
            sock_of = self._rx_sock_of
            for fd in readable:
                n_batch += self._rx_drain_sock(sock_of[fd], now)
        st = self.stats
        if n_batch:
            self.last_rx_ns = now
            if n_batch > st.rx_batches_max:
                st.rx_batches_max = n_batch
        self.responder.flush_acks()

    def _rx_drain_sock(self, sock, now: int) -> int:
        """Read what ``sock`` holds (at most ``RX_BATCH`` frames) into
        the link layer's ``rx_frame``; returns how many frames."""
        on_frame = self.link.rx_frame
        if getattr(sock, "owns_frames", False):
            return self._rx_drain_frames(sock, on_frame, now)
        buf, mv = self._rxbuf, self._rxmv
        recv_into = sock.recv_into
        n_batch = 0
        for _ in range(self.RX_BATCH):
            try:
                n = recv_into(buf)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:     # its veth went down (BMv2's link faults): the kernel
                if e.errno != errno.ENETDOWN:   # says so once, to the next read; frames
                    raise                       # come again when it is back up
                self.stats.link_down_events += 1
                continue
            if not n_batch and self._rx_stamp:
                self._sample_rx_lateness(sock)
            n_batch += 1
            on_frame(mv[:n], n, now)
        return n_batch

    def _rx_drain_frames(self, sock, on_frame, now: int) -> int:
        """``_rx_drain_sock`` for a socket that hands out each frame as
        bytes of its own (virtual time's ``VirtualPort.next_frame``): a
        view of it, not of a copy into the receive buffer."""
        next_frame = sock.next_frame
        n_batch = 0
        for _ in range(self.RX_BATCH):
            frame = next_frame()
            if frame is None:
                break
            n_batch += 1
            on_frame(memoryview(frame), len(frame), now)
        return n_batch

    def deliver(self, qp: QueuePair, pkt, n: int, now: int) -> None:
        """A packet of ``n`` bytes for ``qp`` that the link layer checked:
        counted, and handed to its part."""
        st = self.stats
        st.rx_packets += 1
        st.rx_bytes += n
        self._dispatch(qp, pkt, now)

    def rx_int(self, qp: QueuePair, pkt, stack, now: int) -> None:
        """A received INT stack: a data packet's goes back in the QP's ACKs;
        an ACK's to the reaction point (after the ACK moved the QP on)."""
        if stack.kind == int_md.INT_KIND_COLLECT:
            if pkt.opcode in REQUEST_OPS:
                qp.int_echo = (stack.max_hops, stack.hops)
        elif pkt.opcode == RC_ACK and pkt.aeth_syndrome & AETH_TYPE_MASK == AETH_ACK:
            self.reaction.on_int_ack(qp, stack.hops, now)

    def _sample_rx_lateness(self, sock) -> None:
        try:
            sec, nsec = _STAMP.unpack(fcntl.ioctl(sock, SIOCGSTAMPNS, _STAMP_BUF))
        except OSError:                      # not a socket the kernel stamps
            self._rx_stamp = False
            return
        late = self.clock.unix_ns() - (sec * 1_000_000_000 + nsec)
        if late < 0:                         # realtime stepped back: no sample
            return
        st = self.stats
        st.rx_late_samples += 1
        st.rx_late_sum_ns += late
        st.rx_late_hist[lateness_bucket(late)] += 1
        if late > self.max_lag_ns:           # beyond the catch-up window: a stall
            st.rx_stall_ns += late - self.max_lag_ns
        if late > st.rx_late_max_ns:
            st.rx_late_max_ns = late

    def lost_ns(self) -> int:
        """Clock time this NIC lost to its process being late beyond its
        catch-up window (``max_lag_ns``): transmit time given up, or receive
        stalls, whichever is larger (one stall shows in both). A part that
        times a phase takes the difference over it (``collectives.bench``)."""
        st = self.stats
        return max(st.tx_given_up_ns, st.rx_stall_ns)

    def _dispatch(self, qp: QueuePair, pkt, now: int) -> None:
        """Hand a received RoCE packet for ``qp`` to its part."""
        op = pkt.opcode
        if op == RC_ACK:
            self.requester.on_ack(qp, pkt, now)
        elif op in REQUEST_OPS or op in READ_OPS:
            if pkt.ecn == ECN_CE:            # requests and READ responses notify congestion
                self.stats.ecn_ce_rx += 1
                self.notification.on_ce(qp, now)
                if self.on_ecn_ce is not None:
                    self.on_ecn_ce(qp, pkt)
            if op in REQUEST_OPS:
                self.responder.on_request(qp, pkt, now)
            elif op == RC_READ_REQUEST:
                self.read_responder.on_request(qp, pkt, now)
            else:
                self.read_requester.on_response(qp, pkt, now)
        elif op == CNP_OPCODE:
            self.stats.cnp_rx += 1
            self.reaction.on_cnp(qp, now)
            if self.on_cnp is not None:
                self.on_cnp(qp, pkt)
        else:
            self.stats.rx_bad_requests += 1

    def _stall_holds(self, stall, frame, now: int) -> bool:
        """The host is stalled (or has not yet taken what a stall held):
        the NIC keeps the packet, and pauses the data class at XOFF."""
        if stall.held and stall.stalled(now) is None:
            self._stall_release(now)              # the stall is over: its packets first
        if stall.stalled(now) is None:
            return False
        pause = stall.hold(frame, now)
        if pause is not None:
            self.transmitter.put_pause_frame(pause, now)
        return True

    def _stall_release(self, now: int) -> None:
        """What a stall held, taken by the host at its end (in arrival
        order, then the coalesced ACKs); its PAUSE refreshed, or XON."""
        frames, pfc = self.rx_stall.due(now)
        if pfc is not None:
            self.transmitter.put_pause_frame(pfc, now)
        st = self.stats
        for frame in frames:
            pkt = parse_roce(frame)
            qp = self.qp_by_qpn.get(pkt.dst_qp)
            if qp is None or pkt.src_ip != qp.remote_ip_int:
                st.rx_ignored += 1
                continue
            self.deliver(qp, pkt, len(frame), now)
        if frames:
            self.last_rx_ns = now
            self.responder.flush_acks()

    def _cpu_rx_release(self, now: int) -> None:
        """Deliver the received packets whose CPU work is done (then the
        responder's coalesced ACKs)."""
        st = self.stats
        n = 0
        for frame in self.cpu_gate.rx_due(now):
            pkt = parse_roce(frame)
            qp = self.qp_by_qpn.get(pkt.dst_qp)
            if qp is None:
                continue
            st.rx_packets += 1
            st.rx_bytes += len(frame)
            self._dispatch(qp, pkt, now)
            n += 1
        if n:
            self.last_rx_ns = now
        self.responder.flush_acks()
