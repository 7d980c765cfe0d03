"""The processes that run NICs (``emulator.nic``): the per-host agent
(``host``: ``python -m emulator.agents.host CONFIG.json``), agent packs,
DPU/plain-NIC endpoints and GPUDirect staging."""
