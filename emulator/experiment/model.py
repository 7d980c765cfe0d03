"""Loading an experiment file: validate it (``emulator.schema.experiment``),
load its fabric, expand its traffic into flows, plan its workload, and check
what needs the fabric (hosts, planes, tenants, NICs shared with the
workload). Every problem is one line ``FILE: field.path: reason``.

    exp = load_experiment("experiments/demo.yaml")
    exp.fabric, exp.flows, exp.workload

The resolved objects (``Experiment``, ``Flow``) are ``resolved.py``'s.
"""
from __future__ import annotations

from pathlib import Path

from emulator.errors import ConfigError
from emulator.experiment.endpoints import check_endpoints
from emulator.experiment.faults import check_faults
from emulator.experiment.resolved import ROCE_QPN_BASE, Experiment, Flow
from emulator.experiment.workload_check import (
    check_no_shared_nics, check_workload_endpoints, plan_workload,
)
from emulator.experiment.traffic_gen import poisson_flows
from emulator.schema.experiment import ExperimentSpec, PoissonTrafficSpec
from emulator.schema.limits import check_fits
from emulator.schema.load import FieldError, join_path, read_yaml, show, validate
from emulator.schema.paths import MAX_POINT_NAME_BYTES, path_tokens, point_name, set_path
from emulator.schema.qos import QosSpec
from emulator.schema.reading import file_problem
from emulator.topo import Fabric, fabric_from_dict, load_fabric

__all__ = ["Experiment", "Flow", "experiment_from_dict", "load_experiment", "read_experiment_data"]


def read_experiment_data(path: str | Path):
    """The YAML of an experiment file, as data (same reader as topology files:
    repeated keys and syntax errors are ConfigErrors naming the line)."""
    return read_yaml(path, "experiment file")


def load_experiment(path: str | Path, target: str | None = None) -> Experiment:
    return experiment_from_dict(read_experiment_data(path), path, target)


def experiment_from_dict(data, path: str | Path, target: str | None = None) -> Experiment:
    path = Path(path)
    if not isinstance(data, dict):
        raise ConfigError(path, "", "expected a mapping at the top level")
    spec = validate(ExperimentSpec, data, path)
    if target is not None:
        spec = spec.model_copy(update={"target": target})
    if isinstance(spec.topology, str):
        topo_path = (path.parent / spec.topology)
        if (why := file_problem(topo_path)) is not None:      # said here, where it is written
            raise ConfigError(path, "topology", f"{topo_path}: {why}")
        fabric = load_fabric(topo_path)
    else:
        fabric = fabric_from_dict(spec.topology, source=str(path), field_prefix="topology")
    flows = _expand_flows(spec, fabric, path)
    # the machine holds every process and every flow's buffers (schema/limits.py)
    check_fits(str(path), len(fabric.switches()) + len(fabric.hosts()), (f.size_bytes for f in flows))
    check_endpoints(spec, fabric, flows, path)
    plan = plan_workload(spec.workload, spec.storage, fabric, path)
    check_no_shared_nics(plan, fabric, flows, path)
    check_workload_endpoints(plan, spec, fabric, path)
    if spec.cluster is not None:
        _check_cluster(spec, fabric, path)
    _check_link_layer(spec, fabric, path)
    _check_management(spec, fabric, path)
    _check_cc(spec, fabric, path)
    check_qos(spec.qos, spec, fabric, path)
    check_faults(spec, fabric, path)
    if fabric.link_layer == "infiniband" and spec.target == "auto":
        spec = spec.model_copy(update={"target": "embedded"})   # where credits run
    points = _sweep_points(data, spec, path, target) if spec.sweep is not None else ()
    return Experiment(spec=spec, fabric=fabric, flows=flows, source=str(path), workload=plan,
                      sweep_points=points)


def _check_management(spec: ExperimentSpec, fabric: Fabric, path: str | Path) -> None:
    """Management networks are built on one machine beside embedded switches
    (net/management.py: a BMv2 switch binds no management namespace)."""
    if not fabric.management:
        return
    if spec.target == "bmv2":
        raise ConfigError(path, "target", f"bmv2: {fabric.name}'s management networks need the "
                                          "embedded target (its switches bind in their management namespaces)")
    if spec.cluster is not None:
        raise ConfigError(path, "cluster", f"{fabric.name}'s management networks are built on one "
                                           "machine: not with a cluster yet")


