"""RoCEv2 packet layers, ICRC, and (``roce_frames``) an allocation-light fast path.

* Scapy layers. ``scapy.contrib.roce`` provides BTH (whose ``post_build``
  appends the ICRC), AETH, CNPPadding and GRH, and binds UDP/4791 -> BTH and
  BTH -> AETH for RC and RD ACKNOWLEDGE (0x11, 0x51). This module adds RETH,
  DETH and ImmDt and binds them for dissection only (``bind_bottom_up``, so
  scapy's existing bindings and build-time defaults are left untouched):
  RETH for WRITE_FIRST/WRITE_ONLY/WRITE_ONLY_IMM/READ_REQUEST (RC and UC),
  AETH for READ_RESPONSE_FIRST/LAST/ONLY, DETH for UD SEND_ONLY[_IMM],
  ImmDt after BTH, RETH or DETH for the *_WITH_IMMEDIATE opcodes.
  ``BTH()/RETH()`` builds with opcode RC WRITE_ONLY by default.

The model in full: docs/nic.md, "roce".
"""
from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from scapy.contrib.roce import AETH, BTH, CNPPadding, GRH, cnp  # noqa: F401 (re-exported)
from scapy.fields import BitField, XBitField, XIntField, XLongField
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, bind_bottom_up, bind_top_down

from emulator.wire import ETH_P_8021Q, ETH_P_IP, ROCEV2_UDP_DPORT

PSN_MASK = 0xFFFFFF
PSN_HALF = 1 << 23

# --------------------------------------------------------------------------
# BTH opcodes (IBA 9.2, table 35). Transport prefix in the top 3 bits.
# --------------------------------------------------------------------------
RC_SEND_FIRST = 0x00
RC_SEND_MIDDLE = 0x01
RC_SEND_LAST = 0x02
RC_SEND_LAST_IMM = 0x03
RC_SEND_ONLY = 0x04
RC_SEND_ONLY_IMM = 0x05
RC_WRITE_FIRST = 0x06
RC_WRITE_MIDDLE = 0x07
RC_WRITE_LAST = 0x08
RC_WRITE_LAST_IMM = 0x09
RC_WRITE_ONLY = 0x0A
RC_WRITE_ONLY_IMM = 0x0B
RC_READ_REQUEST = 0x0C
RC_READ_RESPONSE_FIRST = 0x0D
RC_READ_RESPONSE_MIDDLE = 0x0E
RC_READ_RESPONSE_LAST = 0x0F
RC_READ_RESPONSE_ONLY = 0x10
RC_ACK = 0x11
RC_ATOMIC_ACK = 0x12
RC_CMP_SWAP = 0x13
RC_FETCH_ADD = 0x14
UC_BASE = 0x20
UD_SEND_ONLY = 0x64
UD_SEND_ONLY_IMM = 0x65
CNP_OPCODE = 0x81

# --------------------------------------------------------------------------
# AETH syndrome (IBA 9.7.5.1, table 44): bits 6:5 select ACK / RNR NAK / NAK,
# bits 4:0 carry the credit count, the RNR timer code, or the NAK code.
# --------------------------------------------------------------------------
AETH_TYPE_MASK = 0x60
AETH_ACK = 0x00
AETH_RNR_NAK = 0x20
AETH_NAK = 0x60
AETH_CREDIT_INVALID = 0x1F  # "no end-to-end credits": the ACK we send: 0x00 | 0x1F
AETH_ACK_SYNDROME = AETH_ACK | AETH_CREDIT_INVALID
NAK_PSN_SEQ_ERR = 0x60
NAK_INVALID_REQUEST = 0x61
NAK_REMOTE_ACCESS_ERR = 0x62
NAK_REMOTE_OP_ERR = 0x63
NAK_INVALID_RD_REQUEST = 0x64

# IPv4 ToS low 2 bits
ECN_NOT_ECT = 0b00
ECN_ECT1 = 0b01
ECN_ECT0 = 0b10
ECN_CE = 0b11

RETH_LEN = 16
AETH_LEN = 4
DETH_LEN = 8
IMMDT_LEN = 4
ATOMIC_ETH_LEN = 28
ATOMIC_ACK_ETH_LEN = 8
BTH_LEN = 12
ICRC_LEN = 4


# --------------------------------------------------------------------------
# Scapy layers
# --------------------------------------------------------------------------
class RETH(Packet):
    """RDMA Extended Transport Header (IBA 9.3.3): where the data goes."""
    name = "RETH"
    fields_desc = [
        XLongField("virtual_addr", 0),
        XIntField("rkey", 0),
        BitField("dma_length", 0, 32),
    ]

    def guess_payload_class(self, payload):
        if isinstance(self.underlayer, BTH) and self.underlayer.opcode in _IMM_AFTER_RETH:
            return ImmDt
        return Packet.guess_payload_class(self, payload)


