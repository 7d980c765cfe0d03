"""RoCEv2 packet layers, ICRC, and an allocation-light fast path.

Three parts:

* Scapy layers. ``scapy.contrib.roce`` provides BTH (whose ``post_build``
  appends the ICRC), AETH, CNPPadding and GRH, and binds UDP/4791 -> BTH and
  BTH -> AETH for RC and RD ACKNOWLEDGE (0x11, 0x51). This module adds RETH,
  DETH and ImmDt and binds them for dissection only (``bind_bottom_up``, so
  scapy's existing bindings and build-time defaults are left untouched):
  RETH for WRITE_FIRST/WRITE_ONLY/WRITE_ONLY_IMM/READ_REQUEST (RC and UC),
  AETH for READ_RESPONSE_FIRST/LAST/ONLY, DETH for UD SEND_ONLY[_IMM],
  ImmDt after BTH, RETH or DETH for the *_WITH_IMMEDIATE opcodes.
  ``BTH()/RETH()`` builds with opcode RC WRITE_ONLY by default.

* ICRC (IBTA RoCEv2 annex A17.3.3 / IBA 7.8): CRC-32 (the zlib/Ethernet
  polynomial) over 8 bytes of 0xFF standing for the LRH, then IP, UDP, BTH,
  extended headers and payload (with pad bytes), where the variant fields are
  replaced by ones: IPv4 ToS (DSCP+ECN), TTL and header checksum (IPv6:
  traffic class, flow label, hop limit), the UDP checksum, and the BTH
  ``Resv8a`` byte (byte 4 of BTH, the 8 bits before DestQP: FECN, BECN and
  6 reserved bits). The 4-byte ICRC trails the packet *little-endian*
  (``struct.pack('<I', crc)``) -- the way scapy and the Linux rxe driver put
  it -- so scapy's ``BTH.icrc`` field (read as ``!I``) shows the byte-swapped
  value. ``icrc(frame)`` returns the CRC value; ``verify_icrc(frame)``
  compares it with the trailer.

* Fast path. ``FrameTemplate`` is built once per QP with scapy and patched
  per packet with ``struct.pack_into`` on a preallocated bytearray;
  ``parse_roce`` decodes a received frame with a couple of ``unpack_from``
  calls into a ``RocePacket`` namedtuple whose payload is a memoryview of the
  caller's buffer (no copy).

Frames are IPv4 (optionally 802.1Q tagged on the receive side), UDP
destination port 4791. Payloads are padded to a multiple of 4 bytes and the
pad count goes into BTH.PadCnt, as IBA requires; ``parse_roce`` strips it.
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
        ihl = (frame[off] & 0x0F) * 4
        end = off + ((frame[off + 2] << 8) | frame[off + 3])
        hdr = bytearray(frame[off:off + ihl + 8 + BTH_LEN])
        hdr[1] = 0xFF                         # ToS: DSCP + ECN
        hdr[8] = 0xFF                         # TTL
        hdr[10] = hdr[11] = 0xFF              # header checksum
        u = ihl
    elif et == 0x86DD:
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


def verify_icrc(frame_bytes) -> bool:
    """True when the frame's trailing ICRC matches ``icrc(frame)``."""
    frame = memoryview(frame_bytes)
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


_ETH_IP_UDP = 14 + 20 + 8          # 42: BTH offset in our frames
_BTH_OFF = _ETH_IP_UDP
_EXT_OFF = _BTH_OFF + BTH_LEN      # 54
_PS_OFF = 8 - 14                   # frame offset -> pseudo-header offset
_ZEROS = b"\x00\x00\x00\x00"
_pack_into = struct.pack_into
_crc32 = zlib.crc32
_S_IPLEN_ID = struct.Struct("!HH")
_S_H = struct.Struct("!H")
_S_BTH = struct.Struct("!BBHII")
_S_RETH = struct.Struct("!QII")
_S_AETH = struct.Struct("!I")
_S_ICRC = struct.Struct("<I")


