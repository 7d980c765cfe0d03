"""summary.json: the model a run writes (``RunSummary``, its one writer) and
the check of one read back (``read_summary``: ``fabric-emu show``, ``Result.load``).

``RunSummary`` is the summary of this version (``SUMMARY_VERSION``) as the
run builds it (``experiment.summary``), then adds to it: its top-level keys
typed, the blocks the run changes typed (``fidelity``), the big per-flow,
per-port and per-workload blocks kept as the JSON they are. It is written
once, by ``RunSummary.write`` -- the keys in the order of its fields, a key
not set absent -- and rewritten only with the dilation's provenance
(``experiment.dilation``). Its users see summary.json's dict: ``as_dict``.

A file read back may be anything by then: cut short by a full disk (before
result files were written atomically), edited by hand, another program's
JSON, a device, a file of gigabytes, or a summary of an earlier version.
``read_summary`` reads at most ``MAX_SUMMARY_BYTES`` (a 64-host
all-to-all's summary is a few MB) and checks the fields the summary tables
read (``SummaryFile``: their types; every other field is kept as it is), so
that a damaged file is one line naming it and what is wrong, never a
traceback half-way through a table.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from emulator.atomic import atomic_write_text
from emulator.errors import FabricEmuError
from emulator.rundir import RunDir

MAX_SUMMARY_BYTES = 64 << 20


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Flow(_Part):
    bytes: int
    delivered_bytes: int
    complete: bool
    fct_ns: Optional[float] = None
    fct_slowdown: Optional[float] = None
    retransmitted_packets: int = 0
    timeouts: int = 0
    naks: int = 0


class _Queue(_Part):
    ecn_marks: Optional[int] = 0
    pause_tx: Optional[int] = 0
    headroom_drops: Optional[int] = 0
    max_depth_bytes: Optional[int] = 0


class _Port(_Part):
    node: str
    role: str
    tx_packets: int
    drops: int
    pipeline_drops: int
    priorities: list[_Queue] = []


class _Fidelity(_Part):
    worst_ratio: float
    behind: list[str] = []


class _Generated(_Part):
    entry: int
    pattern: str
    distribution: str
    load: float
    duration_us: float
    flows: int
    offered_load: float
    offered_load_min: float
    offered_load_max: float


class _QueueDist(_Part):
    samples: int = 0
    p50_bytes: Optional[float] = None
    p95_bytes: Optional[float] = None
    p99_bytes: Optional[float] = None
    max_bytes: Optional[float] = None

    @model_validator(mode="after")
    def _sampled_has_percentiles(self):
        if self.samples and None in (self.p50_bytes, self.p95_bytes, self.p99_bytes,
                                     self.max_bytes):
            raise ValueError("samples without their percentiles")
        return self


class _Bucket(_Part):
    pct_from: float
    pct_to: float
    flows: int
    size_min_bytes: int
    size_max_bytes: int
    slowdown_p50: float
    slowdown_p95: float
    slowdown_p99: float


class _Buckets(_Part):
    flows: int = 0
    step_percent: float = 0
    buckets: list[_Bucket] = []


class _CollRow(_Part):
    collective: str
    algorithm: str
    size_bytes: int
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    wrong: Optional[int] = None
    inplace_busbw_GBps: Optional[float] = None


class _StepTime(_Part):
    mean: float
    max: float


class _Training(_Part):
    collective: Optional[str] = None        # a one-collective loop's; a shaped step has
    size_bytes: Optional[int] = None        # parallelism and phases instead
    step_time_us: _StepTime
    wrong: Optional[int] = None


class _Reader(_Part):
    wrong_blocks: Optional[int] = None


class _Storage(_Part):
    server: str
    throughput_GBps: float
    readers: list[_Reader] = []


class _Collectives(_Part):
    servers: list[str]
    complete: bool
    results: list[_CollRow] = []
    training: Optional[_Training] = None
    storage: Optional[_Storage] = None
    errors: list[str] = []


class _Isolation(_Part):
    foreign_flows: int
    foreign_tx_packets: int
    tenant_drops: int
    isolated: bool


class _Host(_Part):
    host: str
    tenant: Optional[str] = None
    dpu: bool
    tx_bytes: int
    rx_bytes: int
    goodput_gbps: Optional[float] = None
    host_cpu_busy: Optional[float] = None
    host_cpu_busy_active: Optional[float] = None
    dpu_cpu_busy: Optional[float] = None
    tenant_drops: int
    foreign_tx_packets_to_host: int


class SummaryFile(_Part):
    """What the summary tables (``render_summary`` and the tables beside it)
    read of a summary.json, typed; the rest is kept unchecked. A section the
    tables show when its key is there (``fidelity``, ``collectives``,
    ``hosts``) may be missing, never null."""

    experiment: str
    target: str
    time: Literal["virtual", "dilated"] = "dilated"     # absent: before version 6, every run dilated
    dilation: float
    wall_s: float
    fabric_ns: float
    fell_behind: bool
    flows: list[_Flow]
    ports: list[_Port]
    fidelity: _Fidelity = None              # type: ignore[assignment]
    generated_traffic: Optional[list[_Generated]] = None
    queue_depth_dist: Optional[_QueueDist] = None
    fct_slowdown_buckets: Optional[_Buckets] = None
    collectives: _Collectives = None        # type: ignore[assignment]
    hosts: list[_Host] = None               # type: ignore[assignment]
    isolation: _Isolation = None            # type: ignore[assignment]


# ------------------------------------------------------------------ written

Number = Union[int, float]      # as computed: an int is not made a float (1, not 1.0)
Block = dict[str, Any]          # a block kept as the JSON it is


class _Written(BaseModel):
    # strict: a value of another type is the run's bug, not a value to convert
    model_config = ConfigDict(strict=True, validate_assignment=True, extra="forbid")

    def as_dict(self) -> dict:
        """The keys set, in the order of the fields (summary.json's); the
        blocks as they are (shared, not copied)."""
        return {name: (v.as_dict() if isinstance(v, _Written) else v)
                for name in type(self).model_fields if name in self.model_fields_set
                for v in (getattr(self, name),)}


class Fidelity(_Written):
    """``fidelity``: the verdict's rule and limits (``experiment.fidelity``), the
    worst ratio of a lateness to its limit and who was behind; with a
    workload, the limit of its phases' lost time."""

    worst_ratio: Number
    rule: str
    switch_p99_limit_frames: Optional[Number]
    switch_p99_limit_hops: Optional[Number]
    nic_mean_limit_frames: Optional[Number]
    behind: list[str]
    lost_limit_fraction: Optional[Number] = None


class FaultEnd(_Written):
    """One faulted sending end: what its faults did, per class ("0".."7",
    "pfc"), and the rate changes it applied (``experiment.fault_results``)."""

    direction: str
    sender: str
    receiver: str
    node: str
    port: Optional[int]                    # a switch port's number; None: a NIC
    reported: bool                         # its process reported its counters
    dropped_down: dict[str, int]
    dropped_down_frames: int
    dropped_loss: dict[str, int]
    dropped_loss_frames: int
    corrupted: dict[str, int]
    corrupted_frames: int
    rate_changes: list[Block]
    down_intervals: list[Block] = []       # each down interval and the frames it lost
    pfc_storm_frames: int = 0              # PAUSE frames a NIC's pfc_storm sent
    cpu_stall: Optional[Block] = None      # a stalled host's NIC: what it held, PAUSE/XON sent


class Faults(_Written):
    """``faults``: each scripted fault as set with when it took effect
    (fabric ns), each faulted end, the frames lost to faults (not to the
    emulation, not drops of a lossless class) and the receivers' drops of
    corrupted frames."""

    faults: list[Block]
    ends: list[FaultEnd]
    lost_frames: int
    corrupted_frames: int
    switch_fcs_errors: int
    nic_fcs_errors: int
    nic_icrc_errors: int
    # the controller's reroute (a link taken down): its reaction, the ports'
    # reports and each change of the dead links (control/reroute.py)
    reaction_ns: Optional[int] = None
    port_reports: list[Block] = []
    reroutes: list[Block] = []
    blackholed_frames: Optional[int] = None   # the pipelines' drops (no route)

    def as_dict(self) -> dict:
        d = super().as_dict()
        d["ends"] = [e.as_dict() for e in self.ends]
        return d


class RunSummary(_Written):
    """summary.json as this version writes it (what each key means: docs/how-to/results.md).
    A field with a default is absent from the file until set."""

    summary_version: int
    experiment: str
    source: str
    topology: str
    target: str
    link_layer: Literal["roce", "infiniband"]
    time: Literal["virtual", "dilated"]
    dilation: Number
    wall_s: Number
    fabric_ns: int
    fell_behind: bool
    complete: bool
    lossless_priorities: list[int]
    flows: list[Block]
    ports: list[Block]
    switches: list[Block]
    nics: list[Block]
    fidelity: Fidelity
    # what the emulation lost, folded into the verdict (``fidelity.add_*``)
    link_losses: Optional[list[Block]] = None
    socket_drops: Optional[list[Block]] = None
    headroom_drops: Optional[list[Block]] = None
    faults: Optional[Faults] = None         # scripted link faults (``experiment.fault_results``)
    # with an ``endpoints:`` section (``experiment.endpoint_results``)
    hosts: Optional[list[Block]] = None
    tenants: Optional[dict[str, Block]] = None
    isolation: Optional[Block] = None
    generated_traffic: Optional[list[Block]] = None     # poisson entries' (``traffic_gen``)
    # the runner's: where the wall time went, fabric time 0, virtual time's windows
    wall_phases_s: Optional[dict[str, Number]] = None
    start_unix_ns: Optional[int] = None
    virtual_time: Optional[Block] = None
    aborted: Optional[str] = None           # why a run ended early
    collectives: Optional[Block] = None     # a workload's (``experiment.servers``)
    fct_slowdown_buckets: Optional[Block] = None        # ``experiment.distributions``
    queue_depth_dist: Optional[Block] = None
    # the dilation's provenance (``experiment.dilation``)
    dilation_chosen_by: Optional[str] = None
    dilation_reruns: Optional[list[Block]] = None
    dilation_calibration: Optional[Block] = None

    def write(self, where: "str | Path | RunDir", text: str | None = None) -> Path:
        """summary.json into the run directory ``where`` (atomically): the one
        writer. ``text``: what ``text()`` gave, made while the run waited for
        something else (the summary unchanged since)."""
        return atomic_write_text(RunDir.of(where).summary, self.text() if text is None else text)

    def text(self) -> str:
        """summary.json's content."""
        return json.dumps(self.as_dict(), indent=1)


def read_summary(path: str | Path) -> dict:
    """A run's summary (``path``: its results directory or the file), checked;
    ``FabricEmuError``, one line naming the file and what is wrong, if it is
    not one."""
    path = Path(path)
    if path.is_dir():
        path = RunDir(path).summary
    return parse_summary(_read_bounded(path), path)


def parse_summary(data: bytes | str, path: str | Path) -> dict:
    """``read_summary``'s check of a summary's ``data`` (what ``path`` holds
    or is about to hold: ``RunSummary.text()``)."""
    path = Path(path)
    if not data.strip():
        raise _bad(path, f"empty ({len(data)} bytes): a run cut short before writing it?")
    try:
        summary = json.loads(data)
    except RecursionError:
        raise _bad(path, "nested too deep to be a summary") from None
    except ValueError as e:          # JSONDecodeError, UnicodeDecodeError
        raise _bad(path, f"not JSON: {e}") from None
    if not isinstance(summary, dict):
        raise _bad(path, f"a JSON {type(summary).__name__}, not an object")
    try:
        checked = SummaryFile.model_validate(summary)
    except ValidationError as e:
        err = e.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".")
        raise _bad(path, f"{where or 'summary'}: {err['msg']}") from None
    if "hosts" in summary and checked.isolation is None:
        raise _bad(path, "isolation: Field required (with hosts)")
    # the values as checked (a number in a string is a number), the sections
    # as the file had them (a section's absence means something to the tables)
    return {k: v for k, v in checked.model_dump().items() if k in summary}


def _read_bounded(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise _bad(path, "not a regular file")
            if st.st_size > MAX_SUMMARY_BYTES:
                raise _bad(path, f"{st.st_size:,} bytes, more than a summary.json "
                                 f"({MAX_SUMMARY_BYTES >> 20} MiB at most): not read")
            data = f.read(MAX_SUMMARY_BYTES + 1)
    except OSError as e:
        raise _bad(path, e.strerror or str(e)) from None
    if len(data) > MAX_SUMMARY_BYTES:           # it grew while being read
        raise _bad(path, f"more than {MAX_SUMMARY_BYTES >> 20} MiB: not read")
    return data


def _bad(path: Path, why: str) -> FabricEmuError:
    return FabricEmuError(f"{path}: not a run's summary.json: {why}")


__all__ = ["MAX_SUMMARY_BYTES", "Fidelity", "RunSummary", "SummaryFile", "parse_summary",
           "read_summary"]
