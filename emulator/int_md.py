"""In-band network telemetry (INT) for HPCC: the one definition of its wire
format, as Scapy layers, and the fast paths that use it.

HPCC (Li et al., SIGCOMM 2019, section 4.1 and figure 5) has every switch on
a data packet's path add what the sender needs to compute its window: the
egress port's queue length, its transmitted-bytes counter, a timestamp and
the link's rate. The INT source (the sending NIC) reserves room for one
record per switch; each switch fills the next one at dequeue; the INT sink
(the receiving NIC) copies the stack into the ACK it returns, which carries
it back without being written to.

Placement follows INT over UDP (INT spec v2.1, section 5.6.2, "INT over
UDP"): a shim between UDP and the BTH, announced by a UDP destination port
of its own (``INT_UDP_DPORT``); the shim keeps the port it displaced
(RoCEv2's 4791). Unlike INT-MD the records do not grow the packet hop by
hop: the source reserves ``max_hops`` of them (the fabric's diameter) and a
switch writes slot ``hop_count``, as the HPCC authors' ns-3 code does
(``IntHeader``: a fixed array of hops and ``nhop``), so a switch never
moves bytes or changes a length. Layout::

    Ether | IPv4 | UDP dport=INT_UDP_DPORT | IntShim | IntHop x max_hops | BTH ...

The ICRC is the one the plain RoCEv2 packet would carry (UDP dport 4791,
lengths without the INT bytes): the sink strips the INT bytes and restores
the packet before it checks the ICRC, as an INT sink restores what the
source changed. Timestamps are fabric nanoseconds (a BMv2 switch converts
its wall-clock microseconds by the ``int_port`` table's factor); rates are
fabric Mbit/s; both counters wrap at 2**32.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from scapy.contrib.roce import BTH
from scapy.fields import BitField, ByteEnumField, ByteField, FieldLenField, PacketListField, ShortField
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

# The constants are wire.py's (the one place; tests/unit/test_roce_layers.py
# checks the lengths against the layers below); importers keep reading them here.
from emulator.wire import (  # noqa: F401
    BTH_BYTES, ETH_HDR_BYTES, ICRC_BYTES, INT_HOP_BYTES, INT_KIND_COLLECT, INT_KIND_ECHO,
    INT_MAX_HOPS, INT_OFFSET, INT_SHIM_BYTES, INT_UDP_DPORT, IPV4_HDR_BYTES, ROCEV2_UDP_DPORT,
    UDP_HDR_BYTES, UDP_OFFSET, int_bytes,
)


class IntHop(Packet):
    """One switch's record (16 bytes)."""
    name = "IntHop"
    fields_desc = [
        BitField("qlen_bytes", 0, 32),      # egress queue of the packet's class, at dequeue
        BitField("tx_bytes", 0, 32),        # bytes the port sent, this packet included (wraps)
        BitField("ts_ns", 0, 32),           # dequeue time, fabric ns (wraps)
        BitField("rate_mbps", 0, 32),       # the port's link rate, fabric Mbit/s
    ]

    def extract_padding(self, s):
        return b"", s


class IntShim(Packet):
    """The shim between UDP and the records (8 bytes)."""
    name = "IntShim"
    fields_desc = [
        ByteEnumField("kind", INT_KIND_COLLECT, {INT_KIND_COLLECT: "collect", INT_KIND_ECHO: "echo"}),
        ByteField("hop_count", 0),                       # records filled
        FieldLenField("max_hops", None, fmt="B", count_of="hops"),   # records present
        ByteField("reserved", 0),
        ShortField("orig_dport", ROCEV2_UDP_DPORT),      # the UDP port the shim displaced
        ShortField("reserved2", 0),
        PacketListField("hops", [], IntHop, count_from=lambda p: p.max_hops),
    ]


def _bind() -> None:
    bind_layers(UDP, IntShim, dport=INT_UDP_DPORT)
    bind_layers(IntShim, BTH)


_bind()


class Hop(NamedTuple):
    """A record as the NIC reads it (the fields of ``IntHop``)."""
    qlen_bytes: int
    tx_bytes: int
    ts_ns: int
    rate_mbps: int


_S_SHIM = struct.Struct("!BBBxH2x")
_S_HOP = struct.Struct("!IIII")
_S_H = struct.Struct("!H")
_IP_LEN = ETH_HDR_BYTES + 2                 # IPv4 total length
_IP_CSUM = ETH_HDR_BYTES + 10
_UDP_DPORT = UDP_OFFSET + 2
_UDP_LEN = UDP_OFFSET + 4
_BTH_ICRC_BYTES = BTH_BYTES + ICRC_BYTES
_EMPTY_HOPS = {n: bytes(n * INT_HOP_BYTES) for n in range(INT_MAX_HOPS + 1)}


def _ipv4_csum_fix(buf: bytearray, old_len: int, new_len: int) -> None:
    """RFC 1624 update of the IPv4 header checksum for a total-length change."""
    c = (buf[_IP_CSUM] << 8 | buf[_IP_CSUM + 1]) ^ 0xFFFF
    c += (old_len ^ 0xFFFF) + new_len
    c = (c & 0xFFFF) + (c >> 16)
    c = (c & 0xFFFF) + (c >> 16)
    c ^= 0xFFFF
    buf[_IP_CSUM] = c >> 8
    buf[_IP_CSUM + 1] = c & 0xFF