class DETH(Packet):
    """Datagram Extended Transport Header (IBA 9.3.2), UD only."""
    name = "DETH"
    fields_desc = [
        XIntField("qkey", 0),
        BitField("reserved", 0, 8),
        XBitField("src_qp", 0, 24),
    ]

    def guess_payload_class(self, payload):
        if isinstance(self.underlayer, BTH) and self.underlayer.opcode == UD_SEND_ONLY_IMM:
            return ImmDt
        return Packet.guess_payload_class(self, payload)


class ImmDt(Packet):
    """Immediate Data Extended Transport Header (IBA 9.3.6)."""
    name = "ImmDt"
    fields_desc = [XIntField("imm_data", 0)]


_IMM_AFTER_RETH = frozenset({RC_WRITE_ONLY_IMM, UC_BASE | RC_WRITE_ONLY_IMM})

for _op in (RC_WRITE_FIRST, RC_WRITE_ONLY, RC_WRITE_ONLY_IMM, RC_READ_REQUEST,
            UC_BASE | RC_WRITE_FIRST, UC_BASE | RC_WRITE_ONLY, UC_BASE | RC_WRITE_ONLY_IMM):
    bind_bottom_up(BTH, RETH, opcode=_op)
for _op in (RC_READ_RESPONSE_FIRST, RC_READ_RESPONSE_LAST, RC_READ_RESPONSE_ONLY):
    bind_bottom_up(BTH, AETH, opcode=_op)          # 0x11 is bound by scapy already
for _op in (UD_SEND_ONLY, UD_SEND_ONLY_IMM):
    bind_bottom_up(BTH, DETH, opcode=_op)
for _op in (RC_SEND_LAST_IMM, RC_SEND_ONLY_IMM, RC_WRITE_LAST_IMM,
            UC_BASE | RC_SEND_LAST_IMM, UC_BASE | RC_SEND_ONLY_IMM, UC_BASE | RC_WRITE_LAST_IMM):
    bind_bottom_up(BTH, ImmDt, opcode=_op)
bind_top_down(BTH, RETH, opcode=RC_WRITE_ONLY)
bind_top_down(BTH, DETH, opcode=UD_SEND_ONLY)
bind_top_down(BTH, ImmDt, opcode=RC_SEND_ONLY_IMM)

# Length of the extended transport headers that follow BTH, per opcode.
_EXT_LEN = [0] * 256
for _t in (0x00, UC_BASE):
    for _op, _n in ((RC_SEND_LAST_IMM, 4), (RC_SEND_ONLY_IMM, 4), (RC_WRITE_FIRST, 16),
                    (RC_WRITE_LAST_IMM, 4), (RC_WRITE_ONLY, 16), (RC_WRITE_ONLY_IMM, 20)):
        _EXT_LEN[_t | _op] = _n
for _op, _n in ((RC_READ_REQUEST, 16), (RC_READ_RESPONSE_FIRST, 4), (RC_READ_RESPONSE_LAST, 4),
                (RC_READ_RESPONSE_ONLY, 4), (RC_ACK, 4), (RC_ATOMIC_ACK, 12),
                (RC_CMP_SWAP, 28), (RC_FETCH_ADD, 28),
                (UD_SEND_ONLY, 8), (UD_SEND_ONLY_IMM, 12), (CNP_OPCODE, 16)):
    _EXT_LEN[_op] = _n
_HAS_RETH = frozenset(op for op in range(256)
                      if (op & 0x1F) in (RC_WRITE_FIRST, RC_WRITE_ONLY, RC_WRITE_ONLY_IMM)
                      and op >> 5 in (0, 1)) | {RC_READ_REQUEST}
_HAS_AETH = frozenset({RC_READ_RESPONSE_FIRST, RC_READ_RESPONSE_LAST, RC_READ_RESPONSE_ONLY,
                       RC_ACK, RC_ATOMIC_ACK})
# offset of ImmDt from the end of BTH, for opcodes that carry it
_IMM_OFFSET = {}
for _t in (0x00, UC_BASE):
    _IMM_OFFSET.update({_t | RC_SEND_LAST_IMM: 0, _t | RC_SEND_ONLY_IMM: 0,
                        _t | RC_WRITE_LAST_IMM: 0, _t | RC_WRITE_ONLY_IMM: 16})
_IMM_OFFSET[UD_SEND_ONLY_IMM] = 8
_HAS_IMM = [False] * 256
for _op in _IMM_OFFSET:
    _HAS_IMM[_op] = True


def ext_header_len(opcode: int) -> int:
    """Bytes of extended transport headers between BTH and the payload."""
    return _EXT_LEN[opcode]


# --------------------------------------------------------------------------
# ICRC
# --------------------------------------------------------------------------
_FF8 = b"\xff" * 8
_CRC_FF8 = zlib.crc32(_FF8)


_PLAIN_HDR_END = 14 + 20 + 8 + BTH_LEN        # Ethernet, IPv4 without options, UDP, BTH
_PLAIN_MIN = _PLAIN_HDR_END + ICRC_LEN
_unpack_icrc = struct.Struct("<I").unpack_from


