"""A minimal libpcap writer: nanosecond timestamps, Ethernet link type.

One file per switch port holds every frame received and sent on it, so that
Wireshark/tshark (RoCEv2 on UDP 4791, PFC as MAC control) and Scapy's
``rdpcap`` read the run. Records are buffered; ``flush`` is called by the
switch every second and at exit.
"""
from __future__ import annotations

import struct
import time

PCAP_MAGIC_NS = 0xA1B23C4D      # nanosecond-resolution variant of 0xA1B2C3D4
LINKTYPE_ETHERNET = 1
SNAPLEN = 65535
_GLOBAL = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")


class PcapWriter:
    """Frames with ``time.monotonic_ns()`` stamps, written as Unix-epoch times."""

    def __init__(self, path, buffering: int = 1 << 20):
        self.path = str(path)
        self._f = open(path, "wb", buffering=buffering)
        self._f.write(_GLOBAL.pack(PCAP_MAGIC_NS, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET))
        # monotonic -> epoch, fixed once so that intervals stay exact.
        self._offset_ns = time.time_ns() - time.monotonic_ns()
        self.frames = 0

    def write(self, monotonic_ns: int, frame) -> None:
        sec, nsec = divmod(monotonic_ns + self._offset_ns, 1_000_000_000)
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
