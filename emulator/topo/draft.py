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


def clos_switches(pods: int, leaves: int, spines: int, super_spines: int | None,
                  fabric_link: LinkParams, super_link: LinkParams | None,
                  where: str = "clos") -> tuple[list[DraftNode], list[DraftLink]]:
    """The switch tiers of a (multi-pod) CLOS and the links between them.

    ``leaves`` and ``spines`` are per pod: pod p holds ``leaf{(p-1)L+1..pL}``
    and ``spine{(p-1)S+1..pS}``, every leaf of a pod linked to every spine of
    it. With super spines (``super1..superK``, K a multiple of S), spine j
    of every pod links to every super spine of plane j: super spines
    (j-1)Q+1..jQ, Q = K/S. Nodes: spines, leaves, super spines; links:
    leaf-spine pod by pod and leaf by leaf, then spine-super spine spine by
    spine -- so a leaf's uplinks follow its host ports, a spine's ports face
    its pod's leaves then its plane's super spines, and a super spine's port
    p faces pod p.
    """
    nodes = [DraftNode(f"spine{j}", "spine", f"{where}.spines") for j in range(1, pods * spines + 1)]
    nodes += [DraftNode(f"leaf{k}", "leaf", f"{where}.leaves") for k in range(1, pods * leaves + 1)]
    links = [DraftLink.of(f"leaf{(p * leaves) + k}", f"spine{(p * spines) + j}", fabric_link, where)
             for p in range(pods) for k in range(1, leaves + 1) for j in range(1, spines + 1)]
    if super_spines:
        per_plane = super_spines // spines
        nodes += [DraftNode(f"super{m}", "superspine", f"{where}.super_spines")
                  for m in range(1, super_spines + 1)]
        links += [DraftLink.of(f"spine{p * spines + j}", f"super{(j - 1) * per_plane + q}",
                               super_link or fabric_link, where)
                  for p in range(pods) for j in range(1, spines + 1)
                  for q in range(1, per_plane + 1)]
    return nodes, links
