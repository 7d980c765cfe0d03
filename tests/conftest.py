"""Shared test helpers: the project's own runs of its experiments; fixtures and markers
come from the installed pytest plugin, ``emulator.pytest_plugin``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.pytest_plugin import leftovers  # noqa: F401  (the tests' import point)

REPO = Path(__file__).resolve().parents[1]
FABRIC_EMU = [sys.executable, "-m", "emulator.cli"]


NETNS_SKIP_REASON = "needs root to create network namespaces and veth pairs"


def pytest_collection_modifyitems(config, items):
    """Everything under tests/integration, and every test marked ``fabric``
    or ``bmv2`` (the plugin's markers, ``emulator.pytest_plugin``), needs root
    and network namespaces: mark it ``netns`` so that ``make test-fast``
    (``-m "not netns"``) runs the rest as any user. A ``netns`` test skips,
    saying why, where the user is not root."""
    integration = REPO / "tests" / "integration"
    not_root = os.geteuid() != 0
    for item in items:
        if (integration in Path(str(item.fspath)).parents
                or item.get_closest_marker("fabric") or item.get_closest_marker("bmv2")):
            item.add_marker(pytest.mark.netns)
        if not_root and item.get_closest_marker("netns"):
            item.add_marker(pytest.mark.skip(reason=NETNS_SKIP_REASON))


# The D integration tests start each shipped experiment at (no calibration);
# a run that falls behind is raised (``run_raised_while_behind``) and the
# tests assert the final run was not. Chosen so that a 2-core machine with a
# core busy passes at the first run under the verdict's limits (a fresh-clone
# `make test` with one core busy: at 4000 the incasts lost frames in the
# switches, at 10000 the demo's switches were 1.7x their lateness limit).
TEST_START_DILATION = {"demo": 16000, "incast-pfc": 8000, "incast-nopfc": 8000,
                       "incast-dcqcn": 8000, "hol-victim": 8000, "hol-victim-dcqcn": 8000,
                       "fairness": 8000, "sweep-dcqcn": 8000, "allreduce-rail": 20000,
                       "allreduce-rail-congested": 20000, "allreduce-rail-nogdr": 20000,
                       "checkpoint-separate": 20000, "checkpoint-shared": 20000,
                       "pods-incast": 16000, "incast-ib": 8000,
                       "fairness-ib": 8000, "allreduce-rail-ib": 20000,
                       "incast-hpcc": 8000, "hol-victim-hpcc": 8000, "fairness-hpcc": 8000}
# The D the session's earlier runs of a kind ended at: the collective workloads
# share their servers' agents and their load, so once one of them needed a
# higher D on this machine, the next starts there instead of falling behind first.
_SESSION_DILATION: dict[str, float] = {}


def run_shipped(exp, out, **kw) -> dict:
    """Run a shipped experiment: once in virtual time where it keeps it, else
    dilated from its test start D (or what the session learned), raised while behind.
    No PNG figures unless ``plots=True`` (the tests read numbers and CSVs)."""
    from emulator.experiment.dilation import run_raised_while_behind, run_with_dilation
    from emulator.experiment.time_mode import keeps_virtual_time
    kw.setdefault("plots", False)
    if keeps_virtual_time(exp):          # exact: one run, nothing to raise
        return run_with_dilation(exp, out, **kw)
    if exp.spec.dilation != "auto":
        return run_raised_while_behind(exp, out, exp.spec.dilation, **kw)
    kind = "collectives" if exp.workload is not None else exp.name
    start = max(TEST_START_DILATION[exp.name], _SESSION_DILATION.get(kind, 0.0))
    summary = run_raised_while_behind(exp, out, start, **kw)
    if not summary["fell_behind"]:
        _SESSION_DILATION[kind] = max(_SESSION_DILATION.get(kind, 0.0), summary["dilation"])
    return summary


def run_incast_pfc_virtual(out: Path) -> dict:
    """experiments/incast-pfc.yaml in virtual time, with pcaps."""
    from emulator.experiment.dilation import run_with_dilation
    from emulator.experiment.model import experiment_from_dict, read_experiment_data
    path = REPO / "experiments" / "incast-pfc.yaml"
    data = read_experiment_data(path)
    data["time"] = "virtual"
    return run_with_dilation(experiment_from_dict(data, path), out, pcap=True, plots=False)


@pytest.fixture(scope="session")
def incast_pfc_virtual(tmp_path_factory) -> tuple[dict, Path]:
    """One run of ``run_incast_pfc_virtual`` for the session: test_lossless's
    embedded incast under PFC and its pause frames in the pcaps, and
    test_virtual_time's exact run, were the same run three times (virtual
    time: bit for bit), each asserting its part."""
    out = tmp_path_factory.mktemp("incast-pfc-virtual") / "out"
    return run_incast_pfc_virtual(out), out


class SharedRuns:
    """The session's runs that several tests only read: one run per
    experiment as it resolves (its clock decided: ``time: virtual`` and
    ``auto`` that keeps virtual time are the same run), made by the first
    test that asks. Its directory is read-only to every reader: a test that
    writes into a run's directory copies it first."""

    def __init__(self, tmp_path_factory):
        self._tmp = tmp_path_factory
        self._runs: dict[tuple[str, str, bool], tuple[dict, Path]] = {}

    def __call__(self, exp, pcap: bool = False) -> tuple[dict, Path]:
        """(summary, out) of ``exp``'s run by ``run_shipped``."""
        from emulator.experiment.time_mode import planned_target, resolve_time
        resolved = resolve_time(exp, planned_target(exp.spec.target))
        key = (exp.source, resolved.spec.model_dump_json(), pcap)
        if key not in self._runs:
            out = self._tmp.mktemp(f"shared-{exp.name}") / "out"
            self._runs[key] = (run_shipped(exp, out, pcap=pcap), out)
        return self._runs[key]


@pytest.fixture(scope="session")
def shared_run(tmp_path_factory) -> SharedRuns:
    return SharedRuns(tmp_path_factory)


def shipped(name: str, sets=(), **data):
    """The ``Experiment`` of experiments/NAME.yaml with ``sets`` (``--set``
    strings) and then the top-level keys ``data`` applied."""
    from emulator.experiment.model import experiment_from_dict, read_experiment_data
    from emulator.experiment.overrides import apply_sets
    path = REPO / "experiments" / f"{name}.yaml"
    return experiment_from_dict(apply_sets(read_experiment_data(path), list(sets)) | data, path)


def python_c(code: str, cwd=REPO, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -c code`` in a fresh interpreter (the venv's): what gets
    imported, from nothing imported yet."""
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def run_cli(*args, timeout=300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*FABRIC_EMU, *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, **kw)


@pytest.fixture
def target(fabric_target) -> str:
    """The switch target a test runs on: the plugin's ``fabric_target`` (the
    project runs every target, ``--fabric-target all`` in pyproject.toml;
    BMv2 skips, saying why, where it is not installed)."""
    return fabric_target
