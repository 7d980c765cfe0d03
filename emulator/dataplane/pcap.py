"""A minimal libpcap writer: nanosecond timestamps, Ethernet link type.

One file per switch port holds every frame received and sent on it, so that
Wireshark/tshark (RoCEv2 on UDP 4791, PFC as MAC control) and Scapy's
``rdpcap`` read the run. Records are buffered; ``flush`` is called by the
switch every second and at exit.
"""
from __future__ import annotations

import struct

from emulator.clock import MONOTONIC, Clock

PCAP_MAGIC_NS = 0xA1B23C4D      # nanosecond-resolution variant of 0xA1B2C3D4
LINKTYPE_ETHERNET = 1
SNAPLEN = 65535
_GLOBAL = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")


class PcapWriter:
    """Frames stamped with ``clock.now_ns()``, written as Unix-epoch times."""

    def __init__(self, path, clock: Clock = MONOTONIC, buffering: int = 1 << 20):
        self.path = str(path)
        self._f = open(path, "wb", buffering=buffering)
        self._f.write(_GLOBAL.pack(PCAP_MAGIC_NS, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET))
        # clock -> epoch, fixed once so that intervals stay exact.
        self._offset_ns = clock.unix_ns() - clock.now_ns()
        self.frames = 0

    def write(self, now_ns: int, frame) -> None:
        sec, nsec = divmod(now_ns + self._offset_ns, 1_000_000_000)
        n = len(frame)
        caplen = n if n <= SNAPLEN else SNAPLEN
        self._f.write(_RECORD.pack(sec, nsec, caplen, n))
        self._f.write(frame if caplen == n else frame[:caplen])
        self.frames += 1

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()