def check_qos(qos: QosSpec, spec: ExperimentSpec, fabric: Fabric, path: str | Path) -> None:
    """PFC and ECN thresholds that can act in this fabric's switches
    (``QosSpec.check_thresholds``), and a given PFC headroom that leaves
    XOFF room in the shared buffer: each switch reserves the headroom on
    every port (``dataplane/tm.py``). InfiniBand fabrics have no PFC or ECN."""
    if fabric.link_layer == "infiniband":
        return
    buffer = spec.switch.buffer_bytes
    try:
        qos.check_thresholds(buffer, spec.nic.mtu_bytes)
    except FieldError as e:
        raise ConfigError(path, f"qos.{e.field}", e.reason) from None
    headroom = qos.pfc.headroom_bytes
    if qos.pfc.enabled and headroom is not None:
        ports = max(len(fabric.ports(s.name)) for s in fabric.switches())
        xoff, _ = qos.pfc.thresholds(spec.nic.mtu_bytes)
        if buffer - ports * headroom < xoff:
            raise ConfigError(path, "qos.pfc.headroom_bytes",
                              f"{headroom} on each of a switch's {ports} ports leaves "
                              f"{max(0, buffer - ports * headroom)} of switch.buffer_bytes ({buffer}) "
                              f"shared, less than xoff_bytes ({xoff})")


def _sweep_points(data: dict, spec: ExperimentSpec, path: Path,
                  target: str | None) -> tuple[tuple[object, Experiment], ...]:
    """(value, experiment) of every point of the file's sweep: the file
    without ``sweep``, the parameter set to the value, loaded like a file.
    A parameter the schema does not have is a ``sweep.parameter`` error, a
    value a point refuses a ``sweep.values[i]`` error."""
    parameter = spec.sweep.parameter
    base = {k: v for k, v in data.items() if k != "sweep"}
    points = []
    for i, value in enumerate(spec.sweep.values):
        if len(point_name(parameter, value).encode()) > MAX_POINT_NAME_BYTES:
            raise ConfigError(path, f"sweep.values[{i}]", f"{show(value)}: the run directory "
                              f"'{parameter}=<value>' would be longer than a file name can be "
                              f"({MAX_POINT_NAME_BYTES} bytes here)")
        try:
            point = set_path(base, parameter, value)
        except KeyError as e:
            raise ConfigError(path, "sweep.parameter", f"cannot set {parameter}: {e.args[0]}") from None
        try:
            points.append((value, experiment_from_dict(point, path, target)))
        except ConfigError as e:
            if e.reason.startswith("unknown field") and _within(e.field, parameter):
                raise ConfigError(path, "sweep.parameter", f"{e.field}: {e.reason}") from None
            raise ConfigError(path, f"sweep.values[{i}]", f"{parameter}={show(value)}: "
                              f"{e.field + ': ' if e.field else ''}{e.reason}") from None
    return tuple(points)


def _within(field: str, parameter: str) -> bool:
    """Whether ``field`` is ``parameter`` or a mapping on its way."""
    try:
        f, p = path_tokens(field), path_tokens(parameter)
    except ValueError:
        return False
    return p[:len(f)] == f


def _check_link_layer(spec: ExperimentSpec, fabric: Fabric, path: Path) -> None:
    """What runs on one link layer only, said before anything starts: an
    InfiniBand fabric on the embedded target, with plain NICs (the DPU,
    tenant and host-CPU models and the storage target are RoCE's); IB
    congestion control on an InfiniBand fabric."""
    if fabric.link_layer != "infiniband":
        if spec.ib_cc.enabled:
            raise ConfigError(path, "ib_cc.enabled", f"topology {fabric.name} is not "
                              "link_layer: infiniband (RoCE's congestion control is dcqcn)")
        return
    for key, given in (("target", spec.target == "bmv2"), ("endpoints", spec.endpoints),
                       ("storage", spec.storage), ("cluster", spec.cluster)):
        if given:
            raise ConfigError(path, key, f"not on an InfiniBand fabric yet (topology "
                              f"{fabric.name} is link_layer: infiniband)")


