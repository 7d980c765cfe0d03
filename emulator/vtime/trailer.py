"""A frame's arrival time, carried past its end on the veth (``emulator.vtime``).

12 bytes: a magic (so a frame that is not ours -- none should reach a
fabric interface -- is told apart and dropped) and the fabric ns at which
the frame's last bit reaches the far end, big-endian. The receiver strips
it before anything sees the frame (pipeline, NIC, pcap): captures hold the
frames as sent. On a veth tap, Wireshark shows it as an Ethernet trailer.

A frame a bit error hit on its link (``emulator.link_faults``) carries
``BAD_FCS_MAGIC`` instead: veth frames have no FCS, so the trailer says
what the receiver's MAC would have found -- a bad FCS.
"""
from __future__ import annotations

import struct

MAGIC = b"\xfeVT\x01"
BAD_FCS_MAGIC = b"\xfeVT\x81"        # the frame's FCS would not check
TRAILER = struct.Struct(">4sQ")
TRAILER_BYTES = TRAILER.size          # 12


def trailer(arrival_ns: int, bad_fcs: bool = False) -> bytes:
    """The trailer of a frame that arrives at ``arrival_ns``."""
    return TRAILER.pack(BAD_FCS_MAGIC if bad_fcs else MAGIC, arrival_ns)


def arrival_of(frame: bytes) -> int | None:
    """The arrival time a received frame carries, None if it has no trailer."""
    if len(frame) < TRAILER_BYTES:
        return None
    magic, arrival = TRAILER.unpack_from(frame, len(frame) - TRAILER_BYTES)
    return arrival if magic in (MAGIC, BAD_FCS_MAGIC) else None


def bad_fcs(frame: bytes) -> bool:
    """Whether a received frame's trailer says its FCS is bad."""
    return len(frame) >= TRAILER_BYTES and frame[-TRAILER_BYTES:-TRAILER_BYTES + 4] == BAD_FCS_MAGIC
