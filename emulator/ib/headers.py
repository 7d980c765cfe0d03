"""InfiniBand packets on a veth: LRH, link flow-control packets, ICRC, VCRC
and the carrier frame (IBA Vol. 1, release 1.4, chapter 7).

* ``LRH`` (7.7): the Local Route Header, 8 bytes, on every packet of an
  InfiniBand subnet: VL, LVer, SL, LNH, DLID, PktLen, SLID. ``LNH`` says what
  follows: ``IBA_LOCAL`` a BTH (scapy.contrib.roce's, the same transport
  headers as RoCE), ``IBA_GLOBAL`` a GRH then the BTH. A built ``LRH`` fills
  ``pktlen`` (4-byte words from the LRH through the ICRC), writes the ICRC
  in the BTH's trailer and appends the VCRC.
* ICRC (7.8.1): CRC-32 (zlib's) over the packet from the LRH through the
  payload, with the fields a switch may change replaced by ones: the LRH's
  VL (switches remap SL to VL per hop), the BTH's Resv8a byte (FECN, BECN
  and 6 reserved bits); stored little-endian, as ``emulator.nic.roce``
  and the Linux rxe driver store RoCE's.
* VCRC (7.8.2): CRC-16 (polynomial 0x100B, seed 0xFFFF, inverted, the
  ICRC's bit order) over every byte from the LRH through the ICRC; each hop
  recomputes it (the VL changed). 2 bytes, little-endian like the ICRC.
* ``IBFlowControl`` (7.9.4): the link packet a receiver sends per data VL:
  Op (normal 0, init 1), FCTBS (total blocks sent, mod 4096), VL, FCCL
  (credit limit, mod 4096) and LPCRC (the VCRC's CRC over its 4 bytes,
  stored low byte first as the VCRC and the ICRC are).
* Carrier: a veth carries Ethernet frames, so each InfiniBand packet rides
  behind a 14-byte Ethernet header whose type stands for its start
  delimiter (``emulator.wire.ETH_P_IB_DATA`` / ``ETH_P_IB_LINK``). The
  carrier is not InfiniBand: the capture writer strips it
  (``emulator.dataplane.pcap.IbPcapWriter``).
"""
from __future__ import annotations

import struct
import zlib

import anycrc
from scapy.contrib.roce import BTH, GRH
from scapy.fields import BitEnumField, BitField, FCSField, XLEShortField, XShortField
from scapy.layers.l2 import Ether
from scapy.packet import Packet, bind_layers

from emulator.wire import (
    BTH_BYTES, ETH_HDR_BYTES, ETH_P_IB_DATA, ETH_P_IB_LINK, IB_FC_PACKET_BYTES, Framing,
    layer_len_bytes,
)

LNH_RAW = 0
LNH_IP = 1
LNH_IBA_LOCAL = 2             # BTH follows
LNH_IBA_GLOBAL = 3            # GRH, then BTH
_LNH_NAMES = {LNH_RAW: "Raw", LNH_IP: "IP", LNH_IBA_LOCAL: "IBA local", LNH_IBA_GLOBAL: "IBA global"}

FC_OP_NORMAL = 0
FC_OP_INIT = 1

ICRC_BYTES = 4
VCRC_BYTES = 2
_GRH_BYTES = 40


# ------------------------------------------------------------------ CRC-16

# The VCRC's polynomial is no other protocol's, so no standard-library CRC
# computes it; a byte-wise table in Python takes ~40 us for a 1 KiB packet --
# more than a switch's whole per-packet work. anycrc computes any CRC model
# in C (0.2 us); tests keep it equal to the table-driven definition.
_VCRC = anycrc.CRC(width=16, poly=0x100B, init=0xFFFF, refin=True, refout=True, xorout=0xFFFF)


def vcrc(data) -> int:
    """The IBA VCRC/LPCRC of ``data`` (bytes-like): CRC-16, polynomial
    0x100B, seed 0xFFFF, LSB first, result inverted (IBA 7.8.2)."""
    return _VCRC.calc(data)


# ------------------------------------------------------------------ ICRC

def _bth_offset(packet) -> int:
    lnh = packet[1] & 0x03
    if lnh == LNH_IBA_LOCAL:
        return 8
    if lnh == LNH_IBA_GLOBAL:
        return 8 + _GRH_BYTES
    raise ValueError(f"LNH {lnh} ({_LNH_NAMES[lnh]}): no BTH, no ICRC")


def ib_icrc(packet) -> int:
    """ICRC of an InfiniBand packet from its LRH (``packet`` ends with its
    ICRC and VCRC, which are left out)."""
    p = bytearray(packet[:len(packet) - ICRC_BYTES - VCRC_BYTES])
    p[0] |= 0xF0                           # LRH VL
    if p[1] & 0x03 == LNH_IBA_GLOBAL:      # GRH: traffic class, flow label, hop limit
        p[8] |= 0x0F
        p[9] = p[10] = p[11] = 0xFF
        p[15] = 0xFF
    p[_bth_offset(p) + 4] = 0xFF           # BTH Resv8a: FECN, BECN, resv6
    return zlib.crc32(p)


