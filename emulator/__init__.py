"""ai-fabric-emulator: a packet-level emulator of RoCEv2 GPU-cluster fabrics.

    import emulator as fe
    exp = fe.load_experiment("experiments/demo.yaml", set={"nic.mtu_bytes": 4096})
    res = fe.run(exp)                         # a Result: res.fct_us(99), res.lossless_drops()
    with fe.Fabric("topologies/clos-2x2.yaml") as fab:
        fab.ping("h1", "h4")

The names are loaded on first use (``emulator.api``, ``emulator.live``):
importing a part of the package does not import the whole.
"""
from __future__ import annotations

from emulator.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "api": ("FlowResult", "Result", "build_experiment", "load_experiment", "load_topology", "run",
            "sweep"),
    "live": ("Fabric",),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, globals(), _EXPORTS)
