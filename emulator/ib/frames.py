"""The InfiniBand NIC's fast path, as ``emulator.nic.roce`` is RoCE's:
``IbFrameTemplate`` built once per QP with Scapy (``emulator.ib.headers``:
the carrier, the LRH, the BTH) and patched per packet with
``struct.pack_into``; ``parse_ib`` decodes a received carrier frame with a
few ``unpack_from`` calls into an ``IbPacket`` whose payload is a view of
the caller's buffer. A randomized test keeps both equal to Scapy's.

The transport (BTH and its extended headers, opcodes, PSNs, pad count) is
RoCE's, shared: ``build`` takes the same arguments as
``roce.FrameTemplate.build``. What differs is around it: the LRH (SL, DLID,
SLID, PktLen) instead of IP and UDP, an ICRC over the LRH (VL masked)
instead of RoCE's pseudo header, and the VCRC after it. Congestion is
reported by the switches in the BTH's FECN bit (no ECN field), and
answered with BECN.
"""
from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from scapy.contrib.roce import BTH
from scapy.layers.l2 import Ether

from emulator.nic.roce import (
    _EXT_LEN, ECN_CE, ECN_ECT0, PSN_MASK, RC_ACK, RC_SEND_ONLY, read_ext_headers, write_transport,
)
from emulator.ib.headers import (
    FC_PACKET_BYTES, ICRC_BYTES, LNH_IBA_LOCAL, LRH, LRH_BYTES, VCRC_BYTES, vcrc,
)
from emulator.wire import BTH_BYTES, ETH_HDR_BYTES, ETH_P_IB_DATA, ETH_P_IB_LINK

_LRH_OFF = ETH_HDR_BYTES                 # 14: the carrier, then the packet
_BTH_OFF = _LRH_OFF + LRH_BYTES          # 22
_EXT_OFF = _BTH_OFF + BTH_BYTES          # 34
_S_LRH_LEN = struct.Struct("!H")         # rsvd5 + PktLen
_S_BTH = struct.Struct("!BBHII")
_S_ICRC = struct.Struct("<I")
_S_VCRC = struct.Struct("<H")
_S_FC = struct.Struct("!I")             # Op, FCTBS, VL, FCCL (IBA 7.9.4.1)
_crc32 = zlib.crc32
_CARRIER_BROADCAST = b"\xff" * 6


class IbFrameTemplate:
    """Per-QP InfiniBand packet in its carrier frame, patched per packet.

    ``build()`` returns a memoryview of an internal buffer, valid until the
    next ``build`` on the same template."""

    __slots__ = ("buf", "mv", "masked", "dst_qp", "pkey", "max_payload_bytes", "dlid", "slid", "sl")

    def __init__(self, src_mac: str, dst_mac: str, slid: int, dlid: int, dst_qp: int, *,
                 sl: int = 0, vl: int = 0, pkey: int = 0xFFFF, max_payload_bytes: int = 4096):
        if not 0 <= sl < 16 or not 0 <= vl < 15:
            raise ValueError("sl must be 0..15 and vl a data VL, 0..14")
        hdr = bytes(Ether(src=src_mac, dst=dst_mac, type=ETH_P_IB_DATA)
                    / LRH(vl=vl, sl=sl, lnh=LNH_IBA_LOCAL, dlid=dlid, slid=slid, pktlen=0, vcrc=0)
                    / BTH(opcode=RC_SEND_ONLY, pkey=pkey, dqpn=dst_qp, psn=0, icrc=0))
        hdr = hdr[:_EXT_OFF]                  # headers only: ICRC and VCRC come per packet
        self.max_payload_bytes = max_payload_bytes
        self.buf = bytearray(_EXT_OFF + 32 + max_payload_bytes + 4 + ICRC_BYTES + VCRC_BYTES)
        self.buf[:_EXT_OFF] = hdr
        self.mv = memoryview(self.buf)
        self.masked = bytearray(_EXT_OFF + 32 - _LRH_OFF)   # LRH..ext headers, variant bits set
        self.dst_qp, self.pkey = dst_qp, pkey
        self.dlid, self.slid, self.sl = dlid, slid, sl

    def variant(self, *, max_payload_bytes: int) -> IbFrameTemplate:
        """This template's packet with another payload room (a QP's CNPs),
        copied: scapy builds a template in ~0.8 ms, and a QP's first CNP is
        made in the NIC's loop (``roce.FrameTemplate.variant``)."""
        t = object.__new__(IbFrameTemplate)
        t.max_payload_bytes = max_payload_bytes
        t.buf = bytearray(_EXT_OFF + 32 + max_payload_bytes + 4 + ICRC_BYTES + VCRC_BYTES)
        t.buf[:_EXT_OFF] = self.buf[:_EXT_OFF]
        t.mv = memoryview(t.buf)
        t.masked = bytearray(len(self.masked))
        t.dst_qp, t.pkey = self.dst_qp, self.pkey
        t.dlid, t.slid, t.sl = self.dlid, self.slid, self.sl
        return t

    def build(self, opcode: int, psn: int, payload=b"", *, ack_req: bool = False,
              solicited: bool = False, reth: tuple[int, int, int] | None = None,
              aeth: tuple[int, int] | None = None, imm: int | None = None,
              fecn: bool = False, becn: bool = False) -> memoryview:
        """The packet, as ``roce.FrameTemplate.build`` builds RoCE's."""
        buf, mv = self.buf, self.mv
        h, pend, pad = write_transport(buf, mv, _EXT_OFF, payload, self.max_payload_bytes,
                                       reth, aeth, imm)
        icrc_end = pend + ICRC_BYTES
        _S_LRH_LEN.pack_into(buf, _LRH_OFF + 4, (icrc_end - _LRH_OFF) >> 2)
        _S_BTH.pack_into(buf, _BTH_OFF, opcode, (solicited << 7) | (pad << 4), self.pkey,
                         (fecn << 31) | (becn << 30) | self.dst_qp,
                         (ack_req << 31) | (psn & PSN_MASK))
        # ICRC: headers with the variant bits set (LRH VL, BTH Resv8a), then the payload
        m = self.masked
        n = h - _LRH_OFF
        m[:n] = mv[_LRH_OFF:h]
        m[0] |= 0xF0
        m[LRH_BYTES + 4] = 0xFF
        crc = _crc32(memoryview(m)[:n])
        if pend > h:
            crc = _crc32(mv[h:pend], crc)
        _S_ICRC.pack_into(buf, pend, crc)
        _S_VCRC.pack_into(buf, icrc_end, vcrc(mv[_LRH_OFF:icrc_end]))
        return mv[:icrc_end + VCRC_BYTES]

    def ack(self, psn: int, syndrome: int, msn: int, becn: bool = False) -> memoryview:
        """An RC ACKNOWLEDGE; ``becn`` answers a FECN-marked request."""
        return self.build(RC_ACK, psn, aeth=(syndrome, msn), becn=becn)