def insert(frame, kind: int, max_hops: int, hops: bytes | None = None) -> bytearray:
    """The INT source: ``frame`` (a plain untagged RoCEv2 frame, ICRC and
    all) with a shim and ``max_hops`` records put between UDP and BTH --
    empty records for ``INT_KIND_COLLECT``, ``hops`` (the packed records of a
    received stack, ``hop_count`` = len(hops) // 16 filled) for an echo."""
    if not 0 <= max_hops <= INT_MAX_HOPS:
        raise ValueError(f"max_hops must be 0..{INT_MAX_HOPS}")
    if hops is None:
        body, count = _EMPTY_HOPS[max_hops], 0
    else:
        count = len(hops) // INT_HOP_BYTES
        body = hops + _EMPTY_HOPS[max_hops - count] if count < max_hops else hops[:max_hops * INT_HOP_BYTES]
        count = min(count, max_hops)
    add = INT_SHIM_BYTES + max_hops * INT_HOP_BYTES
    out = bytearray(len(frame) + add)
    out[:INT_OFFSET] = frame[:INT_OFFSET]
    _S_SHIM.pack_into(out, INT_OFFSET, kind, count, max_hops, ROCEV2_UDP_DPORT)
    h = INT_OFFSET + INT_SHIM_BYTES
    out[h:h + len(body)] = body
    out[INT_OFFSET + add:] = frame[INT_OFFSET:]
    old = out[_IP_LEN] << 8 | out[_IP_LEN + 1]
    _S_H.pack_into(out, _IP_LEN, old + add)
    _ipv4_csum_fix(out, old, old + add)
    _S_H.pack_into(out, _UDP_LEN, (out[_UDP_LEN] << 8 | out[_UDP_LEN + 1]) + add)
    _S_H.pack_into(out, _UDP_DPORT, INT_UDP_DPORT)
    return out


class Stripped(NamedTuple):
    frame: bytearray        # the plain RoCEv2 frame the source built
    kind: int
    max_hops: int           # records present
    hops: bytes             # the filled records, packed (hop_count x 16 bytes)


def is_int(frame) -> bool:
    """An untagged IPv4/UDP frame to ``INT_UDP_DPORT``?"""
    return (len(frame) >= INT_OFFSET + INT_SHIM_BYTES and frame[12] == 0x08 and frame[13] == 0x00
            and frame[14] == 0x45 and frame[23] == 17
            and frame[_UDP_DPORT] == INT_UDP_DPORT >> 8 and frame[_UDP_DPORT + 1] == INT_UDP_DPORT & 0xFF)


def strip(frame) -> Stripped | None:
    """The INT sink: the plain frame back (shim and records removed, UDP
    dport and lengths restored, Ethernet padding dropped), the kind and the
    filled records; None if the stack is malformed (more records filled
    than present or present than ``INT_MAX_HOPS``, or the IPv4 packet too
    short for the stack and a BTH, or longer than the frame)."""
    kind, count, max_hops, orig = _S_SHIM.unpack_from(frame, INT_OFFSET)
    add = INT_SHIM_BYTES + max_hops * INT_HOP_BYTES
    end = ETH_HDR_BYTES + (frame[_IP_LEN] << 8 | frame[_IP_LEN + 1])    # without Ethernet padding
    if (count > max_hops or max_hops > INT_MAX_HOPS or end > len(frame)
            or end < INT_OFFSET + add + _BTH_ICRC_BYTES):
        return None
    h = INT_OFFSET + INT_SHIM_BYTES
    hops = bytes(frame[h:h + count * INT_HOP_BYTES])
    out = bytearray(end - add)
    out[:INT_OFFSET] = frame[:INT_OFFSET]
    out[INT_OFFSET:] = frame[INT_OFFSET + add:end]
    old = out[_IP_LEN] << 8 | out[_IP_LEN + 1]
    _S_H.pack_into(out, _IP_LEN, old - add)
    _ipv4_csum_fix(out, old, old - add)
    _S_H.pack_into(out, _UDP_LEN, (out[_UDP_LEN] << 8 | out[_UDP_LEN + 1]) - add)
    _S_H.pack_into(out, _UDP_DPORT, orig)
    return Stripped(out, kind, max_hops, hops)


def unpack_hops(hops: bytes) -> list[Hop]:
    """The records of a stack, first switch first."""
    return [Hop(*_S_HOP.unpack_from(hops, i)) for i in range(0, len(hops), INT_HOP_BYTES)]


def push_hop(frame: bytearray, qlen_bytes: int, tx_bytes: int, ts_ns: int, rate_mbps: int) -> bool:
    """A switch's egress: fill the next record of a collecting stack (the
    frame is changed in place). False, and nothing written, if the stack is
    an echo or full."""
    kind, count, max_hops, _ = _S_SHIM.unpack_from(frame, INT_OFFSET)
    if kind != INT_KIND_COLLECT or count >= max_hops:
        return False
    _S_HOP.pack_into(frame, INT_OFFSET + INT_SHIM_BYTES + count * INT_HOP_BYTES,
                     qlen_bytes & 0xFFFFFFFF, tx_bytes & 0xFFFFFFFF, ts_ns & 0xFFFFFFFF,
                     rate_mbps & 0xFFFFFFFF)
    frame[INT_OFFSET + 1] = count + 1
    return True


assert INT_OFFSET == ETH_HDR_BYTES + IPV4_HDR_BYTES + UDP_HDR_BYTES
