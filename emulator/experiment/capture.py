"""A run's pcaps as users read them: per port in fabric time, and one capture of the whole run.

The switches write what they see into the run directory: the embedded target
``RUN/<ifname>.pcap`` (every frame received and sent on the port, ns, Unix
epoch wall time: ``emulator.dataplane.pcap``), BMv2 ``RUN/<ifname>_in.pcap``
and ``_out.pcap`` (µs). After the run, ``write_captures`` makes

* ``DIR/pcap/<name>.pcap``: the same frames with fabric-time stamps by
  default -- (wall - t0) / D after the epoch, t0 being the agents' common
  start -- so that Wireshark's times, rates and I/O graphs read as the
  fabric's (a 100 Gbps link shows 100 Gbps); ``time="wall"`` keeps wall
  time. Nanosecond pcap, the source's link type: Ethernet, or on an
  InfiniBand fabric ERF records (``emulator.dataplane.pcap.IbPcapWriter``),
  whose own timestamps are rewritten the same way (Wireshark shows those).
* ``DIR/capture.pcapng``: every port's frames merged in time order, one
  pcapng interface per file named after it (``if_name``; Wireshark's
  ``frame.interface_name``), ns resolution.

Only ``struct`` and ``heapq``: a run's pcaps can be large, and are streamed.
"""
from __future__ import annotations

import heapq
import struct
from pathlib import Path
from typing import Iterator

from emulator.atomic import atomic_open
from emulator.rundir import RawDir, RunDir

PCAP_MAGIC_US, PCAP_MAGIC_NS = 0xA1B2C3D4, 0xA1B23C4D
LINKTYPE_ETHERNET = 1
LINKTYPE_ERF = 197                       # InfiniBand's captures (emulator.dataplane.pcap)
_ERF_TS = struct.Struct("<Q")            # an ERF record's timestamp: seconds << 32 | fraction
_GLOBAL = struct.Struct("<IHHiIII")
_SNAPLEN = 65535


def read_pcap(path: str | Path) -> Iterator[tuple[int, int, bytes]]:
    """(Unix ns, original length, frame) of every record of a libpcap file (µs or ns)."""
    with open(path, "rb") as f:
        head = f.read(24)
        if len(head) < 24:
            return
        magic_le = struct.unpack("<I", head[:4])[0]
        if magic_le in (PCAP_MAGIC_US, PCAP_MAGIC_NS):
            endian = "<"
        elif struct.unpack(">I", head[:4])[0] in (PCAP_MAGIC_US, PCAP_MAGIC_NS):
            endian = ">"
        else:
            raise ValueError(f"{path}: not a libpcap file")
        magic = struct.unpack(endian + "I", head[:4])[0]
        scale = 1000 if magic == PCAP_MAGIC_US else 1
        rec = struct.Struct(endian + "IIII")
        while True:
            h = f.read(16)
            if len(h) < 16:            # a file cut short by a killed switch ends here
                return
            sec, frac, caplen, origlen = rec.unpack(h)
            data = f.read(caplen)
            if len(data) < caplen:
                return
            yield sec * 1_000_000_000 + frac * scale, origlen, data


