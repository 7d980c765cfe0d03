"""Experiment files: which fabric, which traffic, how much time dilation.

```yaml
name: demo                          # required; [a-z0-9][a-z0-9-]*
description: every host writes 1 MiB to every other host
topology: ../topologies/clos-2x2.yaml   # a path relative to this file, or an inline topology
target: embedded                    # embedded | bmv2 | auto
dilation: 10000                     # wall time = fabric time x dilation; rates / dilation
switch:
  buffer_bytes: 4000000             # shared buffer per switch (bytes are not dilated)
  sample_interval_us: 1             # queue-depth sampling period (fabric time)
nic:
  mtu_bytes: 1024                   # RoCE path MTU: payload bytes per packet
  retry_cnt: 7                      # timeouts in a row before a QP fails
  rto_us: 100                       # optional retransmission timeout (fabric); default: the NIC's
qos:                                # traffic classes, PFC, ECN (emulator/control/qos.py)
  roce_dscp: 26                     # data, ACK/NAK -> roce_priority (lossless)
  roce_priority: 3
  cnp_dscp: 48                      # CNPs -> cnp_priority (lossy, strict-priority higher)
  cnp_priority: 6
  pfc: {enabled: true}              # xoff_bytes / xon_bytes / headroom_bytes: auto
  ecn: {enabled: true, kmin_bytes: 5000, kmax_bytes: 200000, pmax: 0.01}
dcqcn: {enabled: true}              # every DCQCN parameter (emulator/agents/dcqcn_spec.py)
workload: {...}                     # collectives on GPU servers (emulator/experiment/workload_check.py)
storage: {...}                      # checkpoint reads during training (same module)
endpoints: {...}                    # NICs vs DPUs, tenants, host CPU cost (emulator/experiment/endpoints.py)
traffic:                            # one or more entries (optional with a workload)
  - pattern: all-to-all             # every host to every other host of its plane, one QP each ...
    op: write                       # write | send
    size_bytes: 1048576
  - {src: h1, dst: h4, op: write, size_bytes: 4000000, start_us: 10}   # ... or one flow
limits:
  wall_s: 120                       # give up (and say so) after this much wall time
sweep:                              # optional: one run per value, plus sweep.csv/png
  parameter: qos.ecn.kmax_bytes
  values: [20000, 60000, 200000]
```

Every fabric quantity is in fabric units (the topology's Gbps and µs); the
runner divides rates and multiplies times by ``dilation`` to run them, and
converts every measured time back (``fct_ns`` is fabric nanoseconds).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, model_validator

from emulator.agents.dcqcn_spec import DcqcnSpec
from emulator.collectives.workload import WorkloadSpec, parse_workload
from emulator.control.qos import QosSpec
from emulator.errors import ConfigError
from emulator.experiment.endpoints import EndpointsSpec, FlowExpect, check_endpoints
from emulator.experiment.workload_check import (
    StorageSpec, WorkloadPlan, check_no_shared_nics, check_workload_endpoints, plan_workload,
)
from emulator.topo import Fabric, fabric_from_dict, load_fabric
from emulator.topo.model import parse_yaml

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
ROCE_QPN_BASE = 0x100         # first QPN each host hands out
ROCE_SPORT_BASE = 0xC000      # UDP source ports of QPs: 49152 + QPN (RoCE entropy)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SwitchSpec(_Strict):
    buffer_bytes: PositiveInt = 4_000_000          # shared buffer per switch
    sample_interval_us: float = Field(1.0, ge=0)   # queue-depth sampling (fabric); 0: off


class NicSpec(_Strict):
    mtu_bytes: Literal[256, 512, 1024, 2048, 4096] = 1024
    # Retransmission timeouts in a row before a QP gives up (IB retry_cnt; a
    # lossy incast can shut one sender out for long: raise it there).
    retry_cnt: int = Field(7, ge=1, le=1000)
    # Retransmission timeout (fabric us); None: the NIC's default (RoceNic:
    # max(20 ms wall, 8 ACK intervals at line rate)). A host that is slower
    # than its link (per-packet CPU work, endpoints:) ACKs less often: raise it.
    rto_us: float | None = Field(None, gt=0)


class LimitsSpec(_Strict):
    wall_s: float = Field(120.0, gt=0)


class TrafficSpec(_Strict):
    pattern: Literal["all-to-all"] | None = None
    src: str | None = None
    dst: str | None = None
    op: Literal["write", "send"] = "write"
    size_bytes: PositiveInt
    start_us: float = Field(0.0, ge=0)
    expect: FlowExpect | None = None    # "dropped": crosses tenants (endpoints.py)

    @model_validator(mode="after")
    def _one_form(self):
        if (self.pattern is None) == (self.src is None or self.dst is None):
            raise ValueError("give either 'pattern' or both 'src' and 'dst'")
        if self.pattern is not None and (self.src or self.dst):
            raise ValueError("'pattern' excludes 'src'/'dst'")
        return self


class SweepSpec(_Strict):
    parameter: str                                  # dotted path, e.g. qos.ecn.kmax_bytes
    values: list[Union[int, float, bool, str]] = Field(min_length=1)


class ExperimentSpec(_Strict):
    name: str
    description: str = ""
    topology: Union[str, dict]
    target: Literal["embedded", "bmv2", "auto"] = "embedded"
    dilation: float = Field(10000.0, ge=1)
    switch: SwitchSpec = SwitchSpec()
    nic: NicSpec = NicSpec()
    qos: QosSpec = QosSpec()
    dcqcn: DcqcnSpec = DcqcnSpec()
    traffic: list[TrafficSpec] | None = Field(None, min_length=1)
    workload: WorkloadSpec | None = None            # collectives on servers; traffic then optional
    storage: StorageSpec | None = None              # checkpoint reads during the workload's training
    limits: LimitsSpec = LimitsSpec()
    sweep: SweepSpec | None = None                  # run once per value (emulator/experiment/sweep.py)
    endpoints: EndpointsSpec | None = None          # NIC/DPU, tenants, host CPU (endpoints.py)

    @model_validator(mode="after")
    def _something_to_run(self):
        if self.traffic is None and self.workload is None:
            raise ValueError("give 'traffic' or 'workload' (or both)")
        return self


@dataclass(frozen=True)
class Flow:
    """One RDMA message stream on its own reliable-connected QP pair."""

    flow_id: int
    src: str
    dst: str
    op: str
    size_bytes: int
    start_fabric_ns: int
    src_qpn: int
    dst_qpn: int

    @property
    def udp_sport(self) -> int:
        return ROCE_SPORT_BASE + (self.src_qpn & 0x3FFF)


@dataclass(frozen=True)
class Experiment:
    spec: ExperimentSpec
    fabric: Fabric
    flows: tuple[Flow, ...]
    source: str
    workload: WorkloadPlan | None = None            # servers running spec.workload, storage readers

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def dilation(self) -> float:
        return self.spec.dilation


def _field_path(loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not str(part).startswith(("function-", "literal[", "union[")):
            out += ("." if out else "") + str(part)
    return out


def read_experiment_data(path: str | Path):
    """The YAML of an experiment file, as data (same reader as topology files:
    repeated keys and syntax errors are ConfigErrors naming the line)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(path, "", f"cannot read: {e.strerror}") from None
    return parse_yaml(text, str(path))


