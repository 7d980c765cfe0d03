"""DCQCN parameters as an experiment file gives them (fabric units); the
same model is the ``dcqcn`` part of a NIC's config (``schema.nic``).

Defaults are the values of Zhu et al., "Congestion Control for Large-Scale
RDMA Deployments", SIGCOMM 2015, for a 40 Gbit/s NIC (table 1 and section
3.1: g = 1/256, K = 55 us, T = 55 us, B = 10 MB (taken as 10 MiB), F = 5,
R_AI = 40 Mbit/s), with R_HAI = 200 Mbit/s and R_min = 100 Mbit/s (not given
in the paper: the values of its authors' ns-3 code, bobzhuyb/ns3-rdma) and
alpha = 1 before the first CNP (Mellanox's initial_alpha_value 1023/1023;
the first CNP halves the rate). ``enabled: false`` keeps the QPs at line
rate (CNPs are still counted). The NIC converts them (``nic.wall``): times
x dilation, rates as fractions of its fabric line rate.
"""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from emulator.schema.load import StrictSpec


class DcqcnSpec(StrictSpec):
    enabled: bool = True
    g: float = Field(1 / 256, gt=0, lt=1)                 # alpha gain
    alpha_init: float = Field(1.0, ge=0, le=1)
    alpha_update_us: float = Field(55.0, gt=0)             # K: alpha decays every K without CNP
    rate_increase_timer_us: float = Field(55.0, gt=0)      # T
    byte_counter_bytes: int = Field(10 * 1024 * 1024, gt=0)  # B
    fast_recovery_steps: int = Field(5, ge=1)              # F
    rate_ai_gbps: float = Field(0.04, gt=0)                # R_AI: additive increase (40 Mb/s)
    rate_hai_gbps: float = Field(0.2, gt=0)                # R_HAI: hyper increase
    min_rate_gbps: float = Field(0.1, gt=0)
    # NP: at most one CNP per QP per interval (null: the NIC sends no CNPs)
    cnp_interval_us: Optional[float] = Field(50.0, ge=0)
