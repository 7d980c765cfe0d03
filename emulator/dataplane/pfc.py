"""802.1Qbb priority flow control frames: build, parse, and how long a pause lasts.

A PFC frame is a MAC control frame (ethertype 0x8808, opcode 0x0101) sent
to the reserved multicast 01:80:C2:00:00:01: a 16-bit class-enable vector
(bit i = priority i) and eight 16-bit timers in quanta of 512 bit times at
the link's rate, padded to the 60-byte Ethernet minimum (no FCS on a
socket). Timer 0 for an enabled class means "resume now" (XON).
"""
from __future__ import annotations

import struct

from emulator.wire import (
    ETH_P_PAUSE, MIN_FRAME_BYTES, NUM_PRIORITIES, PFC_DST_MAC, PFC_OPCODE, PFC_QUANTUM_BITS,
)

OPCODE_PFC = PFC_OPCODE       # the name pipeline.py imports
XOFF_QUANTA = 0xFFFF

# Ethernet header, opcode, class-enable vector, one timer per priority: 34 bytes
_PFC = struct.Struct(f"!6s6sHHH{NUM_PRIORITIES}H")
PFC_HEADER_BYTES = _PFC.size


def mac_bytes(mac: str | bytes | int) -> bytes:
    """'02:00:..' / 6 bytes / int -> 6 bytes."""
    if isinstance(mac, bytes):
        if len(mac) != 6:
            raise ValueError(f"a MAC address is 6 bytes, not {len(mac)}")
        return mac
    if isinstance(mac, int):
        return mac.to_bytes(6, "big")
    raw = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    if len(raw) != 6:
        raise ValueError(f"not a MAC address: {mac!r}")
    return raw


def build_pfc_frame(src_mac: bytes, class_enable: int, timers) -> bytes:
    """A 60-byte PFC frame; ``timers`` are the 8 per-priority quanta."""
    body = _PFC.pack(PFC_DST_MAC, src_mac, ETH_P_PAUSE, PFC_OPCODE,
                     class_enable & 0xFF, *timers)
    return body + bytes(MIN_FRAME_BYTES - len(body))


def pause_frame(src_mac: bytes, priority: int, quanta: int) -> bytes:
    """Pause (quanta > 0) or resume (quanta 0) one priority."""
    timers = [0] * NUM_PRIORITIES
    timers[priority] = quanta
    return build_pfc_frame(src_mac, 1 << priority, timers)


def parse_mac_control(frame) -> tuple[int, int, tuple[int, ...]] | None:
    """fabric.p4's parse_mac_control: (opcode, class_enable, 8 timers), or None if too short."""
    if len(frame) < PFC_HEADER_BYTES:
        return None
    _, _, _, opcode, class_enable, *timers = _PFC.unpack_from(frame, 0)
    return opcode, class_enable, tuple(timers)


def pause_ns(quanta: int, rate_bps: int) -> int:
    """Duration of ``quanta`` × 512 bit times at ``rate_bps``, rounded up to whole ns."""
    return -(-quanta * PFC_QUANTUM_BITS * 1_000_000_000 // rate_bps)
