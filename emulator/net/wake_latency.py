"""Keep the CPUs out of deep idle while a fabric runs (Linux PM QoS).

Every switch and NIC sleeps in ``select`` until its next frame or departure
and must wake on time: its lateness is the run's fidelity. An idle CPU that
halted takes long to come back -- in this project's VM (cpuidle driver
``haltpoll`` with polling off) a 300 us ``select`` timeout returned 56 us late
on an idle machine (timer slack 1 us); with a PM QoS request of 0 us held,
16 us. The request is the kernel's interface for latency-sensitive
programs: write a 32-bit latency in us to ``/dev/cpu_dma_latency`` and
keep the file open; the kernel drops the request when the file is closed,
so a run killed by SIGKILL leaves no setting behind. Measured on the demo
at D = 4000 with one process of switches and one of agents (2-core VM,
worst lateness ratio, 4 runs each): 0.48-0.75 held, 0.69-1.07 not.

While held, an idle CPU polls instead of halting (on a VM: its vCPU keeps a
host core busy); ``FabricNet`` holds it from bring-up to teardown only.
Where the device is missing or not writable (not root, a container
without it), nothing is held and nothing fails.
"""
from __future__ import annotations

import os
import struct

DEVICE = "/dev/cpu_dma_latency"


class WakeLatencyRequest:
    """``hold()`` the request (True if the kernel took it), ``release()`` it."""

    def __init__(self, latency_us: int = 0, device: str = DEVICE):
        self.latency_us = latency_us
        self.device = device
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def hold(self) -> bool:
        if self._fd is None:
            try:
                fd = os.open(self.device, os.O_WRONLY | os.O_CLOEXEC)
            except OSError:
                return False
            try:
                os.write(fd, struct.pack("=i", self.latency_us))
            except OSError:
                os.close(fd)
                return False
            self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
