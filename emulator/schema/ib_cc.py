"""InfiniBand congestion control as an experiment file gives it (``ib_cc:``;
IBA Vol. 1, annex A10): the switches' FECN marking and the sources' CCTI
machine (``emulator.nic.ib_cc``). Off unless ``enabled``; an InfiniBand fabric
then relies on credits alone, as a subnet without a congestion-control
manager does.

```yaml
ib_cc:
  enabled: true
  threshold_packets: 8         # a switch port marks FECN on packets finding >= this many queued,
  marking_rate: 10             # one such packet in marking_rate + 1 (our default)
  ccti_increase: 1             # per BECN (OpenSM's default)
  ccti_timer: 150              # x 1.024 us of fabric time between CCTI decrements (OpenSM's)
  ccti_min: 0
  cct: [[0, 0], [2, 1], ...]   # (shift, multiplier) entries; default: nic.ib_cc's 128-entry table
```
"""
from __future__ import annotations

from typing import Optional

from pydantic import Field, model_validator

from emulator.schema.load import StrictSpec


class IbCcSpec(StrictSpec):
    enabled: bool = False
    threshold_packets: int = Field(8, ge=1, le=(1 << 19) - 1)    # ib.p4's cc_threshold: bit<19>
    marking_rate: int = Field(10, ge=0, le=0xFFFF)     # eligible packets between two marks (ours)
    ccti_increase: int = Field(1, ge=1, le=255)
    ccti_timer: int = Field(150, ge=1, le=65535)
    ccti_min: int = Field(0, ge=0, le=255)
    cct: Optional[list[tuple[int, int]]] = None

    @model_validator(mode="after")
    def _params(self):
        self.agent_params()                 # the CCT's entries and ccti_min against it
        return self

    def agent_params(self) -> dict:
        """The agent config's ``nic.ib_cc`` dict (``nic.ib_cc.IbCcParams`` keys): the
        timer stays in the spec's units (fabric time); the NIC's ``dilation``
        makes it wall (``agents.make``)."""
        from emulator.nic.ib_cc import IbCcParams
        keys = {"ccti_increase": self.ccti_increase, "ccti_timer": self.ccti_timer,
                "ccti_min": self.ccti_min}
        if self.cct is not None:
            keys["cct"] = [list(e) for e in self.cct]
        try:
            IbCcParams.from_config(keys)
        except (TypeError, ValueError) as e:
            raise ValueError(str(e)) from None
        return keys