def load_experiment(path: str | Path, target: str | None = None) -> Experiment:
    return experiment_from_dict(read_experiment_data(path), path, target)


def experiment_from_dict(data, path: str | Path, target: str | None = None) -> Experiment:
    path = Path(path)
    if not isinstance(data, dict):
        raise ConfigError(path, "", "expected a mapping at the top level")
    if data.get("workload") is not None:
        parse_workload(data["workload"], str(path))   # its errors name the field best
    try:
        spec = ExperimentSpec.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        raise ConfigError(path, _field_path(err["loc"]), err["msg"]) from None
    if not _NAME.match(spec.name):
        raise ConfigError(path, "name", f"{spec.name!r} must match [a-z0-9][a-z0-9-]*")
    if target is not None:
        spec = spec.model_copy(update={"target": target})
    if isinstance(spec.topology, str):
        topo_path = (path.parent / spec.topology)
        if not topo_path.is_file():
            raise ConfigError(path, "topology", f"no such file: {topo_path}")
        fabric = load_fabric(topo_path)
    else:
        fabric = fabric_from_dict(spec.topology, source=str(path), field_prefix="topology")
    flows = _expand_flows(spec, fabric, path)
    check_endpoints(spec, fabric, flows, path)
    plan = plan_workload(spec.workload, spec.storage, fabric, path)
    check_no_shared_nics(plan, fabric, flows, path)
    check_workload_endpoints(plan, spec, fabric, path)
    return Experiment(spec=spec, fabric=fabric, flows=flows, source=str(path), workload=plan)


def _expand_flows(spec: ExperimentSpec, fabric: Fabric, path: Path) -> tuple[Flow, ...]:
    hosts = [h.name for h in fabric.hosts()]
    pairs: list[tuple[int, str, str]] = []
    plane = {h: fabric.node(h).plane for h in hosts}
    for i, t in enumerate(spec.traffic or ()):
        if t.pattern == "all-to-all":
            # only hosts of one plane reach each other (no route joins planes)
            pairs += [(i, s, d) for s in hosts for d in hosts if s != d and plane[s] == plane[d]]
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
        pairs.append((i, t.src, t.dst))
    next_qpn = {h: ROCE_QPN_BASE for h in hosts}
    flows = []
    for flow_id, (i, src, dst) in enumerate(pairs):
        t = spec.traffic[i]
        src_qpn, dst_qpn = next_qpn[src], next_qpn[dst]
        next_qpn[src] += 1
        next_qpn[dst] += 1
        flows.append(Flow(flow_id, src, dst, t.op, t.size_bytes,
                          int(t.start_us * 1000), src_qpn, dst_qpn))
    return tuple(flows)
