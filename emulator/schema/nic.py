"""The one config of a NIC: ``NicConfig``, handed as is to
``emulator.nic.nic.RoceNic`` (with ``ib``, on ``emulator.ib.link.IbLink``).

Units are the fabric's, as the experiment file gives them: rates in fabric
bit/s, times in fabric ns, ``dilation`` D the wall ns per fabric ns of the
NIC's clock. The NIC converts them, in one place (``emulator.nic.wall``);
nothing before it dilates. The exceptions are the knobs of the process
itself (socket buffers, ``max_lag_ns``, ``timer_slack_ns``): wall time, as
they are about the process, not the fabric.

Parts: the transport (flat: rate, MTU, timers, QoS marking), congestion
control (``dcqcn`` -- DCQCN and the CNPs of the notification point --,
``hpcc``, or on InfiniBand ``ib.cc``), the link layer (Ethernet's PFC here;
``ib``: an InfiniBand port, its LIDs and credit updates) and the per-packet
CPU work of an endpoint (``host_cpu``, ``dpu_cpu``; ``agents.dpu``).

Each default and each bound is here once: the experiment file's sections
(``nic:``, ``dcqcn:``, ``hpcc:``, ``ib_cc:``, ``endpoints:``) use these
types and these models.
"""
from __future__ import annotations

from typing import Annotated, Optional

from pydantic import Field, NonNegativeFloat, model_validator

from emulator.schema.dcqcn import DcqcnSpec
from emulator.schema.faults import EndFaults
from emulator.schema.hpcc import HpccSpec
from emulator.schema.ib_cc import IbCcSpec
from emulator.schema.load import FieldError, StrictSpec
from emulator.wire import INT_MAX_HOPS, NUM_PRIORITIES

Priority = Annotated[int, Field(ge=0, le=NUM_PRIORITIES - 1)]
Dscp = Annotated[int, Field(ge=0, le=63)]
# Retransmission timeouts in a row before a QP fails (IB's retry_cnt; a lossy
# incast can shut one sender out for long: raise it there)
RetryCnt = Annotated[int, Field(ge=1, le=1000)]
DEFAULT_RETRY_CNT = 7
DEFAULT_MTU_BYTES = 1024
CpuCores = Annotated[int, Field(ge=1, le=1024)]
BacklogPkts = Annotated[int, Field(ge=1)]
BufferBlocks = Annotated[int, Field(ge=1, le=2048)]      # 64-byte credit blocks of one VL
UpdateBlocks = Annotated[int, Field(ge=1)]
UpdatePeriodNs = Annotated[int, Field(gt=0)]


# The default ACK timeout (IBA's local ACK timeout), in fabric ns: IRN's
# RTO_high, 320 us (Mittal et al., SIGCOMM 2018), not a function of the
# dilation or the CPU: past the queueing and PFC delays of the shipped
# fabrics, so only a real loss times out. Why, with the measurements:
# docs/design-notes.md, "The default ACK timeout". ``nic.rto_us`` overrides it.
DEFAULT_RTO_FABRIC_NS = 320_000

class HostCpuConfig(StrictSpec):
    """Per-packet CPU work (``emulator.nic.host_cpu``): fabric ns per packet
    (per byte) on ``cores`` FCFS cores; at most ``rx_backlog_pkts`` received
    packets wait for them."""
    cores: CpuCores = 1
    firewall_ns_per_packet: NonNegativeFloat = 0.0
    crypto_ns_per_packet: NonNegativeFloat = 0.0
    crypto_ns_per_byte: NonNegativeFloat = 0.0
    storage_ns_per_packet: NonNegativeFloat = 0.0
    rx_backlog_pkts: BacklogPkts = 1024


class IbLinkLayer(StrictSpec):
    """One data VL's receive buffer and its flow-control updates (IBA
    7.9.4), as the switches' ports have them (``schema.switch.IbLinkConfig``)."""
    buffer_blocks: BufferBlocks = 512          # 32 KiB
    update_blocks: UpdateBlocks = 16           # freed blocks that prompt an update (1 KiB)
    update_period_ns: UpdatePeriodNs = 16_000  # fabric ns: 65,536 symbols at EDR


