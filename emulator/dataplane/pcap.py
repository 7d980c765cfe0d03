"""A minimal libpcap writer: nanosecond timestamps, Ethernet link type; and
its InfiniBand variant, ``IbPcapWriter``.

One file per switch port holds every frame received and sent on it, so that
Wireshark/tshark (RoCEv2 on UDP 4791, PFC as MAC control) and Scapy's
``rdpcap`` read the run. Records are buffered; ``flush`` is called by the
switch every second and at exit.
"""
from __future__ import annotations

import struct

from emulator.clock import MONOTONIC, Clock
from emulator.wire import ETH_P_IB_LINK

PCAP_MAGIC_NS = 0xA1B23C4D      # nanosecond-resolution variant of 0xA1B2C3D4
LINKTYPE_ETHERNET = 1
SNAPLEN = 65535
_GLOBAL = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")


class PcapWriter:
    """Frames stamped with ``clock.now_ns()``, written as Unix-epoch times."""

    def __init__(self, path, clock: Clock = MONOTONIC, buffering: int = 1 << 20,
                 linktype: int = LINKTYPE_ETHERNET):
        self.path = str(path)
        self._f = open(path, "wb", buffering=buffering)
        self._f.write(_GLOBAL.pack(PCAP_MAGIC_NS, 2, 4, 0, 0, SNAPLEN, linktype))
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

    def _record(self, now_ns: int, data) -> None:
        sec, nsec = divmod(now_ns + self._offset_ns, 1_000_000_000)
        self._f.write(_RECORD.pack(sec, nsec, len(data), len(data)))
        self._f.write(data)
        self.frames += 1

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


# --- InfiniBand -----------------------------------------------------------------
# tcpdump.org's LINKTYPE_INFINIBAND (247) is not read by Wireshark 4.0 (Debian
# 12's: "network type 247 unknown or unsupported") and has no place for link
# packets. Endace's ERF, inside pcap as LINKTYPE_ERF, has both: a record type
# for InfiniBand data packets (from the LRH) and one for link packets (flow
# control), and every Wireshark since 1.x dissects them as InfiniBand.
LINKTYPE_ERF = 197
ERF_TYPE_INFINIBAND = 21
ERF_TYPE_INFINIBAND_LINK = 25
_ERF = struct.Struct("<Q")                 # timestamp: seconds << 32 | binary fraction
_ERF_REST = struct.Struct("!BBHHH")        # type, flags, rlen, lctr, wlen
_ERF_HDR_BYTES = _ERF.size + _ERF_REST.size
# Wireshark's ERF dissector gives the InfiniBand-link dissector a record's
# bytes less two (as if a CRC followed), and a 6-byte flow-control packet
# is then short: two zero bytes follow each link packet in its record.
_LINK_TAIL = b"\0\0"


class IbPcapWriter(PcapWriter):
    """InfiniBand packets of a port, carrier frames in (``emulator.wire``'s
    ``ETH_P_IB_DATA``/``ETH_P_IB_LINK`` behind 14 bytes of Ethernet), ERF
    records out: the carrier is stripped, the packet stays as sent."""

    def __init__(self, path, clock: Clock = MONOTONIC, buffering: int = 1 << 20):
        super().__init__(path, clock, buffering, linktype=LINKTYPE_ERF)

    def write(self, now_ns: int, frame) -> None:
        ethertype = (frame[12] << 8) | frame[13]
        packet = bytes(frame[14:])
        if ethertype == ETH_P_IB_LINK:
            erf_type, packet = ERF_TYPE_INFINIBAND_LINK, packet + _LINK_TAIL
        else:
            erf_type = ERF_TYPE_INFINIBAND
        unix_ns = now_ns + self._offset_ns
        sec, nsec = divmod(unix_ns, 1_000_000_000)
        ts = sec << 32 | (nsec << 32) // 1_000_000_000
        rlen = _ERF_HDR_BYTES + len(packet)
        header = _ERF.pack(ts) + _ERF_REST.pack(erf_type, 0, rlen, 0, len(packet))
        self._record(now_ns, header + packet)