def _l3_offset(frame) -> tuple[int, int]:
    """(offset of the IP header, ethertype) past an optional 802.1Q tag."""
    et = (frame[12] << 8) | frame[13]
    off = 14
    if et == ETH_P_8021Q:
        et = (frame[16] << 8) | frame[17]
        off = 18
    return off, et


def icrc(frame_bytes) -> int:
    """ICRC of a full RoCEv2 Ethernet frame (the trailing 4 ICRC bytes are
    excluded, Ethernet padding beyond the IP length is ignored).

    Returns the CRC-32 value; on the wire it is stored as ``struct.pack('<I', v)``.
    """
    frame = memoryview(frame_bytes)
    off, et = _l3_offset(frame)
    if et == ETH_P_IP:
        return _ipv4_icrc(frame, off, (frame[off] & 0x0F) * 4,
                          off + ((frame[off + 2] << 8) | frame[off + 3]))
    if et == 0x86DD:
        end = off + 40 + ((frame[off + 4] << 8) | frame[off + 5])
        hdr = bytearray(frame[off:off + 40 + 8 + BTH_LEN])
        hdr[0] |= 0x0F                        # traffic class (low nibble of byte 0 ...
        hdr[1] = hdr[2] = hdr[3] = 0xFF       # ... + byte 1 high nibble) + flow label
        hdr[7] = 0xFF                         # hop limit
        u = 40
    else:
        raise ValueError(f"not an IP frame (ethertype 0x{et:04x})")
    hdr[u + 6] = hdr[u + 7] = 0xFF            # UDP checksum
    hdr[u + 8 + 4] = 0xFF                     # BTH Resv8a: FECN, BECN, resv6
    crc = zlib.crc32(hdr, _CRC_FF8)
    return zlib.crc32(frame[off + len(hdr):end - ICRC_LEN], crc)


def _ipv4_icrc(frame, off: int, ihl: int, end: int) -> int:
    """``icrc`` of an IPv4 frame whose IP header starts at ``off``, ``ihl``
    bytes long, the IP packet ending at ``end``: the variant fields masked."""
    hdr = bytearray(frame[off:off + ihl + 8 + BTH_LEN])
    hdr[1] = hdr[8] = 0xFF                    # ToS (DSCP + ECN), TTL
    hdr[10] = hdr[11] = 0xFF                  # header checksum
    hdr[ihl + 6] = hdr[ihl + 7] = 0xFF        # UDP checksum
    hdr[ihl + 8 + 4] = 0xFF                   # BTH Resv8a: FECN, BECN, resv6
    return zlib.crc32(frame[off + len(hdr):end - ICRC_LEN], zlib.crc32(hdr, _CRC_FF8))


def verify_icrc(frame_bytes) -> bool:
    """True when the frame's trailing ICRC matches ``icrc(frame)``."""
    frame = memoryview(frame_bytes)
    if (len(frame) >= _PLAIN_MIN and frame[14] == 0x45 and frame[12] == 0x08
            and frame[13] == 0x00):
        # the frames we build (untagged IPv4, no options), every received one:
        # no parsing of the layout
        end = 14 + ((frame[16] << 8) | frame[17])
        if end > len(frame) or end < _PLAIN_MIN:
            return False
        return _ipv4_icrc(frame, 14, 20, end) == _unpack_icrc(frame, end - ICRC_LEN)[0]
    try:
        off, et = _l3_offset(frame)
        if et == ETH_P_IP:
            end = off + ((frame[off + 2] << 8) | frame[off + 3])
        elif et == 0x86DD:
            end = off + 40 + ((frame[off + 4] << 8) | frame[off + 5])
        else:
            return False
        if end > len(frame) or end < off + 20 + 8 + BTH_LEN + ICRC_LEN:
            return False
        (stored,) = struct.unpack_from("<I", frame, end - ICRC_LEN)
        return icrc(frame) == stored
    except (IndexError, ValueError, struct.error):
        return False


# --------------------------------------------------------------------------
# Fast builder
# --------------------------------------------------------------------------
def _mac_bytes(mac: str) -> bytes:
    b = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    if len(b) != 6:
        raise ValueError(f"bad MAC address {mac!r}")
    return b


def ip_to_int(ip: str) -> int:
    parts = [int(x) for x in ip.split(".")]
    if len(parts) != 4 or any(not 0 <= x <= 255 for x in parts):
        raise ValueError(f"bad IPv4 address {ip!r}")
    return (parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | parts[3]


def int_to_ip(v: int) -> str:
    return f"{v >> 24 & 255}.{v >> 16 & 255}.{v >> 8 & 255}.{v & 255}"


# The fast path (frames.py-style building and parsing) lives in roce_frames;
# ``roce.FrameTemplate`` etc. still name it (loaded on first use: roce_frames
# imports this module).
_FAST_PATH = frozenset({"FrameTemplate", "RocePacket", "parse_roce", "read_ext_headers",
                        "write_transport"})


def __getattr__(name: str):
    if name in _FAST_PATH:
        from . import roce_frames   # deferred: roce_frames imports this module
        value = getattr(roce_frames, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

