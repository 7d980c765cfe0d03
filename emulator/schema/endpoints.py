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

Who does the per-packet work (a DPU's cores, or ``host_cpu`` time on a plain NIC)
and which tenant a NIC belongs to come from the topology; tenants' NICs tag their
frames with their P_Key and drop other partitions' (a flow between tenants says
``expect: dropped``): ``docs/nic.md``, "Endpoints: per-packet work and tenancy".

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
