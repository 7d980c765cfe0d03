"""The experiment file's ``hpcc:`` section (fabric units): HPCC congestion
control, the sources' reaction point (``emulator.nic.hpcc``; Li et al.,
"HPCC: High Precision Congestion Control", SIGCOMM 2019), used when the
experiment says ``cc: hpcc`` -- the switches then write in-band telemetry
into the data packets (``emulator.int_md``) --, and the UDP port the
HPCC-format result files show.

```yaml
cc: hpcc
hpcc:
  eta: 0.95                 # target utilisation (the paper's)
  max_stage: 5              # per-RTT additive increases before a multiplicative one (the paper's)
  expected_flows: 16        # N: W_AI = W_init (1 - eta) / N unless w_ai_bytes is given
                            # (16: a rack's incast; HPCC's ns-3 run.py amounts to N = 125)
  w_ai_bytes: null          # W_AI in bytes; null: from expected_flows
  base_rtt_us: null         # T in fabric us; null: the largest base RTT of the flows (HPCC's GLOBAL_T)
  min_rate_gbps: 0.1        # rate floor (ns-3's MinRate, 100 Mb/s)
  dport: 4791               # what fct.txt / flow.txt show (analysis/fct_analysis.py keeps 100)
```

The same model is the ``hpcc`` part of a NIC's config (``schema.nic``),
with ``base_rtt_us`` filled in by the runner; the NIC makes
``nic.hpcc.HpccParams`` of it (``nic.wall``): T in fabric ns (the clock of
the INT records), the rate floor as a fraction of the line rate.
"""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from emulator.schema.load import StrictSpec
from emulator.wire import ROCEV2_UDP_DPORT


class HpccSpec(StrictSpec):
    eta: float = Field(0.95, gt=0, le=1)
    max_stage: int = Field(5, ge=0)
    w_ai_bytes: Optional[float] = Field(None, gt=0, allow_inf_nan=False)
    expected_flows: int = Field(16, ge=1)
    base_rtt_us: Optional[float] = Field(None, gt=0, allow_inf_nan=False)
    min_rate_gbps: float = Field(0.1, gt=0, allow_inf_nan=False)
    # The UDP dport written in the HPCC-format fct.txt / flow.txt (RoCEv2's,
    # whatever the packets carry): HPCC's analysis/fct_analysis.py keeps only
    # the flows of dport 100 (-t 0) or 200 (-t 1), so 100 lets it read our runs.
    dport: int = Field(ROCEV2_UDP_DPORT, ge=1, le=65535)
