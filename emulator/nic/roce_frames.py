"""The allocation-light fast path of RoCEv2 frames (part of ``roce``, which
re-exports it): ``FrameTemplate`` builds a QP's frames into one reused
buffer (headers precomputed, IP checksum and ICRC per packet),
``write_transport`` writes what follows a BTH (RoCE's and InfiniBand's),
``parse_roce`` decodes a received frame into a ``RocePacket`` without
scapy. The model in full: docs/nic.md, "roce"."""
from __future__ import annotations

import socket
import struct
import zlib
from typing import NamedTuple

from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulator.wire import ROCEV2_UDP_DPORT

from .roce import (
    _EXT_LEN, _HAS_AETH, _HAS_IMM, _HAS_RETH, _IMM_OFFSET, AETH_LEN, BTH_LEN, ECN_ECT0, ICRC_LEN,
    IMMDT_LEN, PSN_MASK, RC_ACK, RC_SEND_ONLY, RETH_LEN, int_to_ip, verify_icrc,
)

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


# (source MAC, source IP, ToS, TTL, P_Key) -> Scapy's header of a NIC's QPs
_SHAPES: dict[tuple, bytes] = {}
_S_IPV4_WORDS = struct.Struct("!10H")


def _header(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, tos: int, ttl: int,
            udp_sport: int, pkey: int, dst_qp: int) -> bytes:
    """Ethernet, IPv4, UDP and BTH of a QP's frames: Scapy builds the
    header once per NIC and class (~0.8 ms, 8,064 QPs of a 64-host
    all-to-all were seconds of every agent's start); each QP's is that one
    with its peer's MAC and IP, its UDP port, its peer's QPN and the IPv4
    checksum patched in -- the bytes Scapy would have built
    (tests/unit/test_roce_frames.py compares them)."""
    key = (src_mac, src_ip, tos, ttl, pkey)
    base = _SHAPES.get(key)
    if base is None:
        base = _SHAPES[key] = bytes(
            Ether(src=src_mac, dst="00:00:00:00:00:00")
            / IP(src=src_ip, dst="0.0.0.0", tos=tos, ttl=ttl, flags="DF", id=0)
            / UDP(sport=0, dport=ROCEV2_UDP_DPORT, chksum=0)
            / BTH(opcode=RC_SEND_ONLY, pkey=pkey, dqpn=0, psn=0))[:_EXT_OFF]  # no ICRC
    hdr = bytearray(base)
    hdr[0:6] = bytes.fromhex(dst_mac.replace(":", ""))
    hdr[30:34] = socket.inet_aton(dst_ip)
    hdr[24:26] = b"\x00\x00"
    c = sum(_S_IPV4_WORDS.unpack_from(hdr, 14))
    c = (c & 0xFFFF) + (c >> 16)
    c = (c & 0xFFFF) + (c >> 16)
    _S_H.pack_into(hdr, 24, ~c & 0xFFFF)
    _S_H.pack_into(hdr, 34, udp_sport)
    hdr[_BTH_OFF + 5:_BTH_OFF + 8] = dst_qp.to_bytes(3, "big")
    return bytes(hdr)


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
        hdr = _header(src_mac, dst_mac, src_ip, dst_ip, self.tos, ttl, udp_sport, pkey, dst_qp)
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
_new_packet = tuple.__new__


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
    # tuple.__new__, as RocePacket's own __new__ calls it: no Python-level call per packet
    return _new_packet(RocePacket, (
        src, dst, sport, op, fbq & PSN_MASK, apsn & PSN_MASK, apsn >> 31 == 1,
        tos & 3, tos >> 2, fbq >> 31 == 1, (fbq >> 30) & 1 == 1,
        *read_ext_headers(frame, h, op), frame[p:pend]))


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
