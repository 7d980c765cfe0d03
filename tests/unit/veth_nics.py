"""Two ``RoceNic``s in one test process, each in its own network namespace,
joined by a veth pair (the ``veth`` fixture of test_nic_loopback): real
AF_PACKET frames through the kernel, without agent subprocesses. A NIC's
sockets are opened while its thread is in the namespace (setns applies to
the calling thread only); afterwards they stay bound there. Needs root."""
from __future__ import annotations

import ctypes
import os
import threading
import time
from contextlib import contextmanager

from emulator.agents.nic import RoceNic

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
        return RoceNic(env["dev"][side], MAC[side], IP[side], MAC[peer], rate_bps=rate_bps,
                       mtu_bytes=1024, timer_slack_ns=None, **kw)


class VethPair:
    """NICs ``a`` and ``b`` with one connected QP each, event loops in threads."""

    def __init__(self, env, rate_bps: int = 20_000_000, kw_a=None, kw_b=None, **kw):
        self.a = open_nic(env, "a", rate_bps, **{**kw, **(kw_a or {})})
        try:
            self.b = open_nic(env, "b", rate_bps, **{**kw, **(kw_b or {})})
        except BaseException:
            self.a.close()
            raise
        self.qa = self.a.create_qp(QPN["a"], IP["b"], QPN["b"])
        self.qb = self.b.create_qp(QPN["b"], IP["a"], QPN["a"])
        self.cq = {self.a: [], self.b: []}
        self.calls = {self.a: [], self.b: []}
        self.lock = threading.Lock()
        self.stop = False
        self.threads = []

    def _loop(self, nic):
        while not self.stop:
            nic.run_once(0.005)
            with self.lock:
                self.cq[nic].extend(nic.poll_cq())
                calls, self.calls[nic] = self.calls[nic], []
            for fn in calls:
                fn()

    def call(self, nic, fn):
        """Run ``fn`` in ``nic``'s thread (the NIC is not thread-safe)."""
        with self.lock:
            self.calls[nic].append(fn)

    def start(self):
        for nic in (self.a, self.b):
            t = threading.Thread(target=self._loop, args=(nic,), daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def wait(self, pred, timeout_s=10.0) -> bool:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            with self.lock:
                if pred(self.cq[self.a], self.cq[self.b]):
                    return True
            time.sleep(0.002)
        return False

    def close(self):
        self.stop = True
        for t in self.threads:
            t.join(2)
        self.a.close()
        self.b.close()
