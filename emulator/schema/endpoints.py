"""The schema of an experiment's ``endpoints:`` section: what each NIC does per packet.

```yaml
endpoints:                          # absent: plain NICs, no P_Keys, no costs (as before)
  tenancy: true                     # tenants' partitions (P_Keys) from the topology
  host_cpu: {cores: 1, firewall_ns_per_packet: 300, crypto_ns_per_packet: 800,
             crypto_ns_per_byte: 0, storage_ns_per_packet: 0, rx_backlog_pkts: 1024}
  dpu_cpu: {crypto_ns_per_packet: 0}    # the same work's cost on a DPU's cores
  gpudirect: true                   # false: data staged through host memory
  staging: {rate_gbps: 200, latency_us: 5}
  overrides:                        # in order, later ones win; one selector each
    - {servers: [server3], host_cpu: {cores: 2}}
    - {tenants: [red], host_cpu: {crypto_ns_per_packet: 400}}
    - {hosts: [s4n1], gpudirect: false}
```

Who does the per-packet work and which tenant a NIC belongs to come from
the topology, not from here: every NIC of a server with ``dpu: true`` (its
GPU NICs and its storage port) is a DPU, which runs firewall, crypto and
storage work on the card (``dpu_cpu`` costs, no host CPU); on a plain NIC the
same work costs ``host_cpu`` time per packet sent and received, and the
``cores`` serve that NIC's packets (each NIC's agent models its own cores).

Tenancy (``emulator/agents/dpu.py``): tenant number = position of the tenant
in the topology's ``servers.tenants`` (1, 2, ...); its NICs tag every frame
with BTH P_Key 0x8000|n and drop (count, never ACK) frames of another
partition. A flow between two tenants is therefore *expected to be
dropped*: the sender tags with its own tenant's P_Key (a misbehaving or
foreign sender aiming at a real QP and memory region of the other tenant)
and the receiver's filter discards every packet. Such a flow must say so
with ``expect: dropped`` (a ``pattern`` flow crossing tenants is expected
dropped implicitly); ``expect: dropped`` on a flow within a tenant is an
error. The summary checks the expectation: a dropped flow placed nothing,
and each receiver's ``tenant_drops`` equals the foreign packets sent to it
(``emulator/experiment/endpoint_results.py``). Servers without a tenant
(e.g. storage) keep the default partition 0xFFFF, which tenants drop too: a
flow between a tenant and a tenant-less host is rejected.

Units: fabric ns per packet (per byte) and fabric Gbps/µs here; the agent
configs get them as ``schema.nic.HostCpuConfig`` (the NIC dilates them).
Resolution (who gets which costs, the agents' keys) is
``emulator.experiment.endpoints``.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, NonNegativeFloat, model_validator

from emulator.schema.limits import FabricUs, RateGbps
from emulator.schema.load import StrictSpec
from emulator.schema.nic import BacklogPkts, CpuCores

DELIVERED, DROPPED = "delivered", "dropped"
FlowExpect = Literal["delivered", "dropped"]


class CpuCostSpec(StrictSpec):
    """Per-packet costs in fabric ns (``schema.nic.HostCpuConfig``); unset keys inherit."""
    cores: Optional[CpuCores] = None
    firewall_ns_per_packet: Optional[NonNegativeFloat] = None
    crypto_ns_per_packet: Optional[NonNegativeFloat] = None
    crypto_ns_per_byte: Optional[NonNegativeFloat] = None
    storage_ns_per_packet: Optional[NonNegativeFloat] = None
    rx_backlog_pkts: Optional[BacklogPkts] = None


class StagingSpec(StrictSpec):
    """Host-memory staging path used with ``gpudirect: false`` (fabric units)."""
    rate_gbps: RateGbps = 100.0
    latency_us: FabricUs = 10.0


class OverrideSpec(StrictSpec):
    servers: Optional[list[str]] = Field(None, min_length=1)
    tenants: Optional[list[str]] = Field(None, min_length=1)
    hosts: Optional[list[str]] = Field(None, min_length=1)
    host_cpu: Optional[CpuCostSpec] = None
    dpu_cpu: Optional[CpuCostSpec] = None
    gpudirect: Optional[bool] = None
    staging: Optional[StagingSpec] = None

    @model_validator(mode="after")
    def _one_selector(self):
        if sum(x is not None for x in (self.servers, self.tenants, self.hosts)) != 1:
            raise ValueError("give exactly one of 'servers', 'tenants', 'hosts'")
        return self


class EndpointsSpec(StrictSpec):
    tenancy: bool = True
    host_cpu: CpuCostSpec = CpuCostSpec()
    dpu_cpu: CpuCostSpec = CpuCostSpec()
    gpudirect: Optional[bool] = None       # None: no GPU memory model (as before)
    staging: StagingSpec = StagingSpec()
    overrides: list[OverrideSpec] = []