def _check_cc(spec: ExperimentSpec, fabric: Fabric, path: Path) -> None:
    """HPCC needs what writes and reads INT: fabric.p4's RoCE switches and
    the NICs of the host, collective and storage agents -- not yet with
    ``endpoints:``' per-packet CPU work or tenant partitions (a packet the
    CPU model holds is delivered without its INT records); GPUDirect
    staging alone is fine."""
    if spec.cc != "hpcc":
        return
    if fabric.link_layer == "infiniband":
        raise ConfigError(path, "cc", f"hpcc runs on RoCE fabrics (INT in fabric.p4); topology "
                          f"{fabric.name} is link_layer: infiniband (its congestion control is ib_cc)")
    ep = spec.endpoints
    if ep is not None:
        costs = [c for c in (ep.host_cpu, ep.dpu_cpu, *(o.host_cpu for o in ep.overrides),
                             *(o.dpu_cpu for o in ep.overrides)) if c is not None]
        # what is not a cost: how many cores, how many packets wait for them
        if any(v for c in costs for k, v in c.model_dump(exclude_none=True).items()
               if k not in ("cores", "rx_backlog_pkts")) or \
                (ep.tenancy and any(s.tenant for s in fabric.servers())):
            raise ConfigError(path, "cc", "hpcc with endpoints' per-packet CPU costs or tenant "
                              "partitions: not yet")


def _check_cluster(spec: ExperimentSpec, fabric: Fabric, path: Path) -> None:
    """Every node placed on a server (``emulator.net.cluster.place``); the
    embedded target only (a BMv2 switch is not started over ssh)."""
    # deferred: only an experiment with a cluster: section loads the cluster layer
    from emulator.net.cluster import place
    if spec.target == "bmv2":
        raise ConfigError(path, "cluster", "a fabric spread over servers runs the embedded target")
    try:
        place(spec.cluster, fabric)
    except FieldError as e:
        raise ConfigError(path, f"cluster.{e.field}", e.reason) from None


def _expand_flows(spec: ExperimentSpec, fabric: Fabric, path: Path) -> tuple[Flow, ...]:
    hosts = [h.name for h in fabric.hosts()]
    # (entry, src, dst, size_bytes, start fabric ns) of every flow, in order
    pairs: list[tuple[int, str, str, int, int]] = []
    plane = {h: fabric.node(h).plane for h in hosts}
    for i, t in enumerate(spec.traffic or ()):
        if isinstance(t, PoissonTrafficSpec):
            try:
                gen = poisson_flows(t, fabric)
            except FieldError as e:
                raise ConfigError(path, join_path(f"traffic[{i}]", e.field), e.reason) from None
            pairs += [(i, g.src, g.dst, g.size_bytes, g.start_ns) for g in gen]
            continue
        start_ns = int(t.start_us * 1000)
        if t.pattern == "all-to-all":
            # only hosts of one plane reach each other (no route joins planes)
            pairs += [(i, s, d, t.size_bytes, start_ns)
                      for s in hosts for d in hosts if s != d and plane[s] == plane[d]]
            continue
        for end in ("src", "dst"):
            if getattr(t, end) not in hosts:
                raise ConfigError(path, f"traffic[{i}].{end}",
                                  f"{getattr(t, end)!r} is not a host of fabric {fabric.name!r}")
        if t.src == t.dst:
            raise ConfigError(path, f"traffic[{i}].dst", "a flow needs two different hosts")
        if plane[t.src] != plane[t.dst]:
            raise ConfigError(path, f"traffic[{i}].dst",
                              f"{t.dst} is on the {plane[t.dst]} plane, {t.src} on the "
                              f"{plane[t.src]} plane: no route joins them")
        pairs.append((i, t.src, t.dst, t.size_bytes, start_ns))
    next_qpn = {h: ROCE_QPN_BASE for h in hosts}
    flows = []
    for flow_id, (i, src, dst, size_bytes, start_ns) in enumerate(pairs):
        src_qpn, dst_qpn = next_qpn[src], next_qpn[dst]
        next_qpn[src] += 1
        next_qpn[dst] += 1
        flows.append(Flow(flow_id, src, dst, spec.traffic[i].op, size_bytes, start_ns,
                          src_qpn, dst_qpn, entry=i))
    return tuple(flows)
