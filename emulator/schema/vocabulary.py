"""The words and defaults a topology file and the resolved fabric share: node
roles and the planes' default prefixes.

It imports nothing, so the file schema (``emulator.schema.topology``) and the
bottom of the topology layer (``emulator.topo.graph``, which re-exports
these) both stand on it without the schema importing the layer above it.
"""
from __future__ import annotations

from typing import Literal

Role = Literal["superspine", "spine", "leaf", "host"]
DEFAULT_HOST_PREFIX = "10.0.0.0/16"       # the compute plane's
DEFAULT_STORAGE_PREFIX = "10.1.0.0/16"
