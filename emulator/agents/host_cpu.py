"""Per-packet CPU work of an endpoint: the host CPU of a plain-NIC host (or
a DPU's cores), modelled as a FCFS queue with ``cores`` servers.

Firewalling, encryption and storage-protocol work cost CPU time per packet
(and, for encryption, optionally per payload byte) on transmit and on
receive of the packets they apply to:

* transmit: a data frame (WRITE/SEND packet, READ request, READ response)
  may not start on the wire before a core has done its work. The work of a
  packet starts when a core is free and the packet exists (its WQE was
  posted / its READ was accepted); the pacer holds the frame until the work
  is done. With 1 core of c ns per packet a host drives at most 1/c packets
  per second, whatever the link rate; k cores prepare k packets in parallel.
* receive: a data-bearing packet for one of our QPs (request or READ
  response) is handed to the responder/requester only when a core has done
  its work (start = max(arrival, a core free)); at most ``rx_backlog_pkts``
  wait for the CPU, more are dropped (``stats.cpu_rx_drops``, like an
  overflowing receive ring: go-back-N recovers). Each QP's packets are
  delivered in arrival order. ACK/NAKs, CNPs and PFC frames are the NIC's
  own business and cost nothing.
* tenant filter (``rx_partition``, set by ``dpu.Endpoint``): a received
  RoCE frame whose BTH P_Key is not of our partition is dropped and counted
  (``stats.tenant_drops``) before any QP sees it, so it is never ACKed; on a
  plain NIC the filter is host software and each inspected frame costs
  ``filter_ns`` of CPU work (a DPU does it on the card for free).

Which processor (the host CPU or a DPU's cores), and how much each QP's
packets cost, is set by ``dpu.Endpoint``; a NIC without it has
``_pkt_cpu = None`` and ``_rx_hook = None`` and pays nothing per packet.

Times: ``monotonic_ns`` (wall). Configured costs are fabric ns per packet;
the caller multiplies them by the dilation factor D before handing them in
(``HostCpuParams.dilated``), like every other time the agents get. Busy
fractions (busy time / elapsed time) are the same in wall and fabric time.
"""
from __future__ import annotations

import heapq
import time
from dataclasses import asdict, dataclass, fields

from .nic_read import READ_OPS
from .nic_rx import _REQ
from .roce import AETH_ACK_SYNDROME, ECN_CE, PSN_MASK, parse_roce

_DATA_OPS = frozenset(_REQ) | READ_OPS

_mono = time.monotonic_ns


