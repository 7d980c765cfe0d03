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


NETNS_SKIP_REASON = "needs root to create network namespaces and veth pairs"


def pytest_collection_modifyitems(config, items):
    """Everything under tests/integration, and every test marked ``mininet``
    or ``bmv2``, needs root and network namespaces: mark it ``netns`` so
    that ``make test-fast`` (``-m "not netns"``) runs the rest as any user.
    A ``netns`` test skips, saying why, where the user is not root."""
    integration = REPO / "tests" / "integration"
    not_root = os.geteuid() != 0
    for item in items:
        if (integration in Path(str(item.fspath)).parents
                or item.get_closest_marker("mininet") or item.get_closest_marker("bmv2")):
            item.add_marker(pytest.mark.netns)
        if not_root and item.get_closest_marker("netns"):
            item.add_marker(pytest.mark.skip(reason=NETNS_SKIP_REASON))


# The D each shipped experiment ran at before ``dilation: auto``: integration
# tests start there (no calibration) and are raised while the run falls
# behind (``run_raised_while_behind``); they assert the final run was not.
TEST_START_DILATION = {"demo": 10000, "incast-pfc": 4000, "incast-nopfc": 4000,
                       "incast-dcqcn": 4000, "hol-victim": 4000, "hol-victim-dcqcn": 4000,
                       "fairness": 2000, "sweep-dcqcn": 4000, "allreduce-rail": 20000,
                       "allreduce-rail-congested": 20000, "allreduce-rail-nogdr": 20000,
                       "checkpoint-separate": 20000, "checkpoint-shared": 20000}
# The D the session's earlier runs of a kind ended at: the collective workloads
# share their servers' agents and their load, so once one of them needed a
# higher D on this machine, the next starts there instead of falling behind first.
_SESSION_DILATION: dict[str, float] = {}


def run_shipped(exp, out, **kw) -> dict:
    """Run a shipped experiment from its test start D (or what the session
    learned), raised while behind."""
    from emulator.experiment.dilation import run_raised_while_behind
    if exp.spec.dilation != "auto":
        return run_raised_while_behind(exp, out, exp.spec.dilation, **kw)
    kind = "collectives" if exp.workload is not None else exp.name
    start = max(TEST_START_DILATION[exp.name], _SESSION_DILATION.get(kind, 0.0))
    summary = run_raised_while_behind(exp, out, start, **kw)
    if not summary["fell_behind"]:
        _SESSION_DILATION[kind] = max(_SESSION_DILATION.get(kind, 0.0), summary["dilation"])
    return summary


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
