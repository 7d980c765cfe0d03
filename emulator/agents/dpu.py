"""Endpoints with and without a DPU, tenant isolation, and an NVMe-oF-like
storage target served by RDMA READ.

``Endpoint(nic, dpu=..., tenant=..., host_cpu=..., dpu_cpu=...)`` says who
does a host's per-packet work (``host_cpu``'s model):

* plain NIC (``dpu=False``): firewalling, encryption and storage-protocol
  work run on the host CPU (``host_cpu`` costs, ``cores``). Tenant isolation
  is a host-software filter: every foreign frame costs the firewall's
  per-packet time before it is dropped, our own data packets pay it with the
  rest of their per-packet work.
* DPU (``dpu=True``): the same functions run on the card. They cost no host
  CPU; ``dpu_cpu`` (default: all zero) optionally gives the card's cores
  their own per-packet costs, which gate packets the same way but are
  reported separately (``dpu_cpu``), never as host CPU.

Tenants are InfiniBand partitions, the natural RoCE mechanism: tenant t
(1..0x7FFE) tags every frame it sends with BTH P_Key 0x8000 | t (full
member of partition t) and accepts only frames of partition t; others are
dropped before any QP sees them (``stats.tenant_drops``), so they are never
ACKed or NAKed. No tenant: P_Key 0xFFFF (the default partition, what a NIC
without an endpoint sends) and no filter.

The model in full: docs/nic.md, "dpu".
"""
from __future__ import annotations

from emulator.nic.host_cpu import CpuServers
from emulator.nic.qp import MemoryRegion, QueuePair
from emulator.nic.wall import cpu_params
from emulator.schema.nic import HostCpuConfig

PKEY_FULL_MEMBER = 0x8000


def tenant_pkey(tenant: int) -> int:
    """BTH P_Key of tenant ``tenant``: full member of partition ``tenant``."""
    if isinstance(tenant, bool) or not isinstance(tenant, int) or not 1 <= tenant <= 0x7FFE:
        raise ValueError(f"tenant must be an integer 1..32766, got {tenant!r}")
    return PKEY_FULL_MEMBER | tenant


class Endpoint:
    """A host's NIC with its per-packet work placed on the host CPU (plain
    NIC) or on a DPU; see the module docstring."""

    def __init__(self, nic, *, dpu: bool = False, tenant: int | None = None,
                 host_cpu: HostCpuConfig | None = None, dpu_cpu: HostCpuConfig | None = None):
        self.nic = nic
        self.dpu = bool(dpu)
        self.tenant = tenant
        self.host_params = cpu_params(host_cpu or HostCpuConfig(), nic.dilation)
        self.dpu_params = cpu_params(dpu_cpu or HostCpuConfig(), nic.dilation) if dpu else None
        clock = nic.clock
        self.host_cpu = CpuServers(self.host_params.cores, "host", clock)
        self.dpu_cpu = CpuServers(self.dpu_params.cores, "dpu", clock) if dpu else None
        # the per-packet functions run where the endpoint puts them
        self.work = self.dpu_params if dpu else self.host_params
        self.proc = self.dpu_cpu if dpu else self.host_cpu
        self.storage_qpns: set[int] = set()
        nic.set_packet_cpu(self.proc if self.work.any_cost() else None,
                           self.work.rx_backlog_pkts)
        nic.set_partition(None if tenant is None else tenant_pkey(tenant),
                          self.proc, self.work.firewall_ns_per_packet)
        for qp in nic.qps:
            self.apply(qp)

    def apply(self, qp: QueuePair) -> None:
        """Set ``qp``'s per-packet costs (and its frames' P_Key)."""
        w = self.work
        c = w.firewall_ns_per_packet + w.crypto_ns_per_packet
        if qp.qpn in self.storage_qpns:
            c += w.storage_ns_per_packet
        qp.cpu_tx_ns = qp.cpu_rx_ns = float(c)
        qp.cpu_ns_per_byte = float(w.crypto_ns_per_byte)
        qp.tpl.pkey = self.nic.pkey

    def create_qp(self, *a, **kw) -> QueuePair:
        qp = self.nic.create_qp(*a, **kw)
        self.apply(qp)
        return qp

    def mark_storage(self, qp: QueuePair) -> None:
        """``qp`` carries storage-protocol traffic (its packets also cost
        ``storage_ns_per_packet``)."""
        self.storage_qpns.add(qp.qpn)
        self.apply(qp)

    def reset(self, t0_ns: int | None = None) -> None:
        """Start measuring CPU busy time now (or at ``t0_ns``)."""
        self.host_cpu.reset(t0_ns)
        if self.dpu_cpu is not None:
            self.dpu_cpu.reset(t0_ns)

    def report(self, now: int | None = None) -> dict:
        """For the agent's result: host CPU (and DPU core) busy time and
        fraction, tenant drops."""
        return {"dpu": self.dpu, "tenant": self.tenant,
                "pkey": self.nic.pkey, "tenant_drops": self.nic.stats.tenant_drops,
                "cpu_rx_drops": self.nic.stats.cpu_rx_drops,
                "host_cpu": self.host_cpu.report(now),
                "dpu_cpu": self.dpu_cpu.report(now) if self.dpu_cpu is not None else None}


class StorageTarget:
    """A block "disk" in a registered memory region, read with RDMA READ."""

    def __init__(self, nic, block_bytes: int, blocks: int, *, storage_latency_ns: int = 0,
                 rkey: int | None = None, addr: int | None = None, buf=None,
                 endpoint: Endpoint | None = None):
        if block_bytes <= 0 or blocks <= 0:
            raise ValueError("block_bytes and blocks must be > 0")
        self.nic = nic
        self.block_bytes, self.blocks = block_bytes, blocks
        self.mr: MemoryRegion = nic.register_mr(block_bytes * blocks, addr=addr, rkey=rkey,
                                                buf=buf)
        self.mr.read_latency_ns = int(storage_latency_ns)
        self.endpoint = endpoint

    @property
    def rkey(self) -> int:
        return self.mr.rkey

    @property
    def base_addr(self) -> int:
        return self.mr.addr

    def block(self, k: int) -> memoryview:
        """The bytes of block ``k`` (to fill or check)."""
        b = self.block_bytes
        return self.mr.mv[k * b:(k + 1) * b]

    def serve(self, qp: QueuePair) -> None:
        """Clients reach the target over ``qp`` (storage traffic)."""
        if self.endpoint is not None:
            self.endpoint.mark_storage(qp)


class StorageClient:
    """Reads blocks of a remote ``StorageTarget`` (given its base address,
    rkey and block size, exchanged out of band)."""

    def __init__(self, nic, qp: QueuePair, base_addr: int, rkey: int, block_bytes: int,
                 endpoint: Endpoint | None = None):
        self.nic, self.qp = nic, qp
        self.base_addr, self.rkey, self.block_bytes = base_addr, rkey, block_bytes
        if endpoint is not None:
            endpoint.mark_storage(qp)

    def read_block(self, wr_id: int, k: int, local: tuple[MemoryRegion, int],
                   nblocks: int = 1) -> None:
        """READ blocks k..k+nblocks-1 into ``local`` = (mr, offset)."""
        mr, off = local
        n = self.block_bytes * nblocks
        self.nic.post_read(self.qp, wr_id, (mr, off, n), self.base_addr + k * self.block_bytes,
                           self.rkey)
