"""The pytest plugin (entry point ``pytest11``: active wherever the package is installed).

Fixtures:
  * ``fabric_factory(source, target=None, dilation=...)``: a live ``emulator.Fabric``
    (topology or experiment: file, dict or ``Experiment``), torn down after the test;
  * ``run_experiment(source, set=None, dilation=None)``: runs it into the test's
    ``tmp_path`` and returns an ``emulator.Result``; a numeric D is raised while
    the run falls behind (at most twice), ``auto`` uses the machine's cache;
  * ``fabric_target``: the switch target(s) of ``--fabric-target``
    (``embedded``, ``bmv2``, ``auto``: BMv2 where installed, or ``all``: both,
    BMv2 skipped with its reason where it is absent) -- a test that uses it
    runs once per target;
  * ``no_leftovers``: fails the test if it left fabric interfaces or emulator
    processes behind.

Markers: ``fabric`` (root and Mininet: skipped, saying why, where absent) and
``bmv2`` (also BMv2). A test using ``fabric_factory`` or ``run_experiment`` is
marked ``fabric`` by itself.

    @pytest.mark.fabric
    def test_lossless(run_experiment):
        assert run_experiment("my-incast.yaml").lossless_drops() == 0
"""
from __future__ import annotations

# Deferred imports: pytest loads this plugin in every session wherever the package
# is installed: the fixtures import the emulator only when a test uses them.

import pytest

TARGET_CHOICES = ("embedded", "bmv2", "auto", "all")
_FABRIC_FIXTURES = {"fabric_factory", "run_experiment"}


def pytest_addoption(parser):
    group = parser.getgroup("fabric-emu")
    group.addoption("--fabric-target", choices=TARGET_CHOICES, default="embedded",
                    help="switch target(s) for tests using the fabric_target fixture "
                         "(all: embedded and bmv2; default: embedded)")


def pytest_configure(config):
    config.addinivalue_line("markers", "fabric: needs root and Mininet (real namespaces, veths)")
    config.addinivalue_line("markers", "bmv2: needs BMv2 (simple_switch_grpc)")


def mininet_unavailable_reason() -> str | None:
    """Why a fabric cannot be built here (None: it can): the runner's own check."""
    from emulator.net.environment import environment_problem
    return environment_problem()


def bmv2_unavailable_reason() -> str | None:
    from emulator.net.bmv2 import bmv2_unavailable_reason as reason
    return reason()


def pytest_generate_tests(metafunc):
    if "fabric_target" in metafunc.fixturenames:
        choice = metafunc.config.getoption("--fabric-target")
        targets = {"all": ["embedded", "bmv2"], "auto": ["auto"]}.get(choice, [choice])
        metafunc.parametrize("fabric_target", targets, indirect=True)


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & _FABRIC_FIXTURES and not item.get_closest_marker("fabric"):
            item.add_marker(pytest.mark.fabric)


def pytest_runtest_setup(item):
    if item.get_closest_marker("fabric") or item.get_closest_marker("bmv2"):
        reason = mininet_unavailable_reason()
        if reason:
            pytest.skip(reason)
    if item.get_closest_marker("bmv2"):
        reason = bmv2_unavailable_reason()
        if reason:
            pytest.skip(f"BMv2 target: {reason}")


@pytest.fixture
def fabric_target(request) -> str:
    """The switch target this test runs on (see ``--fabric-target``)."""
    target = getattr(request, "param", request.config.getoption("--fabric-target"))
    if target == "auto":
        return "embedded" if bmv2_unavailable_reason() else "bmv2"
    if target == "bmv2" and bmv2_unavailable_reason():
        pytest.skip(f"BMv2 target: {bmv2_unavailable_reason()}")
    return target


@pytest.fixture
def fabric_factory(tmp_path):
    """``fabric_factory(source, target=None, dilation="auto", **kw)`` -> a live
    ``emulator.Fabric``, up now and torn down after the test."""
    from emulator.live import Fabric
    up = []

    def make(source, target=None, dilation="auto", **kw):
        fab = Fabric(source, target=target, dilation=dilation,
                     out=kw.pop("out", tmp_path / f"fabric{len(up)}"), **kw)
        fab.__enter__()
        up.append(fab)
        return fab

    yield make
    for fab in reversed(up):
        fab.__exit__(None, None, None)


@pytest.fixture
def run_experiment(tmp_path):
    """``run_experiment(source, set=None, dilation=None, target=None, pcap=False,
    plots=False)`` -> ``emulator.Result``.

    ``source``: an experiment file, a dict shaped like one, or an
    ``Experiment``. A numeric D (the experiment's, or ``dilation``) is raised
    while the run falls behind (``run_raised_while_behind``, at most twice):
    the result is from a run that kept up unless the machine cannot. What
    keeps virtual time (``time: auto`` or ``virtual``, no ``dilation`` given)
    runs once, in virtual time: exact, nothing to raise. The run draws its
    PNG figures only with ``plots=True`` (a test reads numbers: ~1 s of a
    small run's wall time and a third of its CPU go to drawing them)."""
    from rich.console import Console

    from emulator.api import Result, as_experiment
    from emulator.experiment.dilation import run_raised_while_behind, run_with_dilation
    from emulator.experiment.time_mode import keeps_virtual_time
    runs = []

    def run(source, set=None, dilation=None, target=None, pcap=False, plots=False):
        exp = as_experiment(source, set=set, target=target)
        d = exp.spec.dilation if dilation is None else dilation
        out = tmp_path / f"{exp.name}-{len(runs)}"
        console = Console(stderr=True)
        if dilation is None and keeps_virtual_time(exp):     # once: nothing to raise
            summary = run_with_dilation(exp, out, console, pcap=pcap, plots=plots)
        elif d == "auto":
            summary = run_with_dilation(exp, out, console, pcap=pcap, dilation="auto",
                                        plots=plots)
        else:
            summary = run_raised_while_behind(exp, out, float(d), console, pcap=pcap,
                                              plots=plots)
        runs.append(out)
        return Result(summary, out)

    return run


def leftovers() -> dict[str, list]:
    """Fabric interfaces and emulator processes that exist right now."""
    from emulator.net.clean import _own_processes, fabric_interfaces
    return {"interfaces": fabric_interfaces(), "processes": _own_processes()}


@pytest.fixture
def no_leftovers():
    """Fails the test if it left fabric interfaces or emulator processes behind
    (and does not start it where an earlier one did)."""
    before = leftovers()
    if before != {"interfaces": [], "processes": []}:
        pytest.fail(f"an earlier test or run left these behind: {_named(before)}")
    yield
    left = leftovers()
    assert left == {"interfaces": [], "processes": []}, f"left behind: {_named(left)}"


def _named(left: dict[str, list]) -> dict[str, list]:
    """``leftovers()`` with each process's command line beside its pid."""
    def cmdline(pid: int) -> str:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            return "(gone)"
    return {**left, "processes": [f"{pid}: {cmdline(pid)}" for pid in left["processes"]]}
