"""The schema of an experiment file: which fabric, which traffic, how much time dilation.

```yaml
name: demo                          # required; [a-z0-9][a-z0-9-]*
description: every host writes 1 MiB to every other host
topology: ../topologies/clos-2x2.yaml   # a path relative to this file, or an inline topology
target: embedded                    # embedded | bmv2 | auto
dilation: auto                      # wall time = fabric time x dilation; rates / dilation;
                                    # auto: measured for this machine and fabric (default 10000)
switch:
  buffer_bytes: 4000000             # shared buffer per switch (bytes are not dilated)
  sample_interval_us: 1             # queue-depth sampling period (fabric time)
nic:
  mtu_bytes: 1024                   # RoCE path MTU: payload bytes per packet
  retry_cnt: 7                      # timeouts in a row before a QP fails
  rto_us: 320                       # ACK timeout (fabric µs); default 320 (IRN's RTO_high)
qos:                                # traffic classes, PFC, ECN (emulator/control/qos.py)
  roce_dscp: 26                     # data, ACK/NAK -> roce_priority (lossless)
  roce_priority: 3
  cnp_dscp: 48                      # CNPs -> cnp_priority (lossy, strict-priority higher)
  cnp_priority: 6
  pfc: {enabled: true}              # xoff_bytes / xon_bytes / headroom_bytes: auto
  ecn: {enabled: true, kmin_bytes: 5000, kmax_bytes: 200000, pmax: 0.01}
dcqcn: {enabled: true}              # every DCQCN parameter (emulator/schema/dcqcn.py)
ib_cc: {enabled: true}              # InfiniBand fabrics: FECN/BECN, CCT (emulator/schema/ib_cc.py)
workload: {...}                     # collectives on GPU servers (emulator/schema/workload.py)
storage: {...}                      # checkpoint reads during training (same module)
endpoints: {...}                    # NICs vs DPUs, tenants, host CPU cost (emulator/schema/endpoints.py)
cluster: {...}                      # servers and placement, Mininet cluster edition (emulator/schema/cluster.py)
traffic:                            # one or more entries (optional with a workload)
  - pattern: all-to-all             # every host to every other host of its plane, one QP each ...
    op: write                       # write | send
    size_bytes: 1048576
  - {src: h1, dst: h4, op: write, size_bytes: 4000000, start_us: 10}   # ... or one flow
limits:
  wall_s: 120                       # give up (and say so) after this much wall time (at D <= 10000; more at a higher D)
hpcc: {dport: 4791}                 # the dport fct.txt/flow.txt show: HPCC's fct_analysis.py keeps 100 (-t 0)
sweep:                              # optional: one run per value, plus sweep.csv/png
  parameter: qos.ecn.kmax_bytes
  values: [20000, 60000, 200000]
```

Every fabric quantity is in fabric units (the topology's Gbps and µs); the
runner divides rates and multiplies times by ``dilation`` to run them, and
converts every measured time back (``fct_ns`` is fabric nanoseconds).
The file is resolved (fabric, flows, workload plan) by
``emulator.experiment.model.load_experiment``.
"""
from __future__ import annotations

import re
from typing import Literal, Optional, Union

from pydantic import Field, PositiveInt, field_validator, model_validator

from emulator.schema.cluster import ClusterSpec
from emulator.schema.dcqcn import DcqcnSpec
from emulator.schema.ib_cc import IbCcSpec
from emulator.schema.qos import QosSpec
from emulator.schema.endpoints import EndpointsSpec, FlowExpect
from emulator.schema.limits import FabricUs, MessageBytes, WallS
from emulator.schema.load import FieldError, StrictSpec
from emulator.schema.workload import StorageSpec, WorkloadSpec
from emulator.wire import ROCEV2_UDP_DPORT

NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]*")


class SwitchSpec(StrictSpec):
    buffer_bytes: PositiveInt = 4_000_000          # shared buffer per switch
    sample_interval_us: FabricUs = 1.0             # queue-depth sampling (fabric); 0: off


