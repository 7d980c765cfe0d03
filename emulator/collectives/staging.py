"""GPUDirect RDMA on/off for the collective engine.

The engine's slots (``transport.RdmaConn``'s send and receive stages) are
where NCCL keeps its buffers: in GPU memory with GPUDirect RDMA, so the NIC
reads and writes them directly; without it they are host memory, and every
RDMA message from a GPU costs a device-to-host copy before the NIC may send
it, every message into a GPU a host-to-device copy after it has arrived.
The copy model is ``agents.gpudirect.StagingCopies`` (one D2H and one H2D
copy engine per GPU, copies in order, latency + bytes / rate each); the
engine holds the posts and arrivals on ``Timers`` until the copies end.
NVLink transfers stay GPU to GPU: never staged.

Per NIC config keys (``experiment/servers.py``, from ``endpoints:``; wall
units, i.e. already dilated: rate / D, latency x D)::

    "gpudirect": false, "staging_rate_bps": 5e6, "staging_latency_ns": 2e7

Absent ``gpudirect`` (no ``endpoints:`` or no ``gpudirect`` in it) means
GPUDirect on: no staging, as before.
"""
from __future__ import annotations

import heapq
import itertools
from typing import Callable

from emulator.agents.gpudirect import StagingCopies


def staging_from_config(nic_cfg: dict) -> StagingCopies | None:
    """The staging copies of one GPU/NIC pair; None with GPUDirect on."""
    if nic_cfg.get("gpudirect") in (None, True):
        return None
    return StagingCopies(False, float(nic_cfg["staging_rate_bps"]),
                         float(nic_cfg["staging_latency_ns"]))


class Timers:
    """Callbacks at wall times (``time.monotonic_ns``), for the engine's loop."""

    def __init__(self):
        self._heap: list = []
        self._seq = itertools.count()      # FIFO among equal times: keeps a conn's order

    def at(self, t_ns: float, fn: Callable, *args) -> None:
        heapq.heappush(self._heap, (t_ns, next(self._seq), fn, args))

    def poll(self, now: int) -> int:
        """Run what is due; return how many ran."""
        n = 0
        h = self._heap
        while h and h[0][0] <= now:
            _, _, fn, args = heapq.heappop(h)
            fn(*args)
            n += 1
        return n

    def next_event_ns(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def idle(self) -> bool:
        return not self._heap
