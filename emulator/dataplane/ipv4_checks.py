"""fabric.p4's checks of a received IPv4 frame: is it malformed, and why.

``FabricVerifyChecksum`` (the header checksum) and the malformed-IPv4
checks at the top of ``FabricIngress``, on the raw bytes of an untagged
frame, each giving the ``Malformed`` reason ``malformed_drop_counter``
counts. A module of their own because they are the slow path's first step
and the model the fast path is checked against: ``FabricPipeline.ingress``
inlines the checksum test and the fixed-offset header tests for the frames
its flow cache serves, and calls ``malformed_reason`` for the rest;
``int_stack_malformed`` runs per packet on both paths.
"""
from __future__ import annotations

from emulator.dataplane.malformed import Malformed
from emulator.int_md import INT_HOP_BYTES, INT_MAX_HOPS, INT_OFFSET, INT_SHIM_BYTES, INT_UDP_DPORT
from emulator.wire import (
    BTH_BYTES, ETH_HDR_BYTES, IPV4_HDR_BYTES, ROCEV2_UDP_DPORT, UDP_HDR_BYTES, UDP_OFFSET,
)

IP_PROTO_UDP = 17
# Offsets of an untagged IPv4 frame (emulator/wire.py): the IPv4 header ends
# and UDP starts at L4; the UDP header ends at L4_END.
L4 = UDP_OFFSET
L4_END = UDP_OFFSET + UDP_HDR_BYTES
# Smallest IPv4 total length that carries a UDP header, and UDP + BTH.
IPV4_UDP_BYTES = IPV4_HDR_BYTES + UDP_HDR_BYTES
IPV4_UDP_BTH_BYTES = IPV4_UDP_BYTES + BTH_BYTES


def ipv4_checksum_ok(frame) -> bool:
    """FabricVerifyChecksum: does the header checksum equal csum16 of the rest?

    The 16-bit one's complement sum of the header's words is their sum mod
    0xFFFF (2**16 = 1 mod 0xFFFF), so a right checksum makes the header, read
    as one integer, a multiple of 0xFFFF. BMv2 compares the field with the
    computed csum16, which never is 0xFFFF: that "negative zero" is wrong too.
    """
    return (frame[24] != 0xFF or frame[25] != 0xFF) and int.from_bytes(frame[14:34]) % 0xFFFF == 0


def malformed_reason(frame) -> int:
    """fabric.p4's malformed-IPv4 checks, in its order, on a frame of
    EtherType 0x0800: the ``Malformed`` reason it is dropped for, 0 if none.

    IPv4 options (IHL 6..15) are dropped as unsupported, not parsed: see
    fabric.p4 (RoCEv2 never carries them; UDP and BTH stay at fixed offsets).
    """
    n = len(frame)
    if n < L4:
        return Malformed.IPV4_TRUNCATED
    version_ihl = frame[14]
    if version_ihl >> 4 != 4:
        return Malformed.IPV4_VERSION
    if version_ihl & 0x0F < 5:
        return Malformed.IPV4_IHL
    if version_ihl & 0x0F != 5:
        return Malformed.IPV4_OPTIONS
    total_len = frame[16] << 8 | frame[17]
    # A frame longer than that is legal: Ethernet pads to 60 bytes.
    if total_len < IPV4_HDR_BYTES or total_len > n - ETH_HDR_BYTES:
        return Malformed.IPV4_TOTAL_LENGTH
    if not ipv4_checksum_ok(frame):
        return Malformed.IPV4_CHECKSUM
    if frame[23] == IP_PROTO_UDP:
        # By the total length, not the frame: padding is no UDP header.
        if total_len < IPV4_UDP_BYTES:
            return Malformed.UDP_TRUNCATED
        dport = frame[36] << 8 | frame[37]
        if dport == ROCEV2_UDP_DPORT and total_len < IPV4_UDP_BTH_BYTES:
            return Malformed.BTH_TRUNCATED
        if dport == INT_UDP_DPORT and int_stack_malformed(frame, total_len):
            return Malformed.INT_STACK
    return 0


def int_stack_malformed(frame, total_len: int) -> bool:
    """fabric.p4's INT check on a UDP datagram to INT_UDP_DPORT of IPv4
    total length ``total_len``: the shim does not fit, or it says more
    records are present than the stack holds or filled than present, or
    they and a BTH do not fit."""
    if total_len < IPV4_UDP_BYTES + INT_SHIM_BYTES:
        return True
    count, max_hops = frame[INT_OFFSET + 1], frame[INT_OFFSET + 2]
    return (max_hops > INT_MAX_HOPS or count > max_hops
            or total_len < IPV4_UDP_BYTES + INT_SHIM_BYTES + max_hops * INT_HOP_BYTES + BTH_BYTES)