def pcap_linktype(path: str | Path) -> int:
    """The link type of a libpcap file (its global header's network field)."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24:
        return LINKTYPE_ETHERNET
    endian = "<" if struct.unpack("<I", head[:4])[0] in (PCAP_MAGIC_US, PCAP_MAGIC_NS) else ">"
    return struct.unpack(endian + "I", head[20:24])[0]


def _restamped(data: bytes, ts_ns: int, linktype: int) -> bytes:
    """A record with its own timestamp, if it has one (ERF), set to ``ts_ns``."""
    if linktype != LINKTYPE_ERF or len(data) < _ERF_TS.size:
        return data
    sec, nsec = divmod(ts_ns, 1_000_000_000)
    return _ERF_TS.pack(sec << 32 | (nsec << 32) // 1_000_000_000) + data[_ERF_TS.size:]


def run_pcaps(run_dir: str | Path | RawDir) -> dict[str, Path]:
    """Capture name (the file's stem: ``leaf1-eth1``, ``leaf1-eth1_in``) -> pcap of the run."""
    return RawDir(run_dir).pcaps()


class _Stamp:
    """Wall Unix ns -> the timestamp written: fabric ns after the epoch, or wall."""

    def __init__(self, t0_unix_ns: int, dilation: float, time: str):
        if time not in ("fabric", "wall"):
            raise ValueError("time must be 'fabric' or 'wall'")
        self.t0, self.d, self.fabric = t0_unix_ns, dilation, time == "fabric"

    def __call__(self, wall_ns: int) -> int:
        return max(0, round((wall_ns - self.t0) / self.d)) if self.fabric else wall_ns


def write_pcap(path: Path, records, stamp, linktype: int = LINKTYPE_ETHERNET) -> int:
    n = 0
    with atomic_open(path, "wb", buffering=1 << 20) as f:
        f.write(_GLOBAL.pack(PCAP_MAGIC_NS, 2, 4, 0, 0, _SNAPLEN, linktype))
        for t, origlen, data in records:
            ts = stamp(t)
            sec, nsec = divmod(ts, 1_000_000_000)
            f.write(struct.pack("<IIII", sec, nsec, len(data), origlen))
            f.write(_restamped(data, ts, linktype))
            n += 1
    return n


def _block(btype: int, body: bytes) -> bytes:
    total = 12 + len(body)
    return struct.pack("<II", btype, total) + body + struct.pack("<I", total)


def _option(code: int, value: bytes) -> bytes:
    pad = (-len(value)) % 4
    return struct.pack("<HH", code, len(value)) + value + b"\0" * pad


def _tagged(records, interface: int):
    for t, origlen, data in records:
        yield t, interface, origlen, data


def write_pcapng(path: Path, sources: dict[str, Path], stamp) -> int:
    """Every source's records merged in time order, one interface each (ns resolution)."""
    names = list(sources)
    linktypes = [pcap_linktype(sources[name]) for name in names]
    streams = [_tagged(read_pcap(sources[name]), i) for i, name in enumerate(names)]
    n = 0
    with atomic_open(path, "wb", buffering=1 << 20) as f:
        shb = struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1) + _option(0, b"")
        f.write(_block(0x0A0D0D0A, shb))
        for name, linktype in zip(names, linktypes):
            opts = _option(2, name.encode()) + _option(9, bytes([9])) + _option(0, b"")
            f.write(_block(0x00000001, struct.pack("<HHI", linktype, 0, 0) + opts))
        for t, i, origlen, data in heapq.merge(*streams, key=lambda r: r[0]):
            ts = stamp(t)
            data = _restamped(data, ts, linktypes[i])
            body = struct.pack("<IIIII", i, ts >> 32, ts & 0xFFFFFFFF, len(data), origlen)
            f.write(_block(0x00000006, body + data + b"\0" * ((-len(data)) % 4)))
            n += 1
    return n


def write_captures(rd: RunDir, t0_unix_ns: int, dilation: float,
                   time: str = "fabric") -> dict[str, Path]:
    """``DIR/pcap/*.pcap`` and ``DIR/capture.pcapng`` from the pcaps of the
    run's raw directory (none: nothing)."""
    sources = rd.raw.pcaps()
    if not sources:
        return {}
    stamp = _Stamp(t0_unix_ns, dilation, time)
    rd.pcap_dir.mkdir(parents=True, exist_ok=True)
    for name, src in sources.items():
        write_pcap(rd.port_capture(name), read_pcap(src), stamp, pcap_linktype(src))
    write_pcapng(rd.capture, sources, stamp)
    return {rd.PCAP_DIR: rd.pcap_dir, rd.CAPTURE: rd.capture}


__all__ = ["pcap_linktype", "read_pcap", "run_pcaps", "write_captures", "write_pcap",
           "write_pcapng"]
