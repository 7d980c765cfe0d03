"""The ``qos:`` section of an experiment file: traffic classes, PFC and ECN
(docs/lossless.md). ``emulator.control.qos`` turns it into fabric.p4's
``dscp_to_priority``, ``pfc_config`` and ``ecn_config`` entries. Byte
thresholds are not dilated: a link's bandwidth-delay product in bytes is the
same at rate / D and delay x D."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PositiveInt


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class PfcSpec(_Strict):
    enabled: bool = True
    xoff_bytes: PositiveInt | None = None      # None: control.qos.DEFAULT_XOFF_BYTES
    xon_bytes: PositiveInt | None = None       # None: XOFF - 2 MTU frames
    headroom_bytes: PositiveInt | None = None  # None: sized from each link (see headroom_bytes())
    # How long a pause that fabric.p4 sends on BMv2 lasts unless refreshed
    # (it is refreshed every half of it while the cause lasts; an XON ends
    # it early). The embedded target's traffic manager sends 0xFFFF/XON.
    pause_us: float = Field(20.0, gt=0, le=1000)


class EcnSpec(_Strict):
    enabled: bool = True
    kmin_bytes: PositiveInt = 5_000            # DCQCN paper: 5 KB
    kmax_bytes: PositiveInt = 200_000          # DCQCN paper: 200 KB
    pmax: float = Field(0.01, ge=0.0, le=1.0)  # DCQCN paper: 1 %


class QosSpec(_Strict):
    roce_dscp: int = Field(26, ge=0, le=63)    # RoCE data, ACK/NAK
    roce_priority: int = Field(3, ge=0, le=7)  # the lossless class
    cnp_dscp: int = Field(48, ge=0, le=63)
    cnp_priority: int = Field(6, ge=0, le=7)
    pfc: PfcSpec = PfcSpec()
    ecn: EcnSpec = EcnSpec()
