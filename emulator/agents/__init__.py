"""RoCEv2 endpoints: packet layers and fast path (``roce``), a software RC
NIC with a verbs-like API (``nic``), and the per-host agent process
(``host``: ``python -m emulator.agents.host CONFIG.json``)."""
