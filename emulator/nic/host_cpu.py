"""Per-packet CPU work of an endpoint: the host CPU of a plain-NIC host (or
a DPU's cores), modelled as a FCFS queue with ``cores`` servers.

Firewalling, encryption and storage-protocol work cost CPU time per packet
(and, for encryption, optionally per payload byte) on transmit and on
receive of the packets they apply to:

The model in full: docs/nic.md, "host_cpu".
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from emulator.clock import MONOTONIC, TimerHeap


@dataclass(frozen=True)
class HostCpuParams:
    """Per-packet CPU costs on the NIC's clock and the number of cores
    (``nic.wall.cpu_params``, from the config's ``schema.nic.HostCpuConfig``)."""
    cores: int
    firewall_ns_per_packet: float
    crypto_ns_per_packet: float
    crypto_ns_per_byte: float
    storage_ns_per_packet: float
    rx_backlog_pkts: int

    def any_cost(self) -> bool:
        return bool(self.firewall_ns_per_packet or self.crypto_ns_per_packet
                    or self.crypto_ns_per_byte or self.storage_ns_per_packet)

    def as_dict(self) -> dict:
        return asdict(self)


class CpuServers:
    """``cores`` identical cores serving work first come, first served.
    ``admit(t, cost)`` runs ``cost`` ns of work that can start at ``t`` on
    the core free first and returns when it is done."""

    def __init__(self, cores: int = 1, name: str = "host", clock=MONOTONIC):
        self.cores = cores
        self.name = name
        self.clock = clock
        self.free_ns = [0.0] * cores
        self.busy_ns = 0.0
        self.jobs = 0
        self.t0_ns = clock.now_ns()

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
        self.t0_ns = self.clock.now_ns() if t0_ns is None else t0_ns

    def busy_fraction(self, now: int | None = None) -> float:
        """Busy time / (elapsed x cores) since ``t0_ns``. Work admitted but
        not finished by ``now`` is counted (it is committed)."""
        now = self.clock.now_ns() if now is None else now
        el = (now - self.t0_ns) * self.cores
        return min(1.0, self.busy_ns / el) if el > 0 else 0.0

    def report(self, now: int | None = None) -> dict:
        now = self.clock.now_ns() if now is None else now
        return {"cores": self.cores, "busy_ns": int(self.busy_ns),
                "elapsed_ns": int(now - self.t0_ns), "packets": self.jobs,
                "busy_fraction": round(self.busy_fraction(now), 4)}


class CpuGate:
    """Per-packet CPU work on ``cpu`` in the NIC's paths: ``tx`` holds a
    frame until its work is done; ``rx_admit`` queues a received data packet
    until its work is done (``rx_due`` hands it back)."""

    __slots__ = ("cpu", "rx_backlog_pkts", "tx_ready_ns", "rxq", "stats")

    def __init__(self, cpu: CpuServers, rx_backlog_pkts: int, stats):
        self.cpu = cpu
        self.rx_backlog_pkts = rx_backlog_pkts
        self.tx_ready_ns = 0.0           # work done for the frame waiting (0: none waits)
        self.rxq = TimerHeap()           # received frames by when their work ends
        self.stats = stats

    # -- transmit ----------------------------------------------------------------
    def tx(self, qp, slot: float, now: int, avail_ns: float, nbytes: int) -> float:
        """When a frame of ``qp`` (payload ``nbytes``, its packet existing
        since ``avail_ns``) may start: ``slot`` or later, or -1.0 to hold it
        until the CPU is done (``tx_ready_ns``, a pacer wake-up)."""
        ready = self.tx_ready_ns
        if not ready:
            cost = qp.cpu_tx_ns + nbytes * qp.cpu_ns_per_byte
            if cost <= 0:
                return slot
            ready = self.cpu.admit(avail_ns, cost)
        if ready <= now:
            self.tx_ready_ns = 0.0
            return ready if ready > slot else slot
        self.tx_ready_ns = ready         # this much work is done for the next frame
        return -1.0

    # -- receive -----------------------------------------------------------------
    def rx_admit(self, frame, pkt, qp, now: int) -> bool:
        """A data packet for ``qp`` arrived at ``now``: True when it is held
        (or dropped: backlog full), False when it costs nothing."""
        cost = qp.cpu_rx_ns + len(pkt.payload) * qp.cpu_ns_per_byte
        if cost <= 0:
            return False
        if len(self.rxq) >= self.rx_backlog_pkts:
            self.stats.cpu_rx_drops += 1
            return True
        done = self.cpu.admit(now, cost)
        if done < qp.cpu_rx_done:        # keep each QP's packets in order
            done = qp.cpu_rx_done
        qp.cpu_rx_done = done
        self.rxq.push(done, bytes(frame))
        return True

    def rx_due(self, now: int):
        """The held frames whose work is done by ``now``, in order."""
        return self.rxq.pop_due(now)

    def next_rx_ns(self) -> int | None:
        return self.rxq.next_due_ns()


class TenantFilter:
    """Accept only RoCE frames of partition ``pkey & 0x7FFF``; a foreign
    frame is dropped (``stats.tenant_drops``) and, for a host-software
    filter, costs ``filter_ns`` on ``filter_cpu``."""

    __slots__ = ("partition", "filter_cpu", "filter_ns", "stats")

    def __init__(self, pkey: int, filter_cpu: CpuServers | None, filter_ns: float, stats):
        self.partition = pkey & 0x7FFF
        self.filter_cpu = filter_cpu if filter_ns > 0 else None
        self.filter_ns = filter_ns
        self.stats = stats

    def drops(self, frame, now: int) -> bool:
        off = 18 if frame[12] == 0x81 else 14
        b = off + (frame[off] & 15) * 4 + 8          # BTH
        if ((frame[b + 2] << 8) | frame[b + 3]) & 0x7FFF == self.partition:
            return False
        self.stats.tenant_drops += 1
        # a software filter spent its per-packet time finding out (our own
        # data packets pay it in their QP's cpu_rx_ns)
        if self.filter_cpu is not None:
            self.filter_cpu.admit(now, self.filter_ns)
        return True
