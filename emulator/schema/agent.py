"""The JSON configs of the agent processes, written by the runner and read
by the agents -- the same models on both sides:

* ``HostAgentConfig``: ``python -m emulator.agents.host CONFIG.json``, one
  NIC running plain flows (``emulator/experiment/agents.py`` writes it);
  ``AgentPackConfig``: ``python -m emulator.agents.pack PACK.json``, several
  of them in one process;
* ``CollectiveAgentConfig``: ``python -m emulator.collectives.agent``, one
  GPU server running the workload;
* ``StorageAgentConfig``: ``python -m emulator.collectives.storage``, the
  storage target (both written by ``emulator/experiment/servers.py``).

The NIC part of each (``schema.nic.NicConfig``) is in fabric units, handed
as is to the NIC, which puts it on its clock; the agents' own times here
(``start_offset_ns``, ``sample_interval_ns``, the staging path) are wall
time, dilated by the runner. Conventions (payload pattern, WRITE layout) are
documented in ``emulator/agents/payload.py``, the host agent's result in
docs/lossless.md.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from emulator.schema.load import FieldError, ProcessConfig, StrictSpec
from emulator.schema.nic import NicConfig
from emulator.schema.workload import WorkloadSpec

DEFAULT_MR_RKEY = 0x1234       # the rkey of a host's receive memory region
# Keys of HostAgentConfig that make a NIC an endpoint with per-packet work,
# a tenant or storage QPs (``agents/dpu.py``); all None: a plain NIC.
ENDPOINT_KEYS = ("dpu", "tenant", "host_cpu", "dpu_cpu", "storage_qpns")
TENANT_MAX = 0x7FFE            # BTH P_Key 0x8000|tenant: 0x7FFF is the default partition's


class GpuNicConfig(NicConfig):
    """A NIC serving a GPU: GPUDirect RDMA on, or off with host staging."""
    gpudirect: Optional[bool] = None         # None: no GPU memory model (GPUDirect on)
    staging_rate_bps: float = Field(100e9, gt=0)
    staging_latency_ns: float = Field(10_000, ge=0)


# ------------------------------------------------------------- host agent

class QpConfig(StrictSpec):
    qpn: int
    remote_ip: str
    remote_qpn: int
    udp_sport: Optional[int] = None          # None: wire.roce_sport(qpn)
    sq_psn: int = 0                          # must equal the peer QP's rq_psn
    rq_psn: int = 0
    rate_bps: Optional[float] = None         # a cap below the NIC's rate


class SendConfig(StrictSpec):
    flow_id: int
    qpn: int                                 # a local QP of qps
    op: Literal["write", "send"] = "write"
    size_bytes: int = Field(ge=0)
    start_offset_ns: int = 0                 # after start_at_unix_ns
    rkey: int = DEFAULT_MR_RKEY              # WRITE: the receiver's MR
    remote_addr: Optional[int] = None        # WRITE: where it lands (payload.write_layout); None: 0


class ExpectConfig(StrictSpec):
    flow_id: int
    qpn: int
    op: Literal["write", "send"] = "write"
    size_bytes: int = Field(ge=0)
    remote_addr: Optional[int] = None        # pin the WRITE's address (else the layout's)


class HostAgentConfig(ProcessConfig, GpuNicConfig):
    """The host agent: one NIC, its QPs, what it sends and what it expects::

        {"host": "h1", "ifname": "h1-eth0", "mac": "02:..", "ip": "10.0.1.1",
         "gateway_mac": "02:..", "rate_bps": 10000000, "dcqcn": {...}, ...,
         "qps": [{"qpn": 16, "remote_ip": "10.0.2.1", "remote_qpn": 32}],
         "send": [{"flow_id": 0, "qpn": 16, "op": "write", "size_bytes": 1048576}],
         "expect": [{"flow_id": 3, "qpn": 16, "op": "write", "size_bytes": 1048576}],
         "result_path": "/tmp/.../h1.result.json"}

    ``qpn`` in ``send`` and ``expect`` is always a *local* QP from ``qps``;
    ``sq_psn`` of a QP must equal ``rq_psn`` of its peer QP (both default 0)."""
    host: str
    sample_interval_ns: Optional[int] = Field(None, gt=0)   # flows.csv rows; None: 1 ms
    mr_rkey: int = DEFAULT_MR_RKEY
    mr_addr: int = 0
    start_at_unix_ns: Optional[int] = None           # None: now
    ready_path: Optional[str] = None                 # set: start when the runner says (agents/start_gate.py)
    deadline_s: float = Field(60.0, gt=0)            # give up at start_at + deadline_s
    linger_s: Optional[float] = Field(None, ge=0)    # None: max(0.5 s, 3 RTOs)
    qps: list[QpConfig] = []
    send: list[SendConfig] = []
    expect: list[ExpectConfig] = []
    result_path: str
    # {"delivered_bytes", "done"} rewritten about every second (None: not written)
    progress_path: Optional[str] = None
    # Endpoint features (ENDPOINT_KEYS; all None: a plain NIC).
    dpu: Optional[bool] = None                       # True: per-packet work on the card
    tenant: Optional[int] = Field(None, ge=1, le=TENANT_MAX)   # BTH P_Key 0x8000|tenant
    storage_qpns: Optional[list[int]] = None         # local QPs carrying storage traffic

    @model_validator(mode="after")
    def _references(self):
        qpns: set[int] = set()
        for i, q in enumerate(self.qps):
            if q.qpn in qpns:
                raise FieldError(f"qps[{i}].qpn", "duplicate")
            qpns.add(q.qpn)
        for section in ("send", "expect"):
            flows: set[int] = set()
            for i, e in enumerate(getattr(self, section)):
                if e.qpn not in qpns:
                    raise FieldError(f"{section}[{i}].qpn", f"no local QP {e.qpn} in qps")
                if e.flow_id in flows:
                    raise FieldError(f"{section}[{i}].flow_id", "duplicate")
                flows.add(e.flow_id)
        for i, q in enumerate(self.storage_qpns or []):
            if q not in qpns:
                raise FieldError(f"storage_qpns[{i}]", f"no local QP {q!r} in qps")
        return self

    def is_endpoint(self) -> bool:
        """Any endpoint key set: the NIC gets an ``agents.dpu.Endpoint``."""
        return any(getattr(self, k) is not None for k in ENDPOINT_KEYS)


class PackMemberConfig(StrictSpec):
    config: str                                      # a HostAgentConfig file
    netns_pid: int = Field(gt=0)                     # a process in its host's network namespace


class AgentPackConfig(ProcessConfig):
    """Several host agents in one process (``agents/pack.py``): each
    member's NIC opened in its own host's namespace, one loop for all."""
    members: list[PackMemberConfig] = Field(min_length=1)
    # its loop polls this long before a timed wake-up (net/packing.wake_spin_ns)
    wake_spin_ns: int = Field(0, ge=0, le=1_000_000)


# ---------------------------------------------------------- server agents

class NvlinkConfig(StrictSpec):
    rate_bps: float = Field(ge=0)            # 0: a 1-GPU server has none
    delay_ns: float = Field(ge=0)


class StorageReaderConfig(StrictSpec):
    """Checkpoint reads during training (``collectives.storage.StorageReader``)."""
    nic: Optional[NicConfig] = None          # its own storage NIC; None: GPU NIC 0
    qpn: int                                 # the same QPN on both ends
    target_ip: str
    block_bytes: int = Field(gt=0)
    blocks: int = Field(ge=1)
    queue_depth: int = Field(2, ge=1)


class CollectiveAgentConfig(ProcessConfig):
    """A GPU server running the workload: NIC g serves GPU g."""
    server: int = Field(ge=0)                # its index among the workload's servers
    servers: int = Field(ge=1)
    dilation: float = Field(1.0, ge=1)
    nics: list[GpuNicConfig] = Field(min_length=1)
    nic_nodes: list[str] = []                # the NICs' node names: their raw drop logs (none: no logs)
    rank_ips: dict[str, str]                 # every global rank -> its NIC's IP
    nvlink: NvlinkConfig
    workload: WorkloadSpec
    start_at_unix_ns: Optional[int] = None
    ready_path: Optional[str] = None                 # set: start when the runner says (agents/start_gate.py)
    deadline_s: float = Field(60.0, gt=0)
    result_path: str
    storage: Optional[StorageReaderConfig] = None

    @model_validator(mode="after")
    def _one_dilation(self):
        """The server's NICs run at its dilation: one not given takes it."""
        nics = list(self.nics) + ([self.storage.nic] if self.storage and self.storage.nic else [])
        for i, n in enumerate(nics):
            if "dilation" not in n.model_fields_set:
                n.dilation = self.dilation
            elif n.dilation != self.dilation:
                raise FieldError(f"nics[{i}].dilation" if i < len(self.nics) else
                                 "storage.nic.dilation", f"is not the server's {self.dilation:g}")
        return self


class ReadClientConfig(StrictSpec):
    qpn: int
    remote_ip: str
    remote_qpn: int


class StorageAgentConfig(ProcessConfig):
    """The storage target: serves blocks by RDMA READ until stopped."""
    nic: NicConfig
    block_bytes: int = Field(gt=0)
    blocks: int = Field(ge=1)
    storage_latency_ns: int = Field(0, ge=0)   # device service time per READ
    clients: list[ReadClientConfig]
    ready_path: Optional[str] = None                 # set: start when the runner says (agents/start_gate.py)
    deadline_s: float = Field(60.0, gt=0)
    result_path: str