@dataclass
class HostCpuParams:
    """Per-packet CPU costs (fabric ns) and the number of cores."""
    cores: int = 1
    firewall_ns_per_packet: float = 0.0
    crypto_ns_per_packet: float = 0.0
    crypto_ns_per_byte: float = 0.0
    storage_ns_per_packet: float = 0.0
    rx_backlog_pkts: int = 1024

    @classmethod
    def from_config(cls, d: dict | None) -> "HostCpuParams":
        d = dict(d or {})
        names = {f.name for f in fields(cls)}
        bad = set(d) - names
        if bad:
            raise ValueError(f"unknown key(s) {sorted(bad)}")
        p = cls(**d)
        if isinstance(p.cores, bool) or not isinstance(p.cores, int) or p.cores < 1:
            raise ValueError("cores must be an integer >= 1")
        if not isinstance(p.rx_backlog_pkts, int) or p.rx_backlog_pkts < 1:
            raise ValueError("rx_backlog_pkts must be an integer >= 1")
        for f in ("firewall_ns_per_packet", "crypto_ns_per_packet", "crypto_ns_per_byte",
                  "storage_ns_per_packet"):
            v = getattr(p, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ValueError(f"{f} must be a number >= 0")
        return p

    def dilated(self, d: float) -> "HostCpuParams":
        """The same costs in wall time at dilation factor ``d``."""
        x = HostCpuParams(**asdict(self))
        for f in ("firewall_ns_per_packet", "crypto_ns_per_packet", "crypto_ns_per_byte",
                  "storage_ns_per_packet"):
            setattr(x, f, getattr(self, f) * d)
        return x

    def any_cost(self) -> bool:
        return bool(self.firewall_ns_per_packet or self.crypto_ns_per_packet
                    or self.crypto_ns_per_byte or self.storage_ns_per_packet)

    def as_dict(self) -> dict:
        return asdict(self)


class CpuServers:
    """``cores`` identical cores serving work first come, first served.
    ``admit(t, cost)`` runs ``cost`` ns of work that can start at ``t`` on
    the core free first and returns when it is done."""

    def __init__(self, cores: int = 1, name: str = "host"):
        self.cores = cores
        self.name = name
        self.free_ns = [0.0] * cores
        self.busy_ns = 0.0
        self.jobs = 0
        self.t0_ns = _mono()

    def admit(self, t_ns: float, cost_ns: float) -> float:
        free = self.free_ns
        i = 0
        if self.cores > 1:
            i = free.index(min(free))
        start = free[i] if free[i] > t_ns else t_ns
        done = start + cost_ns
        free[i] = done
        self.busy_ns += cost_ns
        self.jobs += 1
        return done

    def reset(self, t0_ns: int | None = None) -> None:
        """Start measuring busy time now (or at ``t0_ns``)."""
        self.busy_ns = 0.0
        self.jobs = 0
        self.t0_ns = _mono() if t0_ns is None else t0_ns

    def busy_fraction(self, now: int | None = None) -> float:
        """Busy time / (elapsed x cores) since ``t0_ns``. Work admitted but
        not finished by ``now`` is counted (it is committed)."""
        now = _mono() if now is None else now
        el = (now - self.t0_ns) * self.cores
        return min(1.0, self.busy_ns / el) if el > 0 else 0.0

    def report(self, now: int | None = None) -> dict:
        now = _mono() if now is None else now
        return {"cores": self.cores, "busy_ns": int(self.busy_ns),
                "elapsed_ns": int(now - self.t0_ns), "packets": self.jobs,
                "busy_fraction": round(self.busy_fraction(now), 4)}


class PacketCpuMixin:
    """``RoceNic``'s per-packet CPU gate (transmit), delayed delivery
    (receive) and receive-side tenant filter. Off unless configured."""

    def set_packet_cpu(self, cpu: CpuServers | None, rx_backlog_pkts: int = 1024) -> None:
        """Charge per-packet work (the QPs' ``cpu_*`` costs) to ``cpu``
        (None: nobody, no per-packet cost)."""
        self._pkt_cpu = cpu
        self.cpu_rx_backlog_pkts = rx_backlog_pkts
        self._cpu_tx_ready_ns = 0.0
        self._cpu_seq = 0
        self._update_rx_hook()

    def set_partition(self, pkey: int | None, filter_cpu: CpuServers | None = None,
                      filter_ns: float = 0.0) -> None:
        """Tag our frames with BTH P_Key ``pkey`` and accept only frames of
        its partition (None: default P_Key 0xFFFF, accept all). Inspecting a
        frame costs ``filter_ns`` on ``filter_cpu`` (a host-software filter)."""
        self.pkey = 0xFFFF if pkey is None else pkey
        self.rx_partition = None if pkey is None else pkey & 0x7FFF
        self._filter_cpu = filter_cpu if filter_ns > 0 else None
        self.filter_ns = filter_ns
        for qp in self._qp_list:
            qp.tpl.pkey = self.pkey
            if qp.cnp_tpl is not None:
                qp.cnp_tpl.pkey = self.pkey
        self._update_rx_hook()

    def _update_rx_hook(self) -> None:
        on = self._pkt_cpu is not None or self.rx_partition is not None
        self._rx_hook = self._cpu_rx_hook if on else None

    # -- transmit ----------------------------------------------------------------
    def _cpu_tx_gate(self, qp, slot: float, now: int, avail_ns: float, nbytes: int) -> float:
        """When a frame of ``qp`` (payload ``nbytes``, its packet existing
        since ``avail_ns``) may start: ``slot`` or later, or -1.0 to hold it
        until the CPU is done (``_cpu_tx_ready_ns``, a pacer wake-up)."""
        ready = self._cpu_tx_ready_ns
        if not ready:
            cost = qp.cpu_tx_ns + nbytes * qp.cpu_ns_per_byte
            if cost <= 0:
                return slot
            ready = self._pkt_cpu.admit(avail_ns, cost)
        if ready <= now:
            self._cpu_tx_ready_ns = 0.0
            return ready if ready > slot else slot
        self._cpu_tx_ready_ns = ready        # this much work is done for the next frame
        return -1.0

    # -- receive -----------------------------------------------------------------
    def _cpu_rx_hook(self, frame, pkt, now: int) -> bool:
        """True when the frame is consumed here: dropped (other tenant, CPU
        backlog full) or held until its CPU work is done."""
        part = self.rx_partition
        if part is not None:
            off = 18 if frame[12] == 0x81 else 14
            b = off + (frame[off] & 15) * 4 + 8          # BTH
            if ((frame[b + 2] << 8) | frame[b + 3]) & 0x7FFF != part:
                self.stats.tenant_drops += 1
                # a software filter spent its per-packet time finding out (our
                # own data packets pay it in their QP's cpu_rx_ns)
                fcpu = self._filter_cpu
                if fcpu is not None:
                    fcpu.admit(now, self.filter_ns)
                return True
        cpu = self._pkt_cpu
        if cpu is None or pkt.opcode not in _DATA_OPS:
            return False
        qp = self._qps.get(pkt.dst_qp)
        if qp is None or pkt.src_ip != qp.remote_ip_int:
            return False
        cost = qp.cpu_rx_ns + len(pkt.payload) * qp.cpu_ns_per_byte
        if cost <= 0:
            return False
        if len(self._cpu_rxq) >= self.cpu_rx_backlog_pkts:
            self.stats.cpu_rx_drops += 1
            return True
        done = cpu.admit(now, cost)
        if done < qp.cpu_rx_done:            # keep each QP's packets in order
            done = qp.cpu_rx_done
        qp.cpu_rx_done = done
        self._cpu_seq += 1
        heapq.heappush(self._cpu_rxq, (done, self._cpu_seq, bytes(frame)))
        return True

    def _cpu_rx_release(self, now: int) -> None:
        """Deliver the received packets whose CPU work is done (the receive
        path's dispatch for data packets, then its coalesced ACKs)."""
        q = self._cpu_rxq
        st = self.stats
        while q and q[0][0] <= now:
            _, _, frame = heapq.heappop(q)
            pkt = parse_roce(frame)
            qp = self._qps.get(pkt.dst_qp)
            if qp is None:
                continue
            st.rx_packets += 1
            st.rx_bytes += len(frame)
            if pkt.opcode in _REQ:
                if pkt.ecn == ECN_CE:
                    st.ecn_ce_rx += 1
                    self._rx_ce(qp, now)
                    if self.on_ecn_ce is not None:
                        self.on_ecn_ce(qp, pkt)
                self._rx_request(qp, pkt, now)
            else:
                self._rx_read(qp, pkt, now)
            self.last_rx_ns = now
        if self._ack_list:
            for qp in self._ack_list:
                if qp.ack_pending:
                    qp.ack_pending = False
                    self._ctrl.append((qp, (qp.epsn - 1) & PSN_MASK, AETH_ACK_SYNDROME,
                                       qp.msn))
            self._ack_list.clear()
