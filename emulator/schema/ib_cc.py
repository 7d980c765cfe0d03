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
  cct: [[0, 0], [2, 1], ...]   # (shift, multiplier) entries; default: DEFAULT_CCT, 128 entries
```
"""
from __future__ import annotations

from typing import Annotated, Optional

from pydantic import Field, model_validator

from emulator.schema.load import FieldError, StrictSpec

CCT_MAX_ENTRIES = 1024           # the spec allows 16384; 1024 is plenty here
# a CCT entry: CCT_Shift (2 bits), CCT_Multiplier (14 bits)
CctEntry = tuple[Annotated[int, Field(ge=0, le=3)], Annotated[int, Field(ge=0, le=0x3FFF)]]
# Ours, not the spec's (OpenSM ships an empty CCT, i.e. CC off): entry i =
# (shift 2, multiplier i), a delay of i/4 packet times (nic.ib_cc)
DEFAULT_CCT: tuple[tuple[int, int], ...] = tuple((2, i) for i in range(128))


class IbCcSpec(StrictSpec):
    enabled: bool = False
    threshold_packets: int = Field(8, ge=1, le=(1 << 19) - 1)    # ib.p4's cc_threshold: bit<19>
    marking_rate: int = Field(10, ge=0, le=0xFFFF)     # eligible packets between two marks (ours)
    # Congestion Setting: CCTI_Increase and CCTI_Min 8 bits, CCTI_Timer 16
    # bits (0 would never let the rate recover)
    ccti_increase: int = Field(1, ge=1, le=255)
    ccti_timer: int = Field(150, ge=1, le=65535)
    ccti_min: int = Field(0, ge=0, le=255)
    # None: DEFAULT_CCT
    cct: Optional[list[CctEntry]] = Field(None, min_length=1, max_length=CCT_MAX_ENTRIES)

    @model_validator(mode="after")
    def _ccti_min_in_table(self):
        n = len(self.table())
        if self.ccti_min >= n:
            raise FieldError("ccti_min", f"must be < the table's {n} entries (got {self.ccti_min})")
        return self

    def table(self) -> tuple[tuple[int, int], ...]:
        """The CCT in force: ``cct``, or ``DEFAULT_CCT``."""
        return DEFAULT_CCT if self.cct is None else tuple(tuple(e) for e in self.cct)
