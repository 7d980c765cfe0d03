"""A resolved experiment: the validated file (``ExperimentSpec``) with its
fabric, its flows (QPs numbered, start times in fabric ns) and its workload
plan -- what the runner runs and the results are computed from.

Built by ``emulator.experiment.model.load_experiment``; the modules that
resolve sections (``endpoints.py``, ``workload_check.py``) work on these
types, below the loader, so no module imports the loader back.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulator.errors import FabricEmuError
from emulator.schema.experiment import ExperimentSpec
from emulator.topo import Fabric
from emulator.wire import roce_sport

ROCE_QPN_BASE = 0x100         # first QPN each host hands out


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
    entry: int = 0            # index of the traffic: entry it comes from

    @property
    def udp_sport(self) -> int:
        """The requester QP's UDP source port (its ECMP entropy)."""
        return roce_sport(self.src_qpn)


@dataclass(frozen=True)
class WorkloadPlan:
    """Who does what: the workload's servers (rank order) and the storage
    readers with the NIC each one reads through."""

    servers: tuple[str, ...]
    storage_server: str | None = None
    storage_nic: str | None = None                  # the target's NIC
    readers: tuple[tuple[str, str], ...] = ()       # (server, NIC it reads through)

    def nics(self, fabric: Fabric) -> dict[str, str]:
        """Every NIC the server agents drive -> its server."""
        out = {nic: s for s in self.servers for nic in fabric.server(s).nics}
        out.update({nic: s for s, nic in self.readers})
        if self.storage_nic:
            out[self.storage_nic] = self.storage_server
        return out


WALL_S_AT_DILATION = 10_000.0       # the D that limits.wall_s is written for


@dataclass(frozen=True)
class Experiment:
    spec: ExperimentSpec
    fabric: Fabric
    flows: tuple[Flow, ...]
    source: str
    workload: WorkloadPlan | None = None            # servers running spec.workload, storage readers
    # a sweep: (value, the experiment with the parameter set to it), in file
    # order, each checked when the file was loaded (``model._sweep_points``)
    sweep_points: tuple[tuple[Any, "Experiment"], ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def time_mode(self) -> str:
        """The run's clock, "virtual" or "dilated"; ``time: auto`` is resolved
        before a run (``emulator.experiment.time_mode.resolve_time``)."""
        t = self.spec.time
        if t == "auto":
            raise FabricEmuError(f"{self.source}: time 'auto' is decided when the experiment "
                                 "runs (emulator.experiment.time_mode), not before")
        return t

    @property
    def dilation(self) -> float:
        """The run's D (1 in virtual time); ``dilation: auto`` is resolved to a
        number before a dilated run (``emulator.experiment.dilation.with_dilation``)."""
        d = self.spec.dilation
        if d == "auto":
            raise FabricEmuError(f"{self.source}: dilation 'auto' is chosen when the experiment "
                                 "runs (emulator.experiment.dilation), not before")
        return d

    @property
    def wall_limit_s(self) -> float:
        """``limits.wall_s`` is the wall time allowed at a dilation up to
        ``WALL_S_AT_DILATION``; a higher D (chosen by ``auto``, or raised
        after a run fell behind) stretches the same traffic over
        proportionally more wall time, and gets proportionally more. A
        virtual run's is ``limits.wall_s`` as given: its wall time is the
        CPU its work needs, whatever D the file names."""
        if self.spec.time == "virtual":
            return self.spec.limits.wall_s
        return self.spec.limits.wall_s * max(1.0, self.dilation / WALL_S_AT_DILATION)
