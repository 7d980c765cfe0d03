"""DCQCN parameters as an experiment file gives them (fabric units).

Defaults are the values of Zhu et al., "Congestion Control for Large-Scale
RDMA Deployments", SIGCOMM 2015. ``agent_params()`` converts them to what a
host agent runs with: times × dilation (wall ns), rates as fractions of the
line rate (dilation-free).
"""
from __future__ import annotations

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
    cnp_interval_us: float = Field(50.0, ge=0)             # NP: at most one CNP per QP per interval

    def agent_params(self, dilation: float, line_rate_bps: int) -> dict:
        """The agent config's ``dcqcn`` dict (emulator/nic/dcqcn.py's keys):
        times in wall ns (× dilation), rates as fractions of the host's fabric
        line rate ``line_rate_bps`` (dilation-free)."""
        def wall_ns(us: float) -> int:
            return int(us * 1000 * dilation)

        def frac(gbps: float) -> float:
            return min(1.0, gbps * 1e9 / line_rate_bps)

        return {
            "enabled": self.enabled, "g": self.g, "alpha_init": self.alpha_init,
            "alpha_timer_ns": wall_ns(self.alpha_update_us),
            "rate_timer_ns": wall_ns(self.rate_increase_timer_us),
            "byte_counter_bytes": self.byte_counter_bytes,
            "fast_recovery_steps": self.fast_recovery_steps,
            "rai_frac": frac(self.rate_ai_gbps), "rhai_frac": frac(self.rate_hai_gbps),
            "min_rate_frac": frac(self.min_rate_gbps),
        }

    def cnp_interval_ns(self, dilation: float) -> int:
        return int(self.cnp_interval_us * 1000 * dilation)
