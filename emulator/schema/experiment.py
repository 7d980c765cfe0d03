"""The schema of an experiment file: which fabric, which traffic, which clock.

Every field, with its default and meaning: ``docs/design-notes.md``, "The experiment
file"; the sections' own modules (``schema/dcqcn.py``, ``workload.py``,
``endpoints.py``, ``cluster.py``, ...) say the rest.

Every fabric quantity is in fabric units (the topology's Gbps and µs); in
dilated time the runner divides rates and multiplies times by ``dilation``
to run them, and converts every measured time back (``fct_ns`` is fabric
nanoseconds); in virtual time D is 1 and the processes' clock is fabric
time. Either way the results are in the same fabric units and files.
The file is resolved (fabric, flows, workload plan) by
``emulator.experiment.model.load_experiment``.
"""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Discriminator, Field, PositiveInt, Tag, field_validator, model_validator

from emulator.schema.cluster import ClusterSpec
from emulator.schema.dcqcn import DcqcnSpec
from emulator.schema.nic import DEFAULT_MTU_BYTES, DEFAULT_RETRY_CNT, RetryCnt
from emulator.schema.hpcc import HpccSpec
from emulator.schema.ib_cc import IbCcSpec
from emulator.schema.qos import QosSpec
from emulator.schema.switch import PfcWatchdogSpec
from emulator.schema.endpoints import EndpointsSpec, FlowExpect
from emulator.schema.faults import FaultEntry
from emulator.schema.limits import MAX_DILATION, FabricUs, MessageBytes, WallS, name_problem
from emulator.schema.load import FieldError, StrictSpec
from emulator.schema.paths import path_tokens
from emulator.schema.workload import StorageSpec, WorkloadSpec


class SwitchSpec(StrictSpec):
    buffer_bytes: PositiveInt = 4_000_000          # shared buffer per switch
    sample_interval_us: FabricUs = 1.0             # queue-depth sampling (fabric); 0: off
    # Embedded switches (Ethernet or InfiniBand) per process
    # (emulator/dataplane/pack.py): "auto" packs up to 10 switches into half
    # as many processes as cores, more about 3 to a process
    # (emulator/net/packing.py); BMv2 switches: one each.
    per_process: Union[Literal["auto"], PositiveInt] = "auto"
    # SONiC's PFC watchdog in the embedded traffic manager (schema/switch.py)
    pfc_watchdog: PfcWatchdogSpec = PfcWatchdogSpec()


class TelemetrySpec(StrictSpec):
    """gNMI telemetry (docs/telemetry.md): a collector subscribes to every
    embedded switch's gNMI server (STREAM, SAMPLE every ``sample_us`` of
    fabric time) and writes telemetry.csv. Off unless ``sample_us`` is set."""
    sample_us: Optional[float] = Field(None, ge=1, le=1e6, allow_inf_nan=False)
    paths: list[str] = Field(default_factory=lambda: list(DEFAULT_TELEMETRY_PATHS), min_length=1)

    @field_validator("paths")
    @classmethod
    def _paths(cls, v: list[str]) -> list[str]:
        for p in v:
            if not p.startswith("/"):
                raise ValueError(f"{p!r}: a gNMI path starts with '/' (docs/telemetry.md)")
        return v


# The counters the collector samples (its oper-status: ON_CHANGE, always; the
# leaves: emulator/dataplane/gnmi_server/leaves.py)
DEFAULT_TELEMETRY_PATHS = ("/interfaces/interface/state/counters",
                           "/qos/interfaces/interface/output/queues/queue/state")


class NicSpec(StrictSpec):
    """The experiment's ``nic:`` section: the transport fields of every
    NIC's config (``schema.nic.NicConfig``), with the same bounds and defaults."""
    mtu_bytes: Literal[256, 512, 1024, 2048, 4096] = DEFAULT_MTU_BYTES
    retry_cnt: RetryCnt = DEFAULT_RETRY_CNT
    # ACK (retransmission) timeout, fabric us, like every NIC timer here and
    # in dcqcn:. None: 320 us, IRN's RTO_high (emulator/schema/nic.py
    # DEFAULT_RTO_FABRIC_NS says why), whatever the dilation. A
    # DCQCN-throttled QP waits longer (8 ACK intervals at its rate); time a
    # NIC's data class is PFC-paused does not count.
    rto_us: Optional[float] = Field(None, gt=0)


