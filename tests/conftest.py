"""Shared test helpers: what a run may leave behind, and when Mininet tests can run."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FABRIC_EMU = [sys.executable, "-m", "emulator.cli"]


def mininet_unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root: Mininet builds network namespaces and veths"
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return "Mininet's Python module is not importable (apt-get install mininet; use the make-built venv)"
    if shutil.which("mnexec") is None:
        return "mnexec not on PATH (apt-get install mininet)"
    return None


requires_mininet = pytest.mark.skipif(mininet_unavailable_reason() is not None,
                                      reason=mininet_unavailable_reason() or "")


def pytest_collection_modifyitems(config, items):
    """Everything under tests/integration, and every test marked ``mininet``
    or ``bmv2``, needs root and network namespaces: mark it ``netns`` so
    that ``make test-fast`` (``-m "not netns"``) runs the rest as any user."""
    integration = REPO / "tests" / "integration"
    for item in items:
        if (integration in Path(str(item.fspath)).parents
                or item.get_closest_marker("mininet") or item.get_closest_marker("bmv2")):
            item.add_marker(pytest.mark.netns)


def leftovers() -> dict[str, list]:
    """Fabric interfaces and emulator processes that exist right now."""
    from emulator.net.clean import _own_processes, fabric_interfaces
    return {"interfaces": fabric_interfaces(), "processes": _own_processes()}


def run_cli(*args, timeout=300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*FABRIC_EMU, *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, **kw)


def bmv2_unavailable_reason() -> str | None:
    from emulator.net.bmv2 import bmv2_unavailable_reason as reason
    return reason()


@pytest.fixture(params=["embedded", "bmv2"])
def target(request) -> str:
    """Run the test on each switch target; BMv2 where it is installed (the Vagrant lab)."""
    if request.param == "bmv2" and bmv2_unavailable_reason():
        pytest.skip(f"BMv2 target: {bmv2_unavailable_reason()}")
    return request.param