def seal(packet) -> bytearray:
    """``packet`` (from its LRH, ICRC and VCRC bytes present) with both
    computed: what a sender does once and ``reseal_vcrc`` every hop."""
    p = bytearray(packet)
    end = len(p) - VCRC_BYTES
    struct.pack_into("<I", p, end - ICRC_BYTES, ib_icrc(p))
    struct.pack_into("<H", p, end, vcrc(memoryview(p)[:end]))
    return p


def reseal_vcrc(packet: bytearray) -> bytearray:
    """Recompute the VCRC in place (a switch changed the VL)."""
    end = len(packet) - VCRC_BYTES
    struct.pack_into("<H", packet, end, vcrc(memoryview(packet)[:end]))
    return packet


def check_crcs(packet) -> tuple[bool, bool]:
    """(ICRC good, VCRC good) of a received packet."""
    end = len(packet) - VCRC_BYTES
    if end - ICRC_BYTES < 8 + 12:
        return False, False
    (got_icrc,) = struct.unpack_from("<I", packet, end - ICRC_BYTES)
    (got_vcrc,) = struct.unpack_from("<H", packet, end)
    try:
        icrc_ok = got_icrc == ib_icrc(packet)
    except ValueError:
        icrc_ok = False
    return icrc_ok, got_vcrc == vcrc(memoryview(packet)[:end])


# ------------------------------------------------------------------ Scapy layers

class LRH(Packet):
    """Local Route Header (IBA 7.7). Built, it seals the packet (``seal``)."""
    name = "LRH"
    fields_desc = [
        BitField("vl", 0, 4),
        BitField("lver", 0, 4),
        BitField("sl", 0, 4),
        BitField("rsvd2", 0, 2),
        BitEnumField("lnh", LNH_IBA_LOCAL, 2, _LNH_NAMES),
        XShortField("dlid", 0),
        BitField("rsvd5", 0, 5),
        BitField("pktlen", None, 11),       # 4-byte words, LRH through ICRC
        XShortField("slid", 0),
        FCSField("vcrc", None, fmt="<H"),   # the packet's last 2 bytes
    ]

    def do_build_payload(self):
        # scapy's BTH computes a RoCE ICRC (over IP and UDP) when its icrc is
        # None, and warns under an LRH; ours is written by post_build.
        bth = self.getlayer(BTH)
        if bth is None or bth.icrc is not None:
            return super().do_build_payload()
        bth.icrc = 0
        try:
            return super().do_build_payload()
        finally:
            bth.icrc = None

    def post_build(self, p, pay):
        p += pay                            # pay ends with the VCRC's 2 placeholder bytes
        if self.pktlen is None:
            words = (len(p) - VCRC_BYTES) // 4
            p = p[:4] + struct.pack("!H", (p[4] & 0xF8) << 8 | words) + p[6:]
        if self.lnh not in (LNH_IBA_LOCAL, LNH_IBA_GLOBAL):
            return p if self.vcrc is not None else bytes(reseal_vcrc(bytearray(p)))
        bth = self.getlayer(BTH)
        if bth is not None and bth.icrc is not None:     # an ICRC given: keep it
            return p if self.vcrc is not None else bytes(reseal_vcrc(bytearray(p)))
        sealed = seal(p)
        if self.vcrc is not None:
            struct.pack_into("<H", sealed, len(sealed) - VCRC_BYTES, self.vcrc)
        return bytes(sealed)


class IBFlowControl(Packet):
    """A link flow-control packet (IBA 7.9.4, figure 59): 6 bytes."""
    name = "IB flow control"
    fields_desc = [
        BitEnumField("op", FC_OP_NORMAL, 4, {FC_OP_NORMAL: "normal", FC_OP_INIT: "init"}),
        BitField("fctbs", 0, 12),
        BitField("vl", 0, 4),
        BitField("fccl", 0, 12),
        XLEShortField("lpcrc", None),      # stored as the VCRC and ICRC are: low byte first
    ]

    def post_build(self, p, pay):
        if self.lpcrc is None:
            p = p[:4] + struct.pack("<H", vcrc(p[:4]))
        return p + pay


bind_layers(LRH, BTH, lnh=LNH_IBA_LOCAL)
bind_layers(LRH, GRH, lnh=LNH_IBA_GLOBAL)
bind_layers(Ether, LRH, type=ETH_P_IB_DATA)
bind_layers(Ether, IBFlowControl, type=ETH_P_IB_LINK)

LRH_BYTES = layer_len_bytes(LRH, exclude=("vcrc",))        # 8
FC_PACKET_BYTES = IB_FC_PACKET_BYTES      # wire.py's (test_roce_layers checks it is the layer's)


def fc_wire_ns(rate_bps: float) -> int:
    """A flow-control packet's time on the wire at ``rate_bps``, whole ns
    rounded up: it does not wait for the serializer (IBA 7.9.4 lets link
    packets go between packets), but it takes its 6 bytes' time like any
    symbol stream -- on a link without delay it still arrives after it left."""
    return -(-FC_PACKET_BYTES * 8 * 10**9 // int(rate_bps))
# the NIC's frames: carrier + LRH + BTH, ICRC + VCRC after; on an IB wire
# only the packet (the carrier's 14 bytes are the veth's)
IB_FRAMING = Framing(ETH_HDR_BYTES + LRH_BYTES + BTH_BYTES, ICRC_BYTES + VCRC_BYTES,
                     -ETH_HDR_BYTES)