class AgentsSpec(StrictSpec):
    # Host agents (a NIC each) run per process (emulator/agents/pack.py):
    # "auto" gives each its own up to 8 of them, else packs them evenly into
    # 4 processes (emulator/net/packing.py).
    per_process: Union[Literal["auto"], PositiveInt] = "auto"


class LimitsSpec(StrictSpec):
    wall_s: WallS = 120.0


class TrafficSpec(StrictSpec):
    pattern: Optional[Literal["all-to-all"]] = None     # (poisson: PoissonTrafficSpec)
    src: Optional[str] = None
    dst: Optional[str] = None
    op: Literal["write", "send"] = "write"
    size_bytes: MessageBytes                # <= 2 GiB, and what this machine's memory holds
    start_us: FabricUs = 0.0
    expect: Optional[FlowExpect] = None    # "dropped": crosses tenants (schema/endpoints.py)

    @field_validator("pattern", mode="before")
    @classmethod
    def _known_pattern(cls, v):
        if v is not None and v != "all-to-all":          # "poisson" is PoissonTrafficSpec's
            raise ValueError("must be one of all-to-all, poisson")
        return v

    @model_validator(mode="after")
    def _one_form(self):
        if (self.pattern is None) == (self.src is None or self.dst is None):
            raise ValueError("give either 'pattern' or both 'src' and 'dst'")
        if self.pattern is not None and (self.src or self.dst):
            raise ValueError("'pattern' excludes 'src'/'dst'")
        return self


# Flow-size distributions a poisson entry may draw from: the keys of
# emulator.experiment.flow_sizes.DISTRIBUTIONS (a unit test keeps them equal).
FlowSizeDistribution = Literal["websearch"]


class PoissonTrafficSpec(StrictSpec):
    """Flows generated as the HPCC simulator's ``traffic_gen.py`` does: every
    source host starts flows at Poisson arrivals whose mean interarrival
    makes its offered load ``load`` x its host link's rate (mean size x 8 /
    (rate x load)), each to a destination drawn uniformly among the other
    hosts of its plane, of a size drawn from ``distribution``, scaled by
    ``size_scale`` and clamped to [``min_bytes``, ``max_bytes``] (the mean
    that sets the interarrival is that of the scaled, clamped sizes). The
    same ``seed`` gives the same flows (``emulator.experiment.traffic_gen``)."""

    pattern: Literal["poisson"]
    distribution: FlowSizeDistribution
    load: float = Field(gt=0, le=1, allow_inf_nan=False)      # of each source's host link rate
    duration_us: FabricUs                                      # arrivals within this window
    start_us: FabricUs = 0.0
    seed: int = Field(1, ge=0)
    size_scale: float = Field(1.0, gt=0, le=1e6, allow_inf_nan=False)
    min_bytes: MessageBytes = 1
    max_bytes: Optional[MessageBytes] = None                   # None: 2**31, an RDMA message's most
    hosts: Optional[list[str]] = Field(None, min_length=2)     # None: every host of the fabric
    op: Literal["write", "send"] = "write"

    @model_validator(mode="after")
    def _window_and_sizes(self):
        if not self.duration_us > 0:
            raise FieldError("duration_us", f"must be > 0 (got {self.duration_us:g})")
        if self.max_bytes is not None and self.max_bytes < self.min_bytes:
            raise FieldError("max_bytes", f"must be >= min_bytes ({self.min_bytes}) "
                                          f"(got {self.max_bytes})")
        if self.hosts is not None:
            seen = set()
            for j, h in enumerate(self.hosts):
                if h in seen:
                    raise FieldError(f"hosts[{j}]", f"{h!r} is listed twice")
                seen.add(h)
        return self


def _traffic_form(v) -> str:
    """Which model a ``traffic:`` entry is: a poisson generator or a flow/pattern."""
    pattern = v.get("pattern") if isinstance(v, dict) else getattr(v, "pattern", None)
    return "PoissonTrafficSpec" if pattern == "poisson" else "TrafficSpec"


# A traffic: entry; the tags are the models' names, which the error
# translator (schema/load.py) follows to name the field and its model.
TrafficEntry = Annotated[Union[Annotated[TrafficSpec, Tag("TrafficSpec")],
                               Annotated[PoissonTrafficSpec, Tag("PoissonTrafficSpec")]],
                         Discriminator(_traffic_form)]