class IbPacket(NamedTuple):
    slid: int
    dlid: int
    sl: int
    vl: int
    opcode: int
    dst_qp: int
    psn: int
    ack_req: bool
    fecn: bool
    becn: bool
    reth_va: int | None
    reth_rkey: int | None
    reth_len: int | None
    aeth_syndrome: int | None
    aeth_msn: int | None
    imm: int | None
    payload: memoryview          # without pad bytes, ICRC and VCRC; a view into the input

    @property
    def ecn(self) -> int:
        """FECN is InfiniBand's "congestion experienced": the NIC's
        notification point reads it as RoCE's ECN field."""
        return ECN_CE if self.fecn else ECN_ECT0


#              ethertype vl/lver sl/lnh dlid len slid op fl pkey fbdqp apsn
_S_HDR = struct.Struct("!12xHBBHHHBBHII")


def parse_ib(frame) -> IbPacket | None:
    """Decode a carrier frame holding an IB data packet with a BTH (LNH
    IBA local); None if it is not one or its length fields disagree."""
    n = len(frame)
    if n < _EXT_OFF + ICRC_BYTES + VCRC_BYTES:
        return None
    (ethertype, vl_lver, sl_lnh, dlid, plen, slid, op, fl, _pkey, fbq, apsn) = \
        _S_HDR.unpack_from(frame, 0)
    if ethertype != ETH_P_IB_DATA or sl_lnh & 0x03 != LNH_IBA_LOCAL:
        return None
    icrc_end = _LRH_OFF + ((plen & 0x7FF) << 2)
    if icrc_end + VCRC_BYTES > n:
        return None
    h = _EXT_OFF
    p = h + _EXT_LEN[op]
    pend = icrc_end - ICRC_BYTES - ((fl >> 4) & 3)
    if pend < p:
        return None
    if not isinstance(frame, memoryview):
        frame = memoryview(frame)
    return IbPacket(slid, dlid, sl_lnh >> 4, vl_lver >> 4, op, fbq & PSN_MASK, apsn & PSN_MASK,
                    apsn >> 31 == 1, fbq >> 31 == 1, (fbq >> 30) & 1 == 1,
                    *read_ext_headers(frame, h, op), frame[p:pend])


def verify_icrc(frame) -> bool:
    """Is the ICRC of the IB data packet in carrier ``frame`` right? (LRH
    VL and BTH Resv8a masked, as the sender computed it; the length from
    the LRH's PktLen.)"""
    if len(frame) < _EXT_OFF + ICRC_BYTES + VCRC_BYTES:
        return False
    icrc_end = _LRH_OFF + (((frame[_LRH_OFF + 4] & 0x07) << 8 | frame[_LRH_OFF + 5]) << 2)
    pend = icrc_end - ICRC_BYTES
    if pend < _EXT_OFF or icrc_end + VCRC_BYTES > len(frame):
        return False
    m = bytearray(frame[_LRH_OFF:_EXT_OFF])
    m[0] |= 0xF0
    m[LRH_BYTES + 4] = 0xFF
    crc = _crc32(memoryview(frame)[_EXT_OFF:pend], _crc32(m))
    return crc == _S_ICRC.unpack_from(frame, pend)[0]


def fc_frame(src_mac: bytes, vl: int, fctbs: int, fccl: int) -> bytes:
    """A flow-control packet (IBA 7.9.4: Op 0, FCTBS, VL, FCCL, LPCRC) in
    its carrier frame, as switches and NICs send them."""
    body = _S_FC.pack((fctbs << 16) | (vl << 12) | fccl)
    return _CARRIER_BROADCAST + src_mac + ETH_P_IB_LINK.to_bytes(2, "big") + body + \
        vcrc(body).to_bytes(2, "little")


def parse_fc(frame) -> tuple[int, int, int] | None:
    """(VL, FCTBS, FCCL) of a carrier frame holding a flow-control packet
    whose LPCRC is right; None otherwise."""
    if len(frame) < ETH_HDR_BYTES + FC_PACKET_BYTES or \
            (frame[12] << 8 | frame[13]) != ETH_P_IB_LINK:
        return None
    body = frame[ETH_HDR_BYTES:ETH_HDR_BYTES + 4]
    if vcrc(body) != _S_VCRC.unpack_from(frame, ETH_HDR_BYTES + 4)[0]:
        return None
    (word,) = _S_FC.unpack_from(frame, ETH_HDR_BYTES)
    if word >> 28:                      # Op: 0 is a normal flow-control packet
        return None
    return (word >> 12) & 0xF, (word >> 16) & 0xFFF, word & 0xFFF
