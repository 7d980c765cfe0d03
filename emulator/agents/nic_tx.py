"""Transmit side of ``RoceNic`` (``TransmitPacerMixin``): PFC pause state
(received pause frames, paused-time accounting), the pacer that serializes
CNPs, ACK/NAKs and data frames on an absolute schedule at the link rate
(strict priority, round-robin between QPs, per-QP rate limits, the
``tx_delay_ns`` line), frame building/sending, and the event loop's next
wake-up time. See ``nic`` for the behaviour."""
from __future__ import annotations

import errno
import struct
import time

from .nic_read import KIND_READ_REQ, READ_REQ_FRAME_LEN
from .packet_socket import PFC_DST_MAC, PFC_QUANTUM_BITS
from .qp import QpState
from .roce import (
    AETH_ACK_SYNDROME, CNP_OPCODE, ECN_NOT_ECT, PSN_MASK, RC_ACK, WIRE_OVERHEAD_BYTES,
    FrameTemplate,
)

_HDR_LEN = 14 + 20 + 8 + 12          # Ether + IPv4 + UDP + BTH
_ACK_FRAME_LEN = _HDR_LEN + 4 + 4    # + AETH + ICRC
_CNP_PAD = bytes(16)
_CNP_FRAME_LEN = _HDR_LEN + 16 + 4   # + reserved + ICRC

_mono = time.monotonic_ns


