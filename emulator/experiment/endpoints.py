"""The ``endpoints:`` section of an experiment: what each NIC does per packet.

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
configs get them dilated (``HostCpuParams.dilated``: x D; rates / D).
"""
from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, model_validator

from emulator.agents.host_cpu import HostCpuParams
from emulator.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from emulator.experiment.model import Experiment, ExperimentSpec, Flow
    from emulator.topo import Fabric

DELIVERED, DROPPED = "delivered", "dropped"
FlowExpect = Literal["delivered", "dropped"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CpuCostSpec(_Strict):
    """Per-packet costs in fabric ns (``host_cpu.HostCpuParams``); unset keys inherit."""
    cores: int | None = Field(None, ge=1, le=1024)
    firewall_ns_per_packet: NonNegativeFloat | None = None
    crypto_ns_per_packet: NonNegativeFloat | None = None
    crypto_ns_per_byte: NonNegativeFloat | None = None
    storage_ns_per_packet: NonNegativeFloat | None = None
    rx_backlog_pkts: int | None = Field(None, ge=1)

    def over(self, base: HostCpuParams) -> HostCpuParams:
        return HostCpuParams(**{**asdict(base), **self.model_dump(exclude_none=True)})


class StagingSpec(_Strict):
    """Host-memory staging path used with ``gpudirect: false`` (fabric units)."""
    rate_gbps: PositiveFloat = 100.0
    latency_us: NonNegativeFloat = 10.0


class OverrideSpec(_Strict):
    servers: list[str] | None = Field(None, min_length=1)
    tenants: list[str] | None = Field(None, min_length=1)
    hosts: list[str] | None = Field(None, min_length=1)
    host_cpu: CpuCostSpec | None = None
    dpu_cpu: CpuCostSpec | None = None
    gpudirect: bool | None = None
    staging: StagingSpec | None = None

    @model_validator(mode="after")
    def _one_selector(self):
        if sum(x is not None for x in (self.servers, self.tenants, self.hosts)) != 1:
            raise ValueError("give exactly one of 'servers', 'tenants', 'hosts'")
        return self


class EndpointsSpec(_Strict):
    tenancy: bool = True
    host_cpu: CpuCostSpec = CpuCostSpec()
    dpu_cpu: CpuCostSpec = CpuCostSpec()
    gpudirect: bool | None = None          # None: no GPU memory model (as before)
    staging: StagingSpec = StagingSpec()
    overrides: list[OverrideSpec] = []


# ----------------------------------------------------------------- resolution

def tenant_numbers(fabric: "Fabric") -> dict[str, int]:
    """Tenant name -> partition number 1, 2, ... in topology order."""
    out: dict[str, int] = {}
    for s in fabric.servers():
        if s.tenant is not None and s.tenant not in out:
            out[s.tenant] = len(out) + 1
    return out


def host_tenant(exp: "Experiment", host: str) -> str | None:
    """The tenant whose partition ``host`` is in (None: no tenancy / no tenant)."""
    ep = exp.spec.endpoints
    if ep is None or not ep.tenancy:
        return None
    return exp.fabric.server_of(host).tenant


def flow_expect(exp: "Experiment", flow: "Flow") -> str:
    """``dropped`` for a flow between two tenants, else ``delivered``."""
    a, b = host_tenant(exp, flow.src), host_tenant(exp, flow.dst)
    return DROPPED if a is not None and b is not None and a != b else DELIVERED


def host_params(exp: "Experiment", host: str) -> dict:
    """The resolved endpoint of one NIC, fabric units: server, tenant, dpu,
    host_cpu / dpu_cpu (``HostCpuParams``), gpudirect, staging."""
    ep = exp.spec.endpoints
    assert ep is not None
    server = exp.fabric.server_of(host)
    r = {"server": server.name, "tenant": host_tenant(exp, host), "dpu": server.dpu,
         "host_cpu": ep.host_cpu.over(HostCpuParams()),
         "dpu_cpu": ep.dpu_cpu.over(HostCpuParams()),
         "gpudirect": ep.gpudirect, "staging": ep.staging}
    for o in ep.overrides:
        if not ((o.servers and server.name in o.servers) or (o.hosts and host in o.hosts)
                or (o.tenants and server.tenant in o.tenants)):
            continue
        for k in ("host_cpu", "dpu_cpu"):
            if getattr(o, k) is not None:
                r[k] = getattr(o, k).over(r[k])
        if o.gpudirect is not None:
            r["gpudirect"] = o.gpudirect
        if o.staging is not None:
            r["staging"] = o.staging
    return r


def agent_keys(exp: "Experiment", host: str) -> dict:
    """The host agent's endpoint config keys (``emulator/agents/host.py``),
    dilated; {} without an ``endpoints:`` section (agents as before)."""
    if exp.spec.endpoints is None:
        return {}
    d = exp.dilation
    p = host_params(exp, host)
    tenants = tenant_numbers(exp.fabric)
    out = {"dpu": p["dpu"], "tenant": tenants[p["tenant"]] if p["tenant"] else None,
           "host_cpu": p["host_cpu"].dilated(d).as_dict(),
           "dpu_cpu": p["dpu_cpu"].dilated(d).as_dict()}
    if p["gpudirect"] is not None:
        out.update(gpudirect=p["gpudirect"],
                   staging_rate_bps=p["staging"].rate_gbps * 1e9 / d,
                   staging_latency_ns=p["staging"].latency_us * 1000 * d)
    return out


def configure_agents(exp: "Experiment", configs: dict[str, dict]) -> None:
    """Add each host's endpoint keys to its agent config; turn flows expected
    to be dropped into foreign traffic: the receiver has the QP (the target
    is real) but expects nothing, and the sender WRITEs at the start of the
    receiver's memory region, over the receiver's own data should a packet
    ever get through (its flows' ``intact`` would catch it)."""
    if exp.spec.endpoints is None:
        return
    for host, cfg in configs.items():
        cfg.update(agent_keys(exp, host))
    for f in exp.flows:
        if flow_expect(exp, f) != DROPPED:
            continue
        dst = configs[f.dst]
        dst["expect"] = [e for e in dst["expect"] if e["flow_id"] != f.flow_id]
        for s in configs[f.src]["send"]:
            if s["flow_id"] == f.flow_id and s["op"] == "write":
                s["remote_addr"] = 0


# ----------------------------------------------------------------- validation

def check_endpoints(spec: "ExperimentSpec", fabric: "Fabric", flows, path: "Path") -> None:
    """Overrides name real servers/tenants/hosts; flows agree with tenancy."""
    ep = spec.endpoints
    servers = {s.name for s in fabric.servers()}
    tenants = set(tenant_numbers(fabric))
    hosts = {h.name for h in fabric.hosts()}
    if ep is not None:
        for i, o in enumerate(ep.overrides):
            for key, known, what in (("servers", servers, "server"), ("tenants", tenants, "tenant"),
                                     ("hosts", hosts, "host")):
                for j, name in enumerate(getattr(o, key) or []):
                    if name not in known:
                        raise ConfigError(path, f"endpoints.overrides[{i}].{key}[{j}]",
                                          f"{name!r} is not a {what} of fabric {fabric.name!r}")
    tenancy = ep is not None and ep.tenancy

    def tenant(h: str):
        return fabric.server_of(h).tenant if tenancy else None

    for i, t in enumerate(spec.traffic or []):
        expect = getattr(t, "expect", None)
        if t.pattern is not None or t.src not in hosts or t.dst not in hosts:
            if expect is not None and t.pattern is not None:
                raise ConfigError(path, f"traffic[{i}].expect",
                                  "a pattern's flows are expected by tenancy; give 'expect' "
                                  "on src/dst flows only")
            continue
        a, b = tenant(t.src), tenant(t.dst)
        if (a is None) != (b is None) and tenancy and tenants:
            raise ConfigError(path, f"traffic[{i}]",
                              f"{t.src} and {t.dst}: one is in tenant {a or b!r}, the other in "
                              f"none; a tenant's NICs drop the default partition (ACKs too)")
        crosses = a is not None and b is not None and a != b
        if crosses and expect != DROPPED:
            raise ConfigError(path, f"traffic[{i}].expect",
                              f"{t.src} (tenant {a}) to {t.dst} (tenant {b}) crosses tenants: "
                              f"its packets are dropped; say 'expect: dropped' if that is the point")
        if expect == DROPPED and not crosses:
            raise ConfigError(path, f"traffic[{i}].expect",
                              "only a flow between two tenants (with an endpoints: section, "
                              "tenancy on) is dropped; this one would be delivered")
    for f in flows:
        a, b = tenant(f.src), tenant(f.dst)
        if (a is None) != (b is None) and tenancy and tenants:
            raise ConfigError(path, "traffic", f"flow {f.src} -> {f.dst}: one end has tenant "
                                               f"{a or b!r}, the other none")
