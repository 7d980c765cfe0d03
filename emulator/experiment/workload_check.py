"""What an experiment's ``workload:`` and ``storage:`` sections
(``emulator.schema.workload``) mean on its fabric: which servers run the
collectives, which NICs read from storage (the ``WorkloadPlan``), and the
checks that keep two agents off one NIC.

A reader reads through its server's storage NIC when the topology has a
separate storage plane (``Server.storage_nic``), else through its GPU NIC 0
on the compute fabric (sharing links with the collectives). Readers read
blocks 0, 1, ... (wrapping at ``blocks``) from the start of the training
loop to its end; the report gives the bytes read and the throughput.
"""
from __future__ import annotations

from pathlib import Path

from emulator.collectives.workload import validate_for
from emulator.errors import ConfigError
from emulator.experiment.resolved import WorkloadPlan
from emulator.schema.experiment import ExperimentSpec
from emulator.schema.workload import StorageSpec, WorkloadSpec
from emulator.topo import Fabric


def plan_workload(workload: WorkloadSpec | None, storage: StorageSpec | None,
                  fabric: Fabric, path: Path) -> WorkloadPlan | None:
    if workload is None:
        if storage is not None:
            raise ConfigError(path, "storage", "needs a 'workload:' with 'training:' (the reads "
                                               "run during the training loop)")
        return None
    if not fabric.server_table:      # a plain fabric's hosts stand in for servers, with no GPUs
        raise ConfigError(path, "workload", f"needs GPU servers: topology {fabric.name!r} has none "
                                            "(give it a 'servers:' section: emulator/topo/servers.py)")
    compute = {s.name: s for s in fabric.servers("compute")}
    names = workload.servers or list(compute)
    for i, name in enumerate(names):
        if name not in compute:
            raise ConfigError(path, f"workload.servers[{i}]",
                              f"{name!r} is not a compute server of fabric {fabric.name!r} "
                              f"(compute servers: {', '.join(compute) or 'none'})")
        if name in names[:i]:
            raise ConfigError(path, f"workload.servers[{i}]", f"{name!r} is listed twice")
    gpus = {compute[n].gpus for n in names}
    if len(gpus) != 1:
        raise ConfigError(path, "workload.servers", "servers with different GPU counts")
    per_server = gpus.pop()
    if len(names) * per_server < 2:
        raise ConfigError(path, "workload.servers" if workload.servers else "workload",
                          f"{len(names)} server x {per_server} GPU = 1 rank: a collective needs "
                          "at least 2")
    validate_for(workload, str(path), len(names), per_server)
    if storage is None:
        return WorkloadPlan(tuple(names))
    if workload.training is None:
        raise ConfigError(path, "storage", "needs workload.training (the reads run during the "
                                           "training loop)")
    st = {s.name: s for s in fabric.servers("storage")}
    if storage.server not in st:
        raise ConfigError(path, "storage.server", f"{storage.server!r} is not a storage server of "
                                                  f"fabric {fabric.name!r}")
    target_nic = st[storage.server].nics[0]
    plane = fabric.node(target_nic).plane
    readers = []
    for i, name in enumerate(storage.readers or names):
        if name not in names:
            raise ConfigError(path, f"storage.readers[{i}]",
                              f"{name!r} does not run the workload (workload servers: "
                              f"{', '.join(names)})")
        srv = compute[name]
        nic = srv.storage_nic or srv.nics[0]
        if fabric.node(nic).plane != plane:
            raise ConfigError(path, f"storage.readers[{i}]",
                              f"{name} has no NIC on the {plane} plane of {target_nic}")
        readers.append((name, nic))
    return WorkloadPlan(tuple(names), storage.server, target_nic, tuple(readers))


def check_no_shared_nics(plan: WorkloadPlan | None, fabric: Fabric, flows, path: Path) -> None:
    """A NIC the server agents drive cannot carry a plain flow too: both
    agents would open the same interface and take each other's packets."""
    if plan is None:
        return
    taken = plan.nics(fabric)
    for f in flows:
        for end in (f.src, f.dst):
            if end in taken:
                raise ConfigError(path, "traffic",
                                  f"flow {f.flow_id} ({f.src} -> {f.dst}) uses NIC {end}, which "
                                  f"{taken[end]} drives for the workload; plain flows need NICs "
                                  f"of other servers")


def check_workload_endpoints(plan: WorkloadPlan | None, spec: ExperimentSpec, fabric: Fabric,
                             path: Path) -> None:
    """The server agents model GPUDirect staging only: host CPU costs and
    tenant partitions (``endpoints:``) act in the per-NIC host agents. A file
    that sets them for NICs the workload drives would silently get neither;
    say so instead."""
    ep = spec.endpoints
    if plan is None or ep is None:
        return
    costs = [k for k, v in ep.host_cpu.model_dump(exclude_none=True).items() if k != "cores" and v]
    costs += [f"overrides[{i}].host_cpu" for i, o in enumerate(ep.overrides)
              if o.host_cpu is not None and any(v for k, v in o.host_cpu.model_dump(exclude_none=True).items()
                                                if k != "cores")]
    tenanted = [s for s in plan.servers if ep.tenancy and fabric.server(s).tenant]
    if costs:
        raise ConfigError(path, "endpoints.host_cpu" if not costs[0].startswith("overrides") else
                          f"endpoints.{costs[0]}",
                          f"per-packet host CPU costs apply to NICs running plain flows; the workload's "
                          f"servers ({', '.join(plan.servers)}) model GPUDirect staging only")
    if tenanted:
        raise ConfigError(path, "endpoints.tenancy",
                          f"tenant partitions apply to NICs running plain flows; {tenanted[0]} runs the "
                          f"workload (set 'tenancy: false' or run the tenants' traffic as flows)")
