"""GPUDirect RDMA on/off for the collective engine.

The engine's slots (``transport.RdmaConn``'s send and receive stages) are
where NCCL keeps its buffers: in GPU memory with GPUDirect RDMA, so the NIC
reads and writes them directly; without it they are host memory, and every
RDMA message from a GPU costs a device-to-host copy before the NIC may send
it, every message into a GPU a host-to-device copy after it has arrived.
The copy model is ``agents.gpudirect.StagingCopies`` (one D2H and one H2D
copy engine per GPU, copies in order, latency + bytes / rate each); the
engine holds the posts and arrivals on its ``TimerHeap`` (``engine.timers``)
until the copies end.
NVLink transfers stay GPU to GPU: never staged.

Per NIC config keys (``experiment/servers.py``, from ``endpoints:``; wall
units, i.e. already dilated: rate / D, latency x D)::

    "gpudirect": false, "staging_rate_bps": 5e6, "staging_latency_ns": 2e7

Absent ``gpudirect`` (no ``endpoints:`` or no ``gpudirect`` in it) means
GPUDirect on: no staging, as before.
"""
from __future__ import annotations

from emulator.agents.gpudirect import StagingCopies


def staging_from_config(nic_cfg: dict) -> StagingCopies | None:
    """The staging copies of one GPU/NIC pair; None with GPUDirect on."""
    if nic_cfg.get("gpudirect") in (None, True):
        return None
    return StagingCopies(False, float(nic_cfg["staging_rate_bps"]),
                         float(nic_cfg["staging_latency_ns"]))