def write_transport(buf: bytearray, mv: memoryview, h: int, payload, max_payload_bytes: int,
                    reth: tuple[int, int, int] | None, aeth: tuple[int, int] | None,
                    imm: int | None) -> tuple[int, int, int]:
    """The transport part after a BTH at ``h``, shared by RoCE's frames and
    InfiniBand's (``emulator.ib.frames``): extended headers (RETH, AETH,
    ImmDt), payload and pad bytes. Returns (end of the extended headers,
    end of the padded payload, pad count)."""
    if reth is not None:
        _S_RETH.pack_into(buf, h, reth[0], reth[1], reth[2])
        h += RETH_LEN
    if aeth is not None:
        _S_AETH.pack_into(buf, h, (aeth[0] << 24) | (aeth[1] & PSN_MASK))
        h += AETH_LEN
    if imm is not None:
        _S_AETH.pack_into(buf, h, imm)
        h += IMMDT_LEN
    plen = len(payload)
    if plen > max_payload_bytes:
        raise ValueError(f"payload of {plen} bytes > max_payload_bytes {max_payload_bytes}")
    pad = -plen & 3
    pend = h + plen
    if plen:
        mv[h:pend] = payload
    if pad:
        mv[pend:pend + pad] = _ZEROS[:pad]
        pend += pad
    return h, pend, pad


