"""The PM QoS request a fabric holds while it runs (emulator/net/wake_latency.py)."""
from __future__ import annotations

import os
import struct

from emulator.net.wake_latency import WakeLatencyRequest


def test_hold_writes_the_latency_and_keeps_the_file_open_until_release(tmp_path):
    dev = tmp_path / "cpu_dma_latency"
    dev.write_bytes(b"")
    req = WakeLatencyRequest(latency_us=7, device=str(dev))
    assert req.hold() and req.held
    assert struct.unpack("=i", dev.read_bytes()) == (7,)
    fd = req._fd
    assert req.hold() and req._fd == fd          # held once: no second request
    assert os.fstat(fd)                          # the request lives while the file is open
    req.release()
    assert not req.held
    try:
        os.fstat(fd)
        assert False, "released: the file is closed"
    except OSError:
        pass
    req.release()                                # twice: nothing


def test_without_the_device_nothing_is_held_and_nothing_fails(tmp_path):
    req = WakeLatencyRequest(device=str(tmp_path / "missing"))
    assert not req.hold() and not req.held
    req.release()
