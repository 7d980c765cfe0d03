"""fabric.p4's ECMP hash, which both targets and the results' path model use:
CRC-16/ARC over the ``ecmp_selector`` fields (BMv2's ``crc16``), member =
hash % group size. A fact of the P4 program, so it lives beside its P4Info,
not in a target."""
from __future__ import annotations

import struct


def _crc16_arc_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC16_ARC = _crc16_arc_table()


def crc16_arc(data: bytes) -> int:
    """CRC-16/ARC (poly 0x8005 reflected, init 0): BMv2's ``crc16``."""
    crc = 0
    for b in data:
        crc = (crc >> 8) ^ _CRC16_ARC[(crc ^ b) & 0xFF]
    return crc


def ecmp_hash(src: int, dst: int, proto: int, sport: int, dport: int) -> int:
    """fabric.p4's ecmp_selector hash: crc16 over the selector fields in the
    order the table lists them. Like BMv2, the member is hash % group size,
    so both targets put a flow on the same path (consecutive QP source
    ports alternate between two uplinks)."""
    return crc16_arc(struct.pack("!IIBHH", src, dst, proto, sport, dport))