class FrameTemplate:
    """Per-QP RoCEv2 frame, built once with scapy, patched per packet.

    ``build()`` returns a memoryview of an internal buffer: it is valid until
    the next ``build`` on the same template (send it before building again).
    """

    __slots__ = ("buf", "mv", "pseudo", "pmv", "dst_qp", "pkey", "tos", "ip_id",
                 "_csum_base", "max_payload_bytes", "udp_sport")

    def __init__(self, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str,
                 udp_sport: int, dst_qp: int, *, dscp: int = 26, ecn: int = ECN_ECT0,
                 ttl: int = 64, pkey: int = 0xFFFF, max_payload_bytes: int = 4096,
                 ip_id: int = 0):
        if not 0 <= dscp < 64 or not 0 <= ecn < 4:
            raise ValueError("dscp must be 0..63 and ecn 0..3")
        self.tos = (dscp << 2) | ecn
        hdr = bytes(Ether(src=src_mac, dst=dst_mac)
                    / IP(src=src_ip, dst=dst_ip, tos=self.tos, ttl=ttl, flags="DF", id=0)
                    / UDP(sport=udp_sport, dport=ROCEV2_UDP_DPORT, chksum=0)
                    / BTH(opcode=RC_SEND_ONLY, pkey=pkey, dqpn=dst_qp, psn=0))
        hdr = hdr[:_EXT_OFF]  # drop the ICRC scapy appended
        self.max_payload_bytes = max_payload_bytes
        size = _EXT_OFF + 32 + max_payload_bytes + 4 + ICRC_LEN
        self.buf = bytearray(size)
        self.buf[:_EXT_OFF] = hdr
        self.mv = memoryview(self.buf)
        self.pseudo = bytearray(b"\xff" * 8 + bytes(_EXT_OFF + 32 - 14))
        self.pmv = memoryview(self.pseudo)
        self.dst_qp = dst_qp
        self.pkey = pkey
        self.udp_sport = udp_sport
        self.ip_id = ip_id & 0xFFFF
        # one's-complement sum of the IP header with total length, id and
        # checksum zeroed: per packet add those two and fold.
        ip = bytearray(hdr[14:34])
        ip[2:6] = b"\x00\x00\x00\x00"
        ip[10:12] = b"\x00\x00"
        self._csum_base = sum(struct.unpack("!10H", ip))

    def variant(self, *, dscp: int, ecn: int, max_payload_bytes: int) -> FrameTemplate:
        """This template's frame with another DSCP/ECN and payload room (a
        QP's CNPs: its peer, its UDP port, the CNP class), by patching the
        ToS byte of a copy: scapy builds a template in ~0.8 ms, and a QP's
        first CNP is made in the NIC's loop, where every NIC of the process
        waited for it (websearch: dozens of QPs sending their first CNP)."""
        if not 0 <= dscp < 64 or not 0 <= ecn < 4:
            raise ValueError("dscp must be 0..63 and ecn 0..3")
        t = object.__new__(FrameTemplate)
        t.tos = (dscp << 2) | ecn
        t.max_payload_bytes = max_payload_bytes
        t.buf = bytearray(_EXT_OFF + 32 + max_payload_bytes + 4 + ICRC_LEN)
        t.buf[:_EXT_OFF] = self.buf[:_EXT_OFF]
        t.buf[15] = t.tos
        t.mv = memoryview(t.buf)
        t.pseudo = bytearray(self.pseudo)
        t.pmv = memoryview(t.pseudo)
        t.dst_qp, t.pkey, t.udp_sport, t.ip_id = self.dst_qp, self.pkey, self.udp_sport, 0
        # the ToS is the low byte of the IP header's first 16-bit word
        t._csum_base = self._csum_base - self.tos + t.tos
        return t

    def build(self, opcode: int, psn: int, payload=b"", *, ack_req: bool = False,
              solicited: bool = False, reth: tuple[int, int, int] | None = None,
              aeth: tuple[int, int] | None = None, imm: int | None = None,
              fecn: bool = False, becn: bool = False) -> memoryview:
        """Patch the template into a complete frame; returns a view of it.

        ``reth`` = (virtual_addr, rkey, dma_length); ``aeth`` = (syndrome, msn).
        ``payload`` is any buffer (bytes, memoryview slice); it is copied once.
        """
        buf = self.buf
        mv = self.mv
        h, pend, pad = write_transport(buf, mv, _EXT_OFF, payload, self.max_payload_bytes,
                                       reth, aeth, imm)
        total = pend + ICRC_LEN
        # IPv4 total length, id, checksum; UDP length
        ip_len = total - 14
        ip_id = self.ip_id = (self.ip_id + 1) & 0xFFFF
        _S_IPLEN_ID.pack_into(buf, 16, ip_len, ip_id)
        s = self._csum_base + ip_len + ip_id
        s = (s & 0xFFFF) + (s >> 16)
        s = (s & 0xFFFF) + (s >> 16)
        _S_H.pack_into(buf, 24, ~s & 0xFFFF)
        _S_H.pack_into(buf, 38, total - 34)
        _S_BTH.pack_into(buf, _BTH_OFF, opcode, (solicited << 7) | (pad << 4), self.pkey,
                         (fecn << 31) | (becn << 30) | self.dst_qp,
                         (ack_req << 31) | (psn & PSN_MASK))
        # ICRC: masked copy of IP..extended headers, then the payload in place
        ps = self.pseudo
        ps[8:8 + h - 14] = mv[14:h]
        ps[9] = 0xFF             # ToS
        ps[16] = 0xFF            # TTL
        ps[18] = ps[19] = 0xFF   # IP checksum
        ps[34] = ps[35] = 0xFF   # UDP checksum
        ps[40] = 0xFF            # BTH Resv8a
        crc = _crc32(self.pmv[:h - 6])
        if pend > h:
            crc = _crc32(mv[h:pend], crc)
        _S_ICRC.pack_into(buf, pend, crc)
        return mv[:total]

    def ack(self, psn: int, syndrome: int, msn: int) -> memoryview:
        """An RC ACKNOWLEDGE (BTH + AETH); a NAK when ``syndrome`` says so."""
        return self.build(RC_ACK, psn, aeth=(syndrome, msn))


# --------------------------------------------------------------------------
# Fast parser
# --------------------------------------------------------------------------
class RocePacket(NamedTuple):
    src_ip: int          # IPv4 address as an int (see int_to_ip)
    dst_ip: int
    udp_sport: int
    opcode: int
    dst_qp: int
    psn: int
    ack_req: bool
    ecn: int             # IPv4 ToS & 3
    dscp: int
    fecn: bool
    becn: bool
    reth_va: int | None
    reth_rkey: int | None
    reth_len: int | None
    aeth_syndrome: int | None
    aeth_msn: int | None
    imm: int | None
    payload: memoryview  # without pad bytes and ICRC; a view into the input


