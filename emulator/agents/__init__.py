"""RoCEv2 endpoints: packet layers and fast path (``roce``), a software RC
NIC with a verbs-like API, PFC and CNPs (``nic``), the DCQCN reaction
point (``dcqcn``), and the per-host agent process
(``host``: ``python -m emulator.agents.host CONFIG.json``)."""
