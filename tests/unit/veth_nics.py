"""Two ``RoceNic``s in one test process, each in its own network namespace,
joined by a veth pair (the ``veth`` fixture of test_nic_loopback): real
AF_PACKET frames through the kernel, without agent subprocesses. A NIC's
sockets are opened while its thread is in the namespace (setns applies to
the calling thread only); afterwards they stay bound there. Driven by one
loop on the real clock (``tests.nic_sim``); tests on it assert no rates or
times of the wall clock. Needs root."""
from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager

from tests.nics import roce_nic
from emulator.nic.nic import RoceNic
from emulator.clock import MONOTONIC
from tests.nic_sim import SimNicPair

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)

MAC = {"a": "02:00:00:00:0a:01", "b": "02:00:00:00:0b:01"}
IP = {"a": "10.99.0.1", "b": "10.99.0.2"}
QPN = {"a": 16, "b": 32}


@contextmanager
def netns(name: str):
    """Run the body with this thread in network namespace ``name``."""
    me = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        yield
    finally:
        _libc.setns(me, CLONE_NEWNET)
        os.close(fd)
        os.close(me)


def open_nic(env, side: str, rate_bps: int, **kw) -> RoceNic:
    peer = "b" if side == "a" else "a"
    kw.setdefault("rto_ns", 300_000_000)
    with netns(env["ns"][side]):
        return roce_nic(env["dev"][side], MAC[side], IP[side], MAC[peer], rate_bps=rate_bps,
                       mtu_bytes=1024, timer_slack_ns=None, **kw)


class VethPair(SimNicPair):
    """NICs ``a`` and ``b`` with one connected QP each, one event loop."""

    def __init__(self, env, rate_bps: int = 20_000_000, kw_a=None, kw_b=None, **kw):
        self.a = open_nic(env, "a", rate_bps, **{**kw, **(kw_a or {})})
        try:
            self.b = open_nic(env, "b", rate_bps, **{**kw, **(kw_b or {})})
        except BaseException:
            self.a.close()
            raise
        self.qa = self.a.create_qp(QPN["a"], IP["b"], QPN["b"])
        self.qb = self.b.create_qp(QPN["b"], IP["a"], QPN["a"])
        self._init_loop(MONOTONIC)