class SweepSpec(StrictSpec):
    """One run per value of one parameter. Each value is applied to the file
    and the result validated as an experiment of its own when the file is
    loaded (``emulator.experiment.model``), so a parameter the schema does
    not have, or a value it refuses, is refused before anything runs."""
    parameter: str                                  # dotted path, e.g. qos.ecn.kmax_bytes
    values: list[Union[int, float, bool, str]] = Field(min_length=1)

    @field_validator("parameter")
    @classmethod
    def _path(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("a dotted path such as qos.ecn.kmax_bytes is required")
        tokens = path_tokens(v)                     # (its ValueError names the part)
        if tokens[0] in ("sweep", "name"):
            raise ValueError(f"{v!r} cannot be swept")
        return v


class ControllerSpec(StrictSpec):
    """The fabric controller's reaction to a port going down or up: its
    writes (the dead next hop out of every ECMP group and route, or back in)
    take effect ``reaction_us`` of fabric time after the switch reported it
    (docs/faults.md, "The controller's reroute")."""
    reaction_us: float = Field(1000.0, gt=0, le=10_000_000, allow_inf_nan=False)


class ExperimentSpec(StrictSpec):
    name: str                                       # names its results: [a-z0-9][a-z0-9-]*, <= 63 chars
    description: str = ""                           # for people: nothing reads it
    topology: Union[str, dict]                      # a file (relative to this one) or inline
    target: Literal["embedded", "bmv2", "auto"] = "embedded"
    # Which clock the run keeps; "auto" is decided when the run starts, for
    # its target and sections (emulator/experiment/time_mode.py, resolve_time).
    time: Literal["auto", "virtual", "dilated"] = "auto"
    # A number from 1 to MAX_DILATION, or "auto": chosen per machine and fabric by
    # emulator/experiment/dilation.py (calibrated, cached, rerun if behind).
    # Dilated runs only: a virtual run's D is 1.
    dilation: Union[Literal["auto"], float] = 10000.0
    switch: SwitchSpec = SwitchSpec()
    nic: NicSpec = NicSpec()
    qos: QosSpec = QosSpec()
    # The sources' congestion control: DCQCN (ECN marks -> CNPs), HPCC (INT
    # records in every data packet -> window and rate), or none (line rate).
    cc: Literal["dcqcn", "hpcc", "none"] = "dcqcn"
    dcqcn: DcqcnSpec = DcqcnSpec()
    ib_cc: IbCcSpec = IbCcSpec()                    # only on an InfiniBand fabric
    traffic: Optional[list[TrafficEntry]] = Field(None, min_length=1)
    workload: Optional[WorkloadSpec] = None         # collectives on servers; traffic then optional
    storage: Optional[StorageSpec] = None           # checkpoint reads during the workload's training
    limits: LimitsSpec = LimitsSpec()
    agents: AgentsSpec = AgentsSpec()               # how host agents share processes
    hpcc: HpccSpec = HpccSpec()
    sweep: Optional[SweepSpec] = None               # run once per value (emulator/experiment/sweep.py)
    endpoints: Optional[EndpointsSpec] = None       # NIC/DPU, tenants, host CPU (schema/endpoints.py)
    cluster: Optional[ClusterSpec] = None           # spread over several machines (schema/cluster.py)
    faults: Optional[list[FaultEntry]] = None       # scripted link faults (schema/faults.py)
    controller: ControllerSpec = ControllerSpec()   # its reroute on link faults
    telemetry: TelemetrySpec = TelemetrySpec()      # gNMI collector: telemetry.csv (docs/telemetry.md)

    @field_validator("dilation", mode="before")
    @classmethod
    def _dilation(cls, v):
        if v == "auto":
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 1 <= v <= MAX_DILATION:
            raise ValueError(f"must be 'auto' or a number from 1 to {MAX_DILATION:,.0f}")
        return float(v)

    @model_validator(mode="after")
    def _whole_file(self):
        if (why := name_problem(self.name)) is not None:      # it names the results directory
            raise FieldError("name", why)
        if self.traffic is None and self.workload is None:
            raise ValueError("give 'traffic' or 'workload' (or both)")
        if self.cc != "dcqcn" and "dcqcn" in self.model_fields_set and self.dcqcn.enabled:
            raise FieldError("cc", f"is {self.cc}: the dcqcn section applies to cc: dcqcn only "
                                   "(drop it, or say dcqcn: {enabled: false})")
        return self
