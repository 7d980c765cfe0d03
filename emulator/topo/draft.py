"""The builder's working lists: nodes and links as a topology file names
them, before they are checked and numbered into a ``Fabric``, and the error
context that turns a problem into ``ConfigError("FILE", "field", "reason")``.

Shared by the server-form expansion (``servers.py``) and the builder
(``build.py``), which sits above it.
"""
from __future__ import annotations

from dataclasses import dataclass

from emulator.errors import ConfigError
from emulator.schema.load import join_path
from emulator.schema.topology import LinkParams
from emulator.topo.graph import COMPUTE_PLANE


@dataclass
class DraftNode:
    name: str
    role: str
    where: str                   # field path of the node (errors)
    plane: str = COMPUTE_PLANE   # hosts: set from their leaf when building


@dataclass
class DraftLink:
    a: str
    b: str
    rate_bps: int
    delay_ns: int
    where: str                   # field path of the link (errors)

    @classmethod
    def of(cls, a: str, b: str, params: LinkParams, where: str) -> "DraftLink":
        return cls(a, b, params.rate_bps, params.delay_ns, where)


@dataclass(frozen=True)
class BuildContext:
    """Where errors point: the file, and the path of the topology inside it
    (``topology`` for one embedded in an experiment file, else "")."""
    source: str
    prefix: str

    def path(self, fld: str) -> str:
        return join_path(self.prefix, fld)

    def err(self, fld: str, reason: str) -> ConfigError:
        return ConfigError(self.source, self.path(fld), reason)
