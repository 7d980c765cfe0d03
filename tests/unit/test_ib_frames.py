"""The InfiniBand NIC's fast path (``emulator/ib/frames.py``) against the
layers that define the format (``emulator/ib/headers.py``, Scapy): random
packets built by the template are what Scapy builds from the same fields,
``parse_ib`` reads back what Scapy dissects, and both CRCs check."""
from __future__ import annotations

import random

import pytest
from scapy.contrib.roce import AETH, BTH
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from emulator.nic.roce import RC_ACK, RC_SEND_ONLY_IMM, RC_WRITE_FIRST, RC_WRITE_ONLY, RETH, ImmDt
from emulator.ib.frames import IbFrameTemplate, parse_ib
from emulator.ib.headers import LRH, check_crcs
from emulator.wire import ETH_P_IB_DATA

MAC1, MAC2 = "02:00:00:00:0a:01", "02:00:00:00:0a:02"
OPS = [0x00, 0x01, 0x02, 0x04, RC_WRITE_FIRST, 0x07, 0x08, RC_WRITE_ONLY, RC_ACK, RC_SEND_ONLY_IMM]


def scapy_packet(t: IbFrameTemplate, op, psn, payload, ack_req, reth, aeth, imm, fecn, becn) -> bytes:
    layers = LRH(sl=t.sl, dlid=t.dlid, slid=t.slid) / BTH(
        opcode=op, dqpn=t.dst_qp, psn=psn, ackreq=ack_req, fecn=fecn, becn=becn,
        padcount=-len(payload) & 3, pkey=t.pkey)
    if reth is not None:
        layers /= RETH(virtual_addr=reth[0], rkey=reth[1], dma_length=reth[2])
    if aeth is not None:
        layers /= AETH(syndrome=aeth[0], msn=aeth[1])
    if imm is not None:
        layers /= ImmDt(imm_data=imm)
    layers /= Raw(payload + bytes(-len(payload) & 3))
    return bytes(Ether(src=MAC1, dst=MAC2, type=ETH_P_IB_DATA)) + bytes(layers)


@pytest.mark.parametrize("seed", range(4))
def test_the_template_builds_what_scapy_builds_and_parse_reads_it_back(seed):
    rng = random.Random(seed)
    t = IbFrameTemplate(MAC1, MAC2, slid=rng.randrange(1, 0xBFFF), dlid=rng.randrange(1, 0xBFFF),
                        dst_qp=rng.getrandbits(24), sl=rng.randrange(16), max_payload_bytes=1024)
    for _ in range(60):
        op = rng.choice(OPS)
        plen = 0 if op == RC_ACK else rng.randrange(0, 1025)
        payload = rng.randbytes(plen)
        reth = (rng.getrandbits(64), rng.getrandbits(32), rng.getrandbits(32)) \
            if op in (RC_WRITE_FIRST, RC_WRITE_ONLY) else None
        aeth = (rng.getrandbits(8), rng.getrandbits(24)) if op == RC_ACK else None
        imm = rng.getrandbits(32) if op == RC_SEND_ONLY_IMM else None
        ack_req, fecn, becn = (rng.random() < 0.5 for _ in range(3))
        psn = rng.getrandbits(24)
        built = bytes(t.build(op, psn, payload, ack_req=ack_req, reth=reth, aeth=aeth, imm=imm,
                              fecn=fecn, becn=becn))
        assert built == scapy_packet(t, op, psn, payload, ack_req, reth, aeth, imm, fecn, becn)
        assert check_crcs(built[14:]) == (True, True)
        pk = parse_ib(built)
        assert (pk.slid, pk.dlid, pk.sl, pk.opcode, pk.dst_qp, pk.psn) == \
            (t.slid, t.dlid, t.sl, op, t.dst_qp, psn)
        assert (pk.ack_req, pk.fecn, pk.becn, pk.imm) == (ack_req, fecn, becn, imm)
        assert (pk.reth_va, pk.reth_rkey, pk.reth_len) == (reth or (None, None, None))
        assert (pk.aeth_syndrome, pk.aeth_msn) == (aeth or (None, None))
        assert bytes(pk.payload) == payload


def test_a_variant_builds_what_scapy_builds_with_its_own_payload_room():
    """A QP's CNP template is a copy of its data template (no scapy in the
    NIC's loop): the packets Scapy builds from the same fields, both CRCs
    right, its own buffer (building on one leaves the other's packet)."""
    rng = random.Random(5)
    t = IbFrameTemplate(MAC1, MAC2, slid=rng.randrange(1, 0xBFFF), dlid=rng.randrange(1, 0xBFFF),
                        dst_qp=rng.getrandbits(24), sl=rng.randrange(16), max_payload_bytes=1024)
    t.pkey = 0x8123
    v = t.variant(max_payload_bytes=16)
    for psn in range(4):
        built = bytes(v.build(0x81, psn, bytes(16), becn=True))
        assert built == scapy_packet(t, 0x81, psn, bytes(16), False, None, None, None, False, True)
        assert check_crcs(built[14:]) == (True, True)
    cnp = v.build(0x81, 9, bytes(16), becn=True)
    kept = bytes(cnp)
    t.build(RC_WRITE_ONLY, 1, bytes(1000), reth=(1, 2, 1000))
    assert bytes(cnp) == kept
    with pytest.raises(ValueError):
        v.build(0x81, 0, bytes(20))


def test_a_switch_remapping_the_vl_is_read_back_and_frames_that_are_not_ib_are_not():
    t = IbFrameTemplate(MAC1, MAC2, slid=1, dlid=2, dst_qp=3, vl=0)
    f = bytearray(t.build(RC_WRITE_ONLY, 9, b"x" * 8, reth=(0, 1, 8)))
    f[14] = (5 << 4) | (f[14] & 0x0F)
    assert parse_ib(f).vl == 5
    assert parse_ib(bytes(f[:30])) is None                        # truncated
    ipv4 = bytes(Ether(type=0x0800)) + bytes(40)
    assert parse_ib(ipv4) is None
    short = bytearray(f)
    short[14 + 5] = 200                                           # PktLen beyond the frame
    assert parse_ib(short) is None


def test_an_ack_answers_congestion_with_becn():
    t = IbFrameTemplate(MAC1, MAC2, slid=4, dlid=7, dst_qp=11)
    pk = parse_ib(bytes(t.ack(psn=5, syndrome=0, msn=3, becn=True)))
    assert pk.opcode == RC_ACK and pk.becn and not pk.fecn and pk.aeth_msn == 3
    assert LRH(bytes(t.ack(5, 0, 3))[14:]).pktlen * 4 == 8 + 12 + 4 + 4
