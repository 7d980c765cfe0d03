"""The teardown that overlaps a run's results (``FabricNet.teardown_in_background``).

The switches stop first, in the caller's thread (the results read their
stats); the rest runs in a thread that ``stop`` joins; what it raises comes
out of ``stop`` in the main thread, and the signal handlers are restored
there (Python allows it nowhere else). The real teardown runs in every
integration test; here its thread plumbing, with the steps observed.
"""
from __future__ import annotations

import signal
import threading
from types import SimpleNamespace

import pytest

from emulator.net.fabric import FabricNet
from emulator.topo.build import load_fabric
from tests.conftest import REPO


class Proc:
    """A switch process that records being stopped."""

    def __init__(self, log):
        self.log, self.returncode = log, None

    def poll(self):
        return self.returncode

    def terminate(self):
        self.log.append("switch stopped")
        self.returncode = 0

    def wait(self, timeout=None):
        return self.returncode


def fabric_net(log, teardown):
    fnet = FabricNet(load_fabric(REPO / "topologies" / "clos-2x2.yaml"), "/nonexistent")
    fnet.net = SimpleNamespace(switches=[SimpleNamespace(proc=Proc(log))])
    fnet._teardown = teardown
    return fnet


def test_switches_stop_before_it_returns_and_the_rest_runs_in_a_thread_stop_joins():
    log, release = [], threading.Event()

    def teardown():
        release.wait(5)
        log.append(f"teardown in {threading.current_thread().name}")
    fnet = fabric_net(log, teardown)
    fnet.teardown_in_background()
    assert log == ["switch stopped"]          # stats complete before the results are read
    release.set()
    fnet.stop()
    assert log[:2] == ["switch stopped", "teardown in fabric-teardown"]
    assert fnet._teardown_thread is None


def test_what_the_thread_raises_comes_out_of_stop_and_signals_are_restored():
    def teardown():
        if threading.current_thread() is not threading.main_thread():
            raise OSError("ip link del failed")
    fnet = fabric_net([], teardown)
    before = signal.getsignal(signal.SIGTERM)
    fnet._trap_signals()
    assert signal.getsignal(signal.SIGTERM) is not before
    fnet.teardown_in_background()
    with pytest.raises(OSError, match="ip link del failed"):
        fnet.stop()
    assert signal.getsignal(signal.SIGTERM) is before
    fnet.stop()                                # idempotent: nothing raised twice


def test_a_cluster_tears_down_in_order_before_the_results_are_read():
    # its remote agents' results come back with its teardown (gather): a
    # run that read them first found the other server's flows incomplete
    log = []

    def teardown():
        log.append(f"teardown in {threading.current_thread().name}")
    fnet = fabric_net(log, teardown)
    fnet.cluster = object()
    fnet.teardown_in_background()
    assert log == [f"teardown in {threading.main_thread().name}"] and fnet._teardown_thread is None
    fnet._teardown = lambda: None
    fnet.stop()


def test_the_context_exit_stops_the_switches_before_it_closes_the_controller(monkeypatch):
    # fe.Fabric's, fabric-emu cli's and a cluster's teardown: a P4Runtime
    # client closed while its switch still serves waits ~0.2 s for its
    # stream to end, one switch after another; after the switch, at once
    import emulator.net.fabric as fabric_module
    monkeypatch.setattr(fabric_module, "delete_interfaces", lambda names: None)
    monkeypatch.setattr(fabric_module, "kill_processes", lambda find: None)
    log = []
    fnet = FabricNet(load_fabric(REPO / "topologies" / "clos-2x2.yaml"), "/nonexistent")
    switch = SimpleNamespace(name="leaf1", proc=Proc(log), shell=None, cleanup=lambda: None)
    fnet.net = SimpleNamespace(switches=[switch], hosts=[])
    fnet.controller = SimpleNamespace(close=lambda: log.append("controller closed"))
    fnet.stop()
    assert log == ["switch stopped", "controller closed"] and fnet.net is None
