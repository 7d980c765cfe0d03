"""What an experiment's ``endpoints:`` section (``emulator.schema.endpoints``)
means for each NIC: its server, tenant, DPU or host CPU costs and GPUDirect
setting (``host_params``), the keys of its agent's config (``agent_keys``),
which flows tenancy drops (``flow_expect``), and the checks against the
fabric (``check_endpoints``).

Units: fabric ns per packet (per byte) and fabric Gbps/µs in the file; the
agent configs get the CPU costs in fabric units (the NIC's config,
``schema.nic.HostCpuConfig``: ``nic.wall`` dilates them) and the staging
path dilated (x D; rates / D).
"""
from __future__ import annotations

from pathlib import Path

from emulator.errors import ConfigError
from emulator.experiment.resolved import Experiment, Flow
from emulator.schema.endpoints import DELIVERED, DROPPED, CpuCostSpec
from emulator.schema.experiment import ExperimentSpec
from emulator.schema.nic import HostCpuConfig
from emulator.topo import Fabric

__all__ = ["DELIVERED", "DROPPED", "agent_keys", "check_endpoints", "dropped_flows", "flow_expect",
           "host_params", "host_tenant", "tenant_numbers"]


def cost_params(spec: CpuCostSpec, base: HostCpuConfig) -> HostCpuConfig:
    """``base`` with the keys ``spec`` sets (unset keys inherit)."""
    return base.model_copy(update=spec.model_dump(exclude_none=True))


# ----------------------------------------------------------------- resolution

def tenant_numbers(fabric: Fabric) -> dict[str, int]:
    """Tenant name -> partition number 1, 2, ... in topology order."""
    out: dict[str, int] = {}
    for s in fabric.servers():
        if s.tenant is not None and s.tenant not in out:
            out[s.tenant] = len(out) + 1
    return out


def host_tenant(exp: Experiment, host: str) -> str | None:
    """The tenant whose partition ``host`` is in (None: no tenancy / no tenant)."""
    ep = exp.spec.endpoints
    if ep is None or not ep.tenancy:
        return None
    return exp.fabric.server_of(host).tenant


def flow_expect(exp: Experiment, flow: Flow) -> str:
    """``dropped`` for a flow between two tenants, else ``delivered``."""
    a, b = host_tenant(exp, flow.src), host_tenant(exp, flow.dst)
    return DROPPED if a is not None and b is not None and a != b else DELIVERED


def host_params(exp: Experiment, host: str) -> dict:
    """The resolved endpoint of one NIC, fabric units: server, tenant, dpu,
    host_cpu / dpu_cpu (``schema.nic.HostCpuConfig``), gpudirect, staging."""
    ep = exp.spec.endpoints
    assert ep is not None
    server = exp.fabric.server_of(host)
    r = {"server": server.name, "tenant": host_tenant(exp, host), "dpu": server.dpu,
         "host_cpu": cost_params(ep.host_cpu, HostCpuConfig()),
         "dpu_cpu": cost_params(ep.dpu_cpu, HostCpuConfig()),
         "gpudirect": ep.gpudirect, "staging": ep.staging}
    for o in ep.overrides:
        if not ((o.servers and server.name in o.servers) or (o.hosts and host in o.hosts)
                or (o.tenants and server.tenant in o.tenants)):
            continue
        for k in ("host_cpu", "dpu_cpu"):
            if getattr(o, k) is not None:
                r[k] = cost_params(getattr(o, k), r[k])
        if o.gpudirect is not None:
            r["gpudirect"] = o.gpudirect
        if o.staging is not None:
            r["staging"] = o.staging
    return r


def agent_keys(exp: Experiment, host: str) -> dict:
    """The host agent's endpoint config keys (``emulator/agents/host.py``;
    the staging path dilated); {} without an ``endpoints:`` section."""
    if exp.spec.endpoints is None:
        return {}
    d = exp.dilation
    p = host_params(exp, host)
    tenants = tenant_numbers(exp.fabric)
    out = {"dpu": p["dpu"], "tenant": tenants[p["tenant"]] if p["tenant"] else None,
           "host_cpu": p["host_cpu"], "dpu_cpu": p["dpu_cpu"]}
    if p["gpudirect"] is not None:
        out.update(gpudirect=p["gpudirect"],
                   staging_rate_bps=p["staging"].rate_gbps * 1e9 / d,
                   staging_latency_ns=p["staging"].latency_us * 1000 * d)
    return out


def dropped_flows(exp: Experiment) -> set[int]:
    """Flow ids expected to be dropped (between two tenants): the receiver
    has the QP (the target is real) but expects nothing, and the sender
    WRITEs at the start of the receiver's memory region, over the receiver's
    own data should a packet ever get through (its flows' ``intact`` would
    catch it). Empty without an ``endpoints:`` section."""
    if exp.spec.endpoints is None:
        return set()
    return {f.flow_id for f in exp.flows if flow_expect(exp, f) == DROPPED}


# ----------------------------------------------------------------- validation

def check_endpoints(spec: ExperimentSpec, fabric: Fabric, flows, path: Path) -> None:
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