class IbNicConfig(IbLinkLayer):
    """What makes a NIC an InfiniBand one: its LID, the path records of its
    peers (IP -> LID, from the subnet manager's sweep), its SL and data VL,
    its link layer, and IB congestion control (None: none)."""
    lid: int = Field(ge=1, le=0xBFFF)
    lids: dict[str, int]
    sl: int = Field(0, ge=0, le=15)
    vl: int = Field(0, ge=0, le=14)
    # the credit held before the switch port's first flow-control packet: its
    # empty buffer, the link having come up before the run (0: none until then)
    peer_buffer_blocks: int = Field(0, ge=0, le=2048)
    cc: Optional[IbCcSpec] = None


class NicConfig(StrictSpec):
    """One NIC (see the module docstring for the units)."""
    ifname: Optional[str] = None             # None: a test hands the NIC its socket
    mac: str
    ip: str
    gateway_mac: str                         # destination MAC of every frame it sends
    dilation: float = Field(1.0, ge=1)       # D: wall ns per fabric ns
    # -- transport (fabric units)
    rate_bps: int = Field(10_000_000, gt=0)
    tx_delay_ns: int = Field(0, ge=0)        # the link's propagation delay
    mtu_bytes: int = Field(DEFAULT_MTU_BYTES, ge=256, le=9000, multiple_of=4)
    retry_cnt: RetryCnt = DEFAULT_RETRY_CNT
    rto_ns: int = Field(DEFAULT_RTO_FABRIC_NS, gt=0)     # ACK timeout
    rnr_retry: Optional[int] = Field(None, ge=0)     # RNR NAKs in a row before failing; None: forever
    min_rnr_timer: int = Field(14, ge=0, le=31)      # the RNR timer code our RNR NAKs carry
    ack_every_n: int = Field(16, ge=1)               # AckReq on every n-th packet (and a message's last)
    max_outstanding_pkts: int = Field(1 << 22, ge=1)
    verify_icrc: bool = True
    report_remote_writes: bool = True                # RECV_RDMA_WRITE completions (an extension)
    # -- QoS marking and the lossless class (Ethernet)
    dscp: Dscp = 26                          # data, ACK/NAK
    ecn: int = Field(2, ge=0, le=3)          # the ECN field of data frames (2: ECT(0))
    priority: Priority = 3                   # their PFC class
    cnp_dscp: Dscp = 48
    cnp_priority: Priority = 6
    honor_pfc: bool = True                   # obey received PFC frames
    link_faults: Optional[EndFaults] = None  # scripted faults of its link, as the sender (fabric ns)
    # -- congestion control: DCQCN (and the notification point's CNP interval),
    # or HPCC instead of DCQCN, fed by INT
    dcqcn: DcqcnSpec = DcqcnSpec()
    hpcc: Optional[HpccSpec] = None          # set: HPCC (its base_rtt_us given)
    int_max_hops: int = Field(0, ge=0, le=INT_MAX_HOPS)   # > 0: data frames carry INT (HPCC)
    # -- InfiniBand instead of Ethernet (the Ethernet-only keys then unused)
    ib: Optional[IbNicConfig] = None
    # -- per-packet CPU work of an endpoint (agents.dpu; None: none)
    host_cpu: Optional[HostCpuConfig] = None
    dpu_cpu: Optional[HostCpuConfig] = None
    # -- the process (wall)
    max_lag_ns: Optional[int] = Field(None, ge=0)    # catch-up window; None: max(500 us, 4 frames)
    timer_slack_ns: Optional[int] = Field(1000, ge=1)
    rcvbuf_bytes: int = Field(16 << 20, gt=0)
    sndbuf_bytes: int = Field(4 << 20, gt=0)
    absorb_udp: bool = True                  # a UDP socket on RoCE's port: no ICMP unreachables

    @model_validator(mode="after")
    def _hpcc_rtt(self):
        if self.hpcc is not None and self.hpcc.base_rtt_us is None:
            raise FieldError("hpcc.base_rtt_us", "required in a NIC's config (the runner "
                             "fills in the fabric's largest base RTT)")
        return self