class TransmitPacerMixin:
    """``RoceNic``'s PFC pause state, pacer and frame emission."""

    # -- PFC pause state -----------------------------------------------------
    def update_pause_stats(self, now: int | None = None) -> int:
        """Bring ``stats.paused_ns`` (time our classes -- ``priority`` and
        ``cnp_priority`` -- were paused by PFC, summed over the two, up to
        ``now``) up to date; returns it."""
        now = _mono() if now is None else now
        total = self._paused_closed_ns
        for p in {self.priority, self.cnp_priority}:
            until = self._pause_until[p]
            start = self._pause_start[p]
            if until > start:
                total += int(min(until, now) - start) if now > start else 0
        self.stats.paused_ns = total
        return total

    def paused(self, priority: int, now: int | None = None) -> bool:
        """Is ``priority`` paused by PFC at ``now``?"""
        return (_mono() if now is None else now) < self._pause_until[priority]

    def _rx_mac_control(self, frame) -> None:
        """An 802.1Qbb PFC frame: pause (or resume) the enabled priorities."""
        st = self.stats
        if (frame[0:6] != PFC_DST_MAC or frame[14] != 0x01 or frame[15] != 0x01
                or not self.honor_pfc):
            st.rx_ignored += 1
            return
        st.pfc_rx += 1
        now = _mono()
        enable = frame[17]                   # class-enable vector: e[7..0] in the low byte
        times = struct.unpack_from("!8H", frame, 18)
        ns_per_quantum = PFC_QUANTUM_BITS * 1e9 / self.rate_bps
        logs = self.logs
        for p in range(8):
            if not enable >> p & 1:
                continue
            q = times[p]
            if logs is not None:
                logs.pfc(now, p, q)
            until = self._pause_until[p]
            if until <= now:                 # not paused: a new pause interval
                if until > self._pause_start[p] and (p == self.priority
                                                     or p == self.cnp_priority):
                    self._paused_closed_ns += int(until - self._pause_start[p])
                self._pause_start[p] = now
            self._pause_until[p] = now + q * ns_per_quantum

    # -- event-loop wake-up --------------------------------------------------
    def _next_wake_ns(self, now: int, limit: int) -> int:
        wake = limit
        data_resume = self._pause_until[self.priority]
        if self._cnpq:
            wake = min(wake, max(self._slot_free_ns, self._tx_blocked_until,
                                 self._pause_until[self.cnp_priority]))
        if self._ctrl:
            wake = min(wake, max(self._slot_free_ns, self._tx_blocked_until, data_resume))
        if self._dline:
            wake = min(wake, max(self._dline[0][0], self._tx_blocked_until))
        # data may start once the wire, socket, PFC and the CPU (host_cpu) allow
        base = max(self._slot_free_ns, self._tx_blocked_until, data_resume,
                   self._cpu_tx_ready_ns)
        if self._rd_qps:
            wake = min(wake, self._read_wake_ns(base))
        if self._cpu_rxq:
            wake = min(wake, self._cpu_rxq[0][0])
        for qp in self._qp_list:
            if qp.rto_deadline_ns and qp.rto_deadline_ns < wake:
                wake = qp.rto_deadline_ns
            if (qp.snd_nxt < qp.next_psn and qp.state == QpState.RTS
                    and qp.snd_nxt - qp.snd_una < self.max_outstanding_pkts):
                t = max(base, qp.next_ok_ns, qp.paused_until_ns)
                if t < wake:
                    wake = t
        return int(wake) + 1 if wake > now else now

    # -- transmit ---------------------------------------------------------------
    def _pick_data(self, slot: float):
        """Round-robin: the next QP allowed to send at ``slot``, or None."""
        qps = self._qp_list
        n = len(qps)
        start = self._rr
        for i in range(n):
            j = start + i
            if j >= n:
                j -= n
            qp = qps[j]
            if (qp.snd_nxt < qp.next_psn and qp.state == QpState.RTS
                    and qp.next_ok_ns <= slot and qp.paused_until_ns <= slot
                    and qp.snd_nxt - qp.snd_una < self.max_outstanding_pkts):
                self._rr = j + 1 if j + 1 < n else 0
                return qp
        return None

    def _tx_service(self, now: int) -> None:
        if now < self._tx_blocked_until:
            return
        st = self.stats
        dline = self._dline
        ctrl = self._ctrl
        cnpq = self._cnpq
        delay = self.tx_delay_ns
        mtu = self.mtu_bytes
        rate = self.rate_bps
        pause_until = self._pause_until
        prio, cnp_prio = self.priority, self.cnp_priority
        rdq = self._rd_qps                   # READ responses to send (nic_read)
        cpu = self._pkt_cpu                  # per-packet CPU work (host_cpu), None: none
        for _ in range(self.TX_BURST):
            # frames whose propagation delay has passed leave now
            while dline and dline[0][0] <= now:
                if not self._emit(dline[0], now):
                    return
                dline.popleft()
            # serialize the next frame if its slot has come
            slot = self._slot_free_ns
            if self._wire_idle or slot < now - self.max_lag_ns:
                slot = max(slot, float(now - (0 if self._wire_idle else self.max_lag_ns)))
            if slot > now:
                return
            # strict priority (CNP, then ACK/NAK, then data), skipping paused
            # classes; a frame of a class that was paused starts no earlier
            # than the pause's end
            data_ok = now >= pause_until[prio]
            if cnpq and now >= pause_until[cnp_prio]:
                qp = cnpq.popleft()
                if slot < pause_until[cnp_prio]:
                    slot = pause_until[cnp_prio]
                flen = _CNP_FRAME_LEN
                desc = (slot + delay, 2, qp, None, 0, 0)
            elif ctrl and data_ok:
                qp, psn, syn, msn = ctrl.popleft()
                if slot < pause_until[prio]:
                    slot = pause_until[prio]
                flen = _ACK_FRAME_LEN
                desc = (slot + delay, 1, qp, None, psn, (syn << 24) | msn)
            elif rdq and data_ok and (rd := self._pick_read_resp(
                    slot if slot >= pause_until[prio] else pause_until[prio], now)) is not None:
                desc, flen, slot = rd
            else:
                if data_ok:
                    if slot < pause_until[prio]:
                        slot = pause_until[prio]
                    qp = self._pick_data(slot)
                else:
                    qp = None
                if qp is None:
                    self._wire_idle = True
                    return
                w = qp.sq[qp.cur_idx]
                k = qp.snd_nxt - w.first_psn
                plen = w.length - k * mtu
                if plen > mtu:
                    plen = mtu
                if cpu is not None:          # the CPU must have done this packet's work
                    slot = self._cpu_tx_gate(qp, slot, now, w.post_ns, 0 if w.is_read else plen)
                    if slot < 0:
                        self._wire_idle = True
                        return
                flen = _HDR_LEN + (16 if (w.is_write and k == 0) else 0) + plen + (-plen & 3) + 4
                desc = (slot + delay, 0, qp, w, k, qp.snd_nxt)
                if qp.snd_nxt < qp.snd_max:
                    st.tx_retransmits += 1
                if w.is_read:                # one READ request asks for all its remaining PSNs
                    flen = READ_REQ_FRAME_LEN
                    desc = (slot + delay, KIND_READ_REQ, qp, w, k, qp.snd_nxt)
                    qp.snd_nxt += w.npkts - k - 1
                    k = w.npkts - 1
                qp.snd_nxt += 1
                if qp.snd_nxt > qp.snd_max:
                    qp.snd_max = qp.snd_nxt
                if k + 1 >= w.npkts:
                    qp.cur_idx += 1
                if qp.rate_bps:
                    qp.next_ok_ns = max(qp.next_ok_ns, slot) + \
                        (flen + WIRE_OVERHEAD_BYTES) * 8e9 / qp.rate_bps
                qp.last_tx_slot = slot
                qp.last_tx_flen = flen
                cc = qp.cc
                if cc is not None and cc.active:
                    cc.on_tx(flen, int(slot))
            self._wire_idle = False
            lag = now - slot
            if lag > st.tx_lag_max_ns:
                st.tx_lag_max_ns = int(lag)
            st.tx_lag_sum_ns += int(lag)
            self._slot_free_ns = slot + (flen + WIRE_OVERHEAD_BYTES) * 8e9 / rate
            if delay <= 0 and not dline:
                if not self._emit(desc, now):
                    dline.appendleft(desc)
                    return
            else:
                dline.append(desc)

    def _emit(self, desc, now: int) -> bool:
        """Build and send one frame; False (and nothing changed) if the
        socket has no room (retried in 100 us)."""
        _, kind, qp, w, a, b = desc
        st = self.stats
        if kind == 0:
            k, psn = a, b
            n = w.npkts
            mtu = self.mtu_bytes
            off = k * mtu
            end = off + mtu
            if end > w.length:
                end = w.length
            if n == 1:
                op = w.ops[3]
            elif k == 0:
                op = w.ops[0]
            elif k == n - 1:
                op = w.ops[2]
            else:
                op = w.ops[1]
            ack_req = k == n - 1 or (psn + 1) % self.ack_every_n == 0
            reth = (w.remote_addr, w.rkey, w.length) if (w.is_write and k == 0) else None
            frame = qp.tpl.build(op, psn, w.buf[off:end], ack_req=ack_req, reth=reth)
        elif kind == 1:
            frame = qp.tpl.build(RC_ACK, a, aeth=(b >> 24, b & PSN_MASK))
        elif kind >= KIND_READ_REQ:
            frame = self._read_frame(kind, qp, w, a, b)
        else:
            tpl = qp.cnp_tpl
            if tpl is None:
                tpl = qp.cnp_tpl = FrameTemplate(
                    self.mac, qp.tpl_dst_mac, self.ip, qp.remote_ip, qp.udp_sport, qp.remote_qpn,
                    dscp=self.cnp_dscp, ecn=ECN_NOT_ECT, max_payload_bytes=len(_CNP_PAD),
                    pkey=self.pkey)
            frame = tpl.build(CNP_OPCODE, 0, _CNP_PAD, becn=True)
        try:
            self.sock.send(frame)
        except (BlockingIOError, InterruptedError):
            st.tx_enobufs += 1
            self._tx_blocked_until = now + 100_000
            return False
        except OSError as e:
            if e.errno in (errno.ENOBUFS, errno.EAGAIN):
                st.tx_enobufs += 1
                self._tx_blocked_until = now + 100_000
                return False
            raise
        st.tx_packets += 1
        st.tx_bytes += len(frame)
        if kind == 0:
            st.tx_data_packets += 1
            qp.tx_data_packets += 1
            st.tx_data_payload_bytes += end - off
            if not qp.rto_deadline_ns:
                qp.rto_deadline_ns = now + self._rto_for(qp)
        elif kind == 2:
            st.cnp_tx += 1
            if self.logs is not None:
                self.logs.cnp(now, qp.qpn, qp.remote_qpn, "tx")
        elif kind >= KIND_READ_REQ:
            self._read_sent(kind, qp, w, a, now)
        elif (b >> 24) == AETH_ACK_SYNDROME:
            st.tx_acks += 1
        return True