class NicSpec(StrictSpec):
    mtu_bytes: Literal[256, 512, 1024, 2048, 4096] = 1024
    # Retransmission timeouts in a row before a QP gives up (IB retry_cnt; a
    # lossy incast can shut one sender out for long: raise it there).
    retry_cnt: int = Field(7, ge=1, le=1000)
    # ACK (retransmission) timeout, fabric us, like every NIC timer here and
    # in dcqcn:; the runner gives the agents x D. None: 320 us, IRN's RTO_high
    # (emulator/agents/requester.py DEFAULT_RTO_FABRIC_NS says why), whatever
    # the dilation. A DCQCN-throttled QP waits longer (8 ACK intervals at its
    # rate); time a NIC's data class is PFC-paused does not count.
    rto_us: Optional[float] = Field(None, gt=0)


class LimitsSpec(StrictSpec):
    wall_s: WallS = 120.0


class HpccSpec(StrictSpec):
    # The UDP dport written in the HPCC-format fct.txt / flow.txt (the packets
    # keep RoCEv2's 4791): HPCC's analysis/fct_analysis.py keeps only the
    # flows of dport 100 (-t 0) or 200 (-t 1), so 100 lets it read our runs.
    dport: int = Field(ROCEV2_UDP_DPORT, ge=1, le=65535)


class TrafficSpec(StrictSpec):
    pattern: Optional[Literal["all-to-all"]] = None
    src: Optional[str] = None
    dst: Optional[str] = None
    op: Literal["write", "send"] = "write"
    size_bytes: MessageBytes                # <= 2 GiB, and what this machine's memory holds
    start_us: FabricUs = 0.0
    expect: Optional[FlowExpect] = None    # "dropped": crosses tenants (schema/endpoints.py)

    @model_validator(mode="after")
    def _one_form(self):
        if (self.pattern is None) == (self.src is None or self.dst is None):
            raise ValueError("give either 'pattern' or both 'src' and 'dst'")
        if self.pattern is not None and (self.src or self.dst):
            raise ValueError("'pattern' excludes 'src'/'dst'")
        return self


class SweepSpec(StrictSpec):
    parameter: str                                  # dotted path, e.g. qos.ecn.kmax_bytes
    values: list[Union[int, float, bool, str]] = Field(min_length=1)


class ExperimentSpec(StrictSpec):
    name: str
    description: str = ""
    topology: Union[str, dict]                      # a file (relative to this one) or inline
    target: Literal["embedded", "bmv2", "auto"] = "embedded"
    # A number >= 1, or "auto": chosen per machine and fabric by
    # emulator/experiment/dilation.py (calibrated, cached, rerun if behind).
    dilation: Union[Literal["auto"], float] = 10000.0
    switch: SwitchSpec = SwitchSpec()
    nic: NicSpec = NicSpec()
    qos: QosSpec = QosSpec()
    dcqcn: DcqcnSpec = DcqcnSpec()
    ib_cc: IbCcSpec = IbCcSpec()                    # only on an InfiniBand fabric
    traffic: Optional[list[TrafficSpec]] = Field(None, min_length=1)
    workload: Optional[WorkloadSpec] = None         # collectives on servers; traffic then optional
    storage: Optional[StorageSpec] = None           # checkpoint reads during the workload's training
    limits: LimitsSpec = LimitsSpec()
    hpcc: HpccSpec = HpccSpec()
    sweep: Optional[SweepSpec] = None               # run once per value (emulator/experiment/sweep.py)
    endpoints: Optional[EndpointsSpec] = None       # NIC/DPU, tenants, host CPU (schema/endpoints.py)
    cluster: Optional[ClusterSpec] = None           # spread over several machines (schema/cluster.py)

    @field_validator("dilation", mode="before")
    @classmethod
    def _dilation(cls, v):
        if v == "auto":
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 1:
            raise ValueError("must be a number >= 1 or 'auto'")
        return float(v)

    @model_validator(mode="after")
    def _whole_file(self):
        if not NAME_RE.fullmatch(self.name):
            raise FieldError("name", f"{self.name!r} must match [a-z0-9][a-z0-9-]*")
        if self.traffic is None and self.workload is None:
            raise ValueError("give 'traffic' or 'workload' (or both)")
        return self
