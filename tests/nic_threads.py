"""Two ``RoceNic``s driven by one thread each, for tests (no tests here).

A subclass opens ``self.a`` and ``self.b`` (over a socket pair, veths, ...)
and calls ``_init_threads()``; then ``start()`` runs each NIC's event loop in
its own thread, ``call()`` runs a verb in the NIC's thread (a NIC is not
thread-safe), ``wait()`` polls both completion queues, ``close()`` stops and
closes everything.
"""
from __future__ import annotations

import threading
import time


class ThreadedNicPair:
    def _init_threads(self) -> None:
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
        """Run ``fn`` in ``nic``'s thread."""
        with self.lock:
            self.calls[nic].append(fn)

    def start(self):
        for nic in (self.a, self.b):
            t = threading.Thread(target=self._loop, args=(nic,), daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def wait(self, pred, timeout_s=10.0) -> bool:
        """Until ``pred(cq_a, cq_b)`` holds (True) or ``timeout_s`` passes (False)."""
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
