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

Every rate and time here is wall time: the runner has dilated it (fabric
rate / D, fabric time x D); bytes are not dilated. The NIC's transport
timers (``rto_ns``, ``cnp_interval_ns``, the ``dcqcn`` timers) are fabric
values of the experiment's ``nic:`` / ``dcqcn:`` x D; ``dilation`` (D) is
there for the times the NIC takes from the protocol (RNR timer codes) and
to report in fabric time. Conventions (payload pattern, WRITE layout) are
documented in ``emulator/agents/payload.py``, the host agent's result in
docs/lossless.md.

Value checks that the agents' parameter classes own (``DcqcnParams``,
``HostCpuParams``, ``tenant_pkey``) are theirs: the validators call them,
imported when a config is validated, so the schema stays importable alone.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, Field, model_validator

from emulator.schema.load import FieldError, ProcessConfig, StrictSpec
from emulator.schema.workload import WorkloadSpec
from emulator.int_md import INT_MAX_HOPS
from emulator.wire import NUM_PRIORITIES

DEFAULT_MR_RKEY = 0x1234       # the rkey of a host's receive memory region
# Keys of HostAgentConfig that make a NIC an endpoint with per-packet work,
# a tenant or storage QPs (``agents/dpu.py``); all None: a plain NIC.
ENDPOINT_KEYS = ("dpu", "tenant", "host_cpu", "dpu_cpu", "storage_qpns")


def _dcqcn(d: Optional[dict]) -> Optional[dict]:
    from emulator.agents.dcqcn import DcqcnParams
    DcqcnParams.from_config(d)
    return d


def _ib_cc(d: Optional[dict]) -> Optional[dict]:
    from emulator.ib.cc import IbCcParams
    if d is not None:
        IbCcParams.from_config(d)
    return d


def _cpu(d: Optional[dict]) -> Optional[dict]:
    from emulator.agents.host_cpu import HostCpuParams
    if d is not None:
        try:
            HostCpuParams.from_config(d)
        except TypeError as e:          # (a value its dataclass cannot take)
            raise ValueError(str(e)) from None
    return d


def _hpcc(d: Optional[dict]) -> Optional[dict]:
    from emulator.agents.hpcc import HpccParams
    if d is not None:
        HpccParams.from_config(d)       # ValueError names the key
    return d


def _tenant(t: Optional[int]) -> Optional[int]:
    from emulator.agents.dpu import tenant_pkey
    if t is not None:
        tenant_pkey(t)
    return t


Priority = Annotated[int, Field(ge=0, le=NUM_PRIORITIES - 1)]
Dscp = Annotated[int, Field(ge=0, le=63)]
DcqcnKeys = Annotated[Optional[dict[str, Any]], AfterValidator(_dcqcn)]
CpuKeys = Annotated[Optional[dict[str, Any]], AfterValidator(_cpu)]
IbCcKeys = Annotated[Optional[dict[str, Any]], AfterValidator(_ib_cc)]
HpccKeys = Annotated[Optional[dict[str, Any]], AfterValidator(_hpcc)]


class IbNicConfig(StrictSpec):
    """What makes a NIC an InfiniBand one (``emulator.ib.nic.IbNic``): its
    LID, the path records of its peers (IP -> LID, from the subnet
    manager's sweep), its SL and data VL, its receive buffer and flow-control
    updates (wall ns), its switch port's buffer (the credit it holds at the
    start: the link came up before the run), and IB congestion control
    (``ib.cc.IbCcParams`` keys; None: none)."""
    lid: int = Field(ge=1, le=0xBFFF)
    lids: dict[str, int]
    sl: int = Field(0, ge=0, le=15)
    vl: int = Field(0, ge=0, le=14)
    buffer_blocks: int = Field(512, ge=1, le=2048)
    update_blocks: int = Field(16, ge=1)
    update_period_ns: int = Field(16_000, gt=0)
    peer_buffer_blocks: int = Field(0, ge=0, le=2048)
    cc: IbCcKeys = None


class NicConfig(StrictSpec):
    """One RoCEv2 NIC: addresses, link, QoS marking, CNPs, DCQCN -- or, with
    ``ib``, an InfiniBand one (the Ethernet-only keys then unused)."""
    ifname: str
    mac: str
    ip: str
    gateway_mac: str                         # destination MAC of every frame it sends
    rate_bps: int = Field(10_000_000, gt=0)
    tx_delay_ns: int = Field(0, ge=0)        # the link's propagation delay
    mtu_bytes: int = Field(1024, gt=0)
    retry_cnt: int = Field(7, ge=1)
    # ACK timeout, wall: fabric ns x dilation (None: requester.DEFAULT_RTO_FABRIC_NS x dilation)
    rto_ns: Optional[int] = Field(None, gt=0)
    dilation: float = Field(1.0, ge=1)       # D: wall ns per fabric ns
    dscp: Dscp = 26                          # data, ACK/NAK
    priority: Priority = 3                   # their PFC class
    cnp_dscp: Dscp = 48
    cnp_priority: Priority = 6
    cnp_interval_ns: Optional[int] = Field(50_000, ge=0)   # <= 1 CNP per QP per interval; None: none
    dcqcn: DcqcnKeys = None                  # dcqcn.DcqcnParams keys; None: its defaults
    # hpcc.HpccParams keys: HPCC is the reaction point instead of DCQCN
    hpcc: HpccKeys = None
    int_max_hops: int = Field(0, ge=0, le=INT_MAX_HOPS)   # > 0: data frames carry INT (HPCC)
    ib: Optional[IbNicConfig] = None         # set: an InfiniBand NIC


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
    ack_every_n: int = Field(16, ge=1)
    verify_icrc: bool = True
    honor_pfc: bool = True                           # obey received PFC frames
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
    tenant: Annotated[Optional[int], AfterValidator(_tenant)] = None   # BTH P_Key 0x8000|tenant
    host_cpu: CpuKeys = None                         # host_cpu.HostCpuParams keys
    dpu_cpu: CpuKeys = None
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