#           vihl tos len  id  frag ttl proto csum src dst sport dport ulen ucsum op fl pkey fbdqp apsn
_S_HDR = struct.Struct("!BBH4xBB2xIIHH4xBBHII")
_unpack_hdr = _S_HDR.unpack_from
_unpack_reth = _S_RETH.unpack_from
_unpack_u32 = _S_AETH.unpack_from


def parse_roce(frame, verify: bool = False) -> RocePacket | None:
    """Decode an Ethernet/IPv4/UDP(4791)/BTH frame; None if it is not one
    (or, with ``verify``, if its ICRC is wrong). ``payload`` is a memoryview
    into ``frame`` -- copy it before the buffer is reused."""
    n = len(frame)
    if n < _EXT_OFF + ICRC_LEN:
        return None
    if frame[12] == 0x08 and frame[13] == 0x00:
        off = 14
    elif (frame[12] == 0x81 and frame[13] == 0x00 and frame[16] == 0x08 and frame[17] == 0x00
          and n >= _EXT_OFF + 4 + ICRC_LEN):
        off = 18
    else:
        return None
    vihl = frame[off]
    if vihl == 0x45:
        (_v, tos, iplen, _ttl, proto, src, dst, sport, dport, op, fl, _pkey, fbq, apsn) = \
            _unpack_hdr(frame, off)
        b = off + 28  # BTH offset
    else:
        ihl = (vihl & 0x0F) * 4
        if vihl >> 4 != 4 or ihl < 20 or n < off + ihl + 8 + BTH_LEN + ICRC_LEN:
            return None
        (tos, iplen, _ttl, proto, src, dst, sport, dport, op, fl, _pkey, fbq, apsn) = \
            _unpack_opts(frame, off, ihl)
        b = off + ihl + 8
    end = off + iplen
    if proto != 17 or dport != ROCEV2_UDP_DPORT:
        return None
    if end > n:
        return None
    h = b + BTH_LEN
    ext = _EXT_LEN[op]
    p = h + ext
    pend = end - ICRC_LEN - ((fl >> 4) & 3)
    if pend < p:
        return None
    if verify and not verify_icrc(frame):
        return None
    if not isinstance(frame, memoryview):
        frame = memoryview(frame)
    return RocePacket(src, dst, sport, op, fbq & PSN_MASK, apsn & PSN_MASK, apsn >> 31 == 1,
                      tos & 3, tos >> 2, fbq >> 31 == 1, (fbq >> 30) & 1 == 1,
                      *read_ext_headers(frame, h, op), frame[p:pend])


_NO_EXT = (None, None, None, None, None, None)


def read_ext_headers(frame, h: int, op: int) -> tuple:
    """(RETH va, rkey, length, AETH syndrome, MSN, ImmDt) of the extended
    headers at ``h`` after a BTH with ``op`` (None where absent); shared by
    RoCE's parser and InfiniBand's (``emulator.ib.frames.parse_ib``)."""
    if op in _HAS_RETH:
        va, rkey, length = _unpack_reth(frame, h)
        return va, rkey, length, None, None, \
            (_unpack_u32(frame, h + _IMM_OFFSET[op])[0] if _HAS_IMM[op] else None)
    if op in _HAS_AETH:
        (a,) = _unpack_u32(frame, h)
        return None, None, None, a >> 24, a & PSN_MASK, None
    if _HAS_IMM[op]:
        return None, None, None, None, None, _unpack_u32(frame, h + _IMM_OFFSET[op])[0]
    return _NO_EXT


def _unpack_opts(frame, ip_off: int, ihl: int):
    """Header fields of a frame whose IPv4 header has options (rare path)."""
    tos, iplen, ttl, proto, src, dst = struct.unpack_from("!xBH4xBB2xII", frame, ip_off)
    u = ip_off + ihl
    sport, dport, op, fl, pkey, fbq, apsn = struct.unpack_from("!HH4xBBHII", frame, u)
    return tos, iplen, ttl, proto, src, dst, sport, dport, op, fl, pkey, fbq, apsn
