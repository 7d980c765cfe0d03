"""A NIC's config on its clock: the one place where the fabric units of a
``schema.nic.NicConfig`` become the NIC clock's (times x D, rates / D, D
the config's ``dilation``), and where the congestion-control machines and
the CPU model get their parameters from their config sections.

``nic_wall(config)`` is called once, by ``RoceNic``; ``cpu_params`` by the
endpoint that sets up per-packet work (``agents.dpu``). The config is only
read (this package does not import the schema: it sits below it).
"""
from __future__ import annotations

from dataclasses import dataclass

from .dcqcn import DcqcnParams
from .host_cpu import HostCpuParams
from .hpcc import HpccParams
from .ib_cc import IbCcParams

IB_CC_TIMER_UNIT_NS = 1024       # CCTI_Timer counts 1.024 us (IBA annex A10)


def wall_ns(fabric_ns: float, dilation: float) -> int:
    """A fabric time on the NIC's clock."""
    return int(fabric_ns * dilation)


def wall_bps(fabric_bps: float, dilation: float) -> int:
    """A fabric rate on the NIC's clock (what ``net.mininet_topo.dilated_link``
    gives the switches' side of the same link)."""
    return max(1, int(fabric_bps / dilation))


@dataclass(frozen=True)
class NicWall:
    """What the NIC's parts run with, on its clock."""
    rate_bps: int
    tx_delay_ns: int
    rto_ns: int
    cnp_interval_ns: int | None          # None: no CNPs
    cc: DcqcnParams | HpccParams | IbCcParams   # the reaction point's
    credit_update_period_ns: int | None  # InfiniBand's flow-control updates (None: Ethernet)


def nic_wall(config) -> NicWall:
    d = config.dilation
    ib = config.ib
    rto = config.rto_ns
    if ib is not None:
        cc = ib_cc_params(ib.cc, d) if ib.cc is not None and ib.cc.enabled else \
            dcqcn_params(config.dcqcn, d, config.rate_bps, enabled=False)
        cnp_ns = 0                       # every FECN is answered (hfi1 does)
    else:
        cnp_us = config.dcqcn.cnp_interval_us
        cnp_ns = None if cnp_us is None else int(cnp_us * 1000 * d)
        cc = hpcc_params(config.hpcc, d, config.rate_bps) if config.hpcc is not None else \
            dcqcn_params(config.dcqcn, d, config.rate_bps)
    return NicWall(
        rate_bps=wall_bps(config.rate_bps, d), tx_delay_ns=wall_ns(config.tx_delay_ns, d),
        rto_ns=wall_ns(rto, d), cnp_interval_ns=cnp_ns, cc=cc,
        credit_update_period_ns=None if ib is None else wall_ns(ib.update_period_ns, d))


def _frac(gbps: float, line_rate_bps: float) -> float:
    """A rate as a fraction of the fabric line rate (dilation-free)."""
    return min(1.0, gbps * 1e9 / line_rate_bps)


def dcqcn_params(spec, d: float, line_rate_bps: float, enabled: bool | None = None) -> DcqcnParams:
    """``spec``: a ``schema.dcqcn.DcqcnSpec``; ``line_rate_bps``: fabric."""
    return DcqcnParams(
        enabled=spec.enabled if enabled is None else enabled, g=spec.g,
        alpha_init=spec.alpha_init,
        alpha_timer_ns=int(spec.alpha_update_us * 1000 * d),
        rate_timer_ns=int(spec.rate_increase_timer_us * 1000 * d),
        byte_counter_bytes=spec.byte_counter_bytes,
        fast_recovery_steps=spec.fast_recovery_steps,
        rai_frac=_frac(spec.rate_ai_gbps, line_rate_bps),
        rhai_frac=_frac(spec.rate_hai_gbps, line_rate_bps),
        min_rate_frac=_frac(spec.min_rate_gbps, line_rate_bps))


def hpcc_params(spec, d: float, line_rate_bps: float) -> HpccParams:
    """``spec``: a ``schema.hpcc.HpccSpec`` with ``base_rtt_us``. T stays in
    fabric ns (the INT records' clock); the machine scales the NIC's line
    rate back to the fabric's with ``dilation``."""
    return HpccParams(
        enabled=True, eta=spec.eta, max_stage=spec.max_stage, w_ai_bytes=spec.w_ai_bytes,
        expected_flows=spec.expected_flows, base_rtt_ns=max(1, round(spec.base_rtt_us * 1000)),
        min_rate_frac=_frac(spec.min_rate_gbps, line_rate_bps), dilation=float(d))


def ib_cc_params(spec, d: float) -> IbCcParams:
    """``spec``: a ``schema.ib_cc.IbCcSpec``."""
    return IbCcParams(
        enabled=True, ccti_increase=spec.ccti_increase, ccti_timer=spec.ccti_timer,
        ccti_timer_ns=round(IB_CC_TIMER_UNIT_NS * spec.ccti_timer * d),
        ccti_min=spec.ccti_min, cct=spec.table())


def cpu_params(spec, d: float) -> HostCpuParams:
    """``spec``: a ``schema.nic.HostCpuConfig`` (fabric ns)."""
    return HostCpuParams(
        cores=spec.cores, firewall_ns_per_packet=spec.firewall_ns_per_packet * d,
        crypto_ns_per_packet=spec.crypto_ns_per_packet * d,
        crypto_ns_per_byte=spec.crypto_ns_per_byte * d,
        storage_ns_per_packet=spec.storage_ns_per_packet * d,
        rx_backlog_pkts=spec.rx_backlog_pkts)
