"""The ``qos:`` section of an experiment file: traffic classes, PFC and ECN
(docs/lossless.md). ``emulator.control.qos`` turns it into fabric.p4's
``dscp_to_priority``, ``pfc_config`` and ``ecn_config`` entries. Byte
thresholds are not dilated: a link's bandwidth-delay product in bytes is the
same at rate / D and delay x D.

Thresholds are checked in order here (ECN ``kmin_bytes <= kmax_bytes``; PFC
``xon_bytes < xoff_bytes``, defaults included) and against the switch buffer
and the MTU (``check_thresholds``, called by ``ExperimentSpec``, which knows
both): XOFF, a given headroom and ECN's Kmin inside the buffer.
"""
from __future__ import annotations

from pydantic import Field, PositiveInt, model_validator

from emulator.schema.load import FieldError, StrictSpec
from emulator.wire import ICRC_BYTES, RETH_BYTES, ROCE_HDR_BYTES

# A full RoCEv2 WRITE frame carries this much beyond its payload (headers,
# RETH, ICRC; emulator/wire.py).
ROCE_FRAME_OVERHEAD_BYTES = ROCE_HDR_BYTES + RETH_BYTES + ICRC_BYTES
DEFAULT_XOFF_BYTES = 32_000


def mtu_frame_bytes(mtu_bytes: int) -> int:
    return mtu_bytes + ROCE_FRAME_OVERHEAD_BYTES


class PfcSpec(StrictSpec):
    enabled: bool = True
    xoff_bytes: PositiveInt | None = None      # None: DEFAULT_XOFF_BYTES, at least 3 MTU frames
    xon_bytes: PositiveInt | None = None       # None: XOFF - 2 MTU frames, at least 1
    headroom_bytes: PositiveInt | None = None  # None: sized from each link (see headroom_bytes())
    # How long a pause that fabric.p4 sends on BMv2 lasts unless refreshed
    # (it is refreshed every half of it while the cause lasts; an XON ends
    # it early). The embedded target's traffic manager sends 0xFFFF/XON.
    pause_us: float = Field(20.0, gt=0, le=1000)

    @model_validator(mode="after")
    def _order(self):
        if self.xon_bytes is not None and self.xoff_bytes is not None and self.xon_bytes >= self.xoff_bytes:
            raise FieldError("xon_bytes", f"must be below xoff_bytes ({self.xoff_bytes}) (got {self.xon_bytes}): "
                                          "a queue resumes below where it paused")
        return self

    def thresholds(self, mtu_bytes: int) -> tuple[int, int]:
        """(XOFF, XON) in bytes, the defaults sized from the MTU frame."""
        frame = mtu_frame_bytes(mtu_bytes)
        xoff = self.xoff_bytes or max(DEFAULT_XOFF_BYTES, 3 * frame)
        return xoff, self.xon_bytes or max(frame, xoff - 2 * frame)


class EcnSpec(StrictSpec):
    enabled: bool = True
    kmin_bytes: PositiveInt = 5_000            # DCQCN paper: 5 KB
    kmax_bytes: PositiveInt = 200_000          # DCQCN paper: 200 KB
    pmax: float = Field(0.01, ge=0.0, le=1.0)  # DCQCN paper: 1 %

    @model_validator(mode="after")
    def _order(self):
        if self.kmin_bytes > self.kmax_bytes:          # equal: a step at K (DCTCP-style)
            raise FieldError("kmin_bytes", f"must be <= kmax_bytes ({self.kmax_bytes}) (got {self.kmin_bytes}): "
                                           "marking rises from kmin to kmax")
        return self


class QosSpec(StrictSpec):
    roce_dscp: int = Field(26, ge=0, le=63)    # RoCE data, ACK/NAK
    roce_priority: int = Field(3, ge=0, le=7)  # the lossless class
    cnp_dscp: int = Field(48, ge=0, le=63)
    cnp_priority: int = Field(6, ge=0, le=7)
    pfc: PfcSpec = PfcSpec()
    ecn: EcnSpec = EcnSpec()

    def check_thresholds(self, buffer_bytes: int, mtu_bytes: int) -> None:
        """PFC and ECN thresholds fit a switch of ``buffer_bytes`` at this MTU
        (a ``FieldError`` relative to ``qos`` if not): no queue or ingress
        count gets deeper than the buffer, so a threshold above it never acts."""
        if self.pfc.enabled:
            xoff, xon = self.pfc.thresholds(mtu_bytes)
            field = "pfc.xoff_bytes"
            if xoff > buffer_bytes:
                raise FieldError(field, f"{xoff} is above switch.buffer_bytes ({buffer_bytes}): the "
                                        "buffer fills before any pause is sent")
            if self.pfc.headroom_bytes is not None and self.pfc.headroom_bytes > buffer_bytes:
                raise FieldError("pfc.headroom_bytes", f"{self.pfc.headroom_bytes} is above "
                                                       f"switch.buffer_bytes ({buffer_bytes})")
            if xon >= xoff:
                what = "the default (XOFF - 2 MTU frames, at least one frame)" if self.pfc.xon_bytes is None \
                    else str(xon)
                raise FieldError("pfc.xon_bytes", f"{what} is not below xoff_bytes ({xoff}): give an "
                                                  f"xoff_bytes above one MTU frame ({mtu_frame_bytes(mtu_bytes)} "
                                                  "bytes), or an xon_bytes below it")
        if self.ecn.enabled and self.ecn.kmin_bytes >= buffer_bytes:
            # (a kmax above the buffer is a gentler slope: marks up to pmax x the share reached)
            raise FieldError("ecn.kmin_bytes", f"{self.ecn.kmin_bytes} is not below switch.buffer_bytes "
                                               f"({buffer_bytes}): no queue gets that deep, nothing is marked")
