"""Whether this machine can build a fabric now, each answer in one line.

A run asks before it writes or builds anything (the CLI, the runner,
``FabricNet.start``), ``doctor`` and the pytest plugin ask to report or
skip; so the reasons -- not root, no Mininet, another fabric's interfaces
still there -- are worded here once, as the line the user reads. Callers
look ``check_environment`` up through this module (``environment.check_environment``
or an import at call time), so that tests that patch it here patch every check.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from typing import TYPE_CHECKING

from emulator.errors import EnvironmentProblem

if TYPE_CHECKING:  # pragma: no cover
    from emulator.topo import Fabric


def environment_problem() -> str | None:
    """Why this machine cannot build a fabric, in one line (None: it can)."""
    if os.geteuid() != 0:
        return "building a fabric needs root (network namespaces, veths): run as root or with sudo"
    try:
        import mininet.net  # noqa: F401  (deferred: the probe: can Mininet be imported?)
    except ImportError:
        return ("Mininet's Python module is not importable: run 'make setup' "
                "(apt-get install mininet; the venv sees Debian's python3 packages)")
    if shutil.which("mnexec") is None:
        return "mnexec is not on PATH: apt-get install mininet"
    return None


def check_environment() -> None:
    """Fail early, in one line, when this machine cannot build a fabric."""
    problem = environment_problem()
    if problem:
        raise EnvironmentProblem(problem)


def check_interfaces_free(fabric: "Fabric", existing: Iterable[str]) -> None:
    """Fail, in one line, when one of ``fabric``'s interfaces already exists
    (``existing``: the machine's): another fabric holds it, or a crashed run
    left it."""
    taken = sorted(set(existing) & {p.ifname for n in fabric.nodes
                                    for p in fabric.ports(n.name)})
    if taken:
        raise EnvironmentProblem(
            f"interface {taken[0]} already exists ({len(taken)} of this fabric's): another "
            f"fabric is running, or a crashed run left it (fabric-emu clean removes leftovers)")
