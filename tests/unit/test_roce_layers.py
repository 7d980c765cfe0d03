"""RoCEv2 layers, ICRC and the fast build/parse path (emulator.nic.roce)."""
from __future__ import annotations

import importlib
import random
import struct

import pytest
from scapy.compat import raw
from scapy.layers.inet import IP, UDP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Raw

from emulator import wire
from emulator.nic import roce
from emulator.nic.roce import (
    AETH, BTH, DETH, RETH, CNPPadding, FrameTemplate, ImmDt, icrc, int_to_ip, ip_to_int,
    parse_roce, verify_icrc,
)

MAC1, MAC2 = "02:00:00:00:00:01", "02:00:00:00:00:02"
IP1, IP2 = "10.0.1.1", "10.0.2.1"


def frame(bth: BTH, *rest, tos=0x6A, ip_id=7, sport=49152) -> bytes:
    p = Ether(src=MAC1, dst=MAC2) / IP(src=IP1, dst=IP2, tos=tos, id=ip_id, flags="DF") \
        / UDP(sport=sport, dport=4791, chksum=0) / bth
    for layer in rest:
        p = p / layer
    return raw(p)


def wire_icrc(f: bytes) -> int:
    return struct.unpack("<I", f[-4:])[0]


# ---------------------------------------------------------------------------
# layers and bindings
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(wire.HEADER_LAYERS))
def test_wire_header_lengths_are_their_scapy_layers(name):
    module, layer, exclude = wire.HEADER_LAYERS[name]
    cls = getattr(importlib.import_module(module), layer)
    assert getattr(wire, name) == wire.layer_len_bytes(cls, exclude=exclude)


def test_a_header_length_that_differs_from_its_layer_is_found():
    # the check above reads fields_desc: a layer one byte longer gives another length
    from scapy.fields import ByteField
    from scapy.packet import Packet

    class LongerUDP(Packet):
        fields_desc = [*UDP.fields_desc, ByteField("extra", 0)]
    assert wire.layer_len_bytes(LongerUDP) == wire.UDP_HDR_BYTES + 1


@pytest.mark.parametrize("opcode", [0x06, 0x0A, 0x0C, 0x26, 0x2A])
def test_reth_round_trip(opcode):
    f = frame(BTH(opcode=opcode, dqpn=0x123456, psn=0xABCDEF, ackreq=1),
              RETH(virtual_addr=0x1122334455667788, rkey=0xDEADBEEF, dma_length=4096),
              Raw(b"x" * 64))
    p = Ether(f)
    assert RETH in p and Raw in p
    assert p[RETH].virtual_addr == 0x1122334455667788
    assert p[RETH].rkey == 0xDEADBEEF
    assert p[RETH].dma_length == 4096
    assert p[BTH].dqpn == 0x123456 and p[BTH].psn == 0xABCDEF and p[BTH].ackreq == 1
    assert p[Raw].load == b"x" * 64
    assert len(p[RETH]) - len(p[RETH].payload) == 16
    assert verify_icrc(f)


def test_write_only_with_immediate_has_reth_then_immdt():
    f = frame(BTH(opcode=0x0B), RETH(virtual_addr=0x40, rkey=1, dma_length=4),
              ImmDt(imm_data=0xCAFEF00D), Raw(b"abcd"))
    p = Ether(f)
    assert RETH in p and ImmDt in p and p[ImmDt].imm_data == 0xCAFEF00D
    assert p[Raw].load == b"abcd"
    assert parse_roce(f).imm == 0xCAFEF00D


@pytest.mark.parametrize("opcode", [0x07, 0x08, 0x00, 0x01, 0x02, 0x04])
def test_middle_last_and_send_carry_no_reth(opcode):
    p = Ether(frame(BTH(opcode=opcode), Raw(b"y" * 32)))
    assert RETH not in p and AETH not in p
    assert p[Raw].load == b"y" * 32


@pytest.mark.parametrize("opcode", [0x0D, 0x0F, 0x10, 0x11])
def test_aeth_round_trip(opcode):
    f = frame(BTH(opcode=opcode, psn=99), AETH(syndrome=0x60, msn=0x00BEEF),
              Raw(b"r" * 16) if opcode != 0x11 else Raw(b""))
    p = Ether(f)
    assert AETH in p
    assert p[AETH].syndrome == 0x60 and p[AETH].msn == 0xBEEF
    assert verify_icrc(f)
    pk = parse_roce(f)
    assert (pk.aeth_syndrome, pk.aeth_msn) == (0x60, 0xBEEF)


@pytest.mark.parametrize("opcode", [0x64, 0x65])
def test_deth_round_trip(opcode):
    layers = [DETH(qkey=0x80010000, src_qp=0xABCDE)]
    if opcode == 0x65:
        layers.append(ImmDt(imm_data=5))
    f = frame(BTH(opcode=opcode), *layers, Raw(b"u" * 8))
    p = Ether(f)
    assert DETH in p
    assert p[DETH].qkey == 0x80010000 and p[DETH].src_qp == 0xABCDE and p[DETH].reserved == 0
    assert (ImmDt in p) == (opcode == 0x65)
    assert p[Raw].load == b"u" * 8
    assert verify_icrc(f)
    assert bytes(parse_roce(f).payload) == b"u" * 8


def test_build_defaults_pick_sensible_opcodes():
    assert (BTH() / RETH()).opcode == 0x0A
    assert (BTH() / DETH()).opcode == 0x64


def test_cnp_dissects():
    p = Ether(frame(roce.cnp(0xD2)))
    assert p[BTH].opcode == 0x81 and p[BTH].becn == 1 and CNPPadding in p


# ---------------------------------------------------------------------------
# ICRC
# ---------------------------------------------------------------------------
# A CNP captured on a ConnectX-4 Lx (from scapy's test/contrib/roce.uts):
# real hardware's ICRC, with ToS 0xc2, TTL 64, BECN set -- all masked fields.
CX4_CNP = bytes.fromhex(
    "e41d2dab2bc27cfe90643b32080045c2"
    "003c718c400040119161 0a001101 0a00"
    "12010000 12b70028 00008100 ffff4000"
    "01180000000000000000000000000000"
    "0000000000 0082fd002a".replace(" ", ""))


def test_icrc_matches_real_connectx4_capture():
    assert len(CX4_CNP) == 74
    assert verify_icrc(CX4_CNP)
    assert icrc(CX4_CNP) == struct.unpack("<I", bytes.fromhex("82fd002a"))[0]


def test_icrc_agrees_with_scapy_on_many_frames():
    rng = random.Random(1)
    for _ in range(50):
        op = rng.choice([0x00, 0x04, 0x06, 0x07, 0x08, 0x0A, 0x11, 0x81])
        rest = []
        if op in (0x06, 0x0A):
            rest.append(RETH(virtual_addr=rng.getrandbits(64), rkey=rng.getrandbits(32),
                             dma_length=rng.getrandbits(32)))
        if op == 0x11:
            rest.append(AETH(syndrome=rng.getrandbits(8), msn=rng.getrandbits(24)))
        if op == 0x81:
            rest.append(CNPPadding())
        else:
            rest.append(Raw(rng.randbytes(rng.choice([0, 4, 100, 1024]))))
        f = frame(BTH(opcode=op, dqpn=rng.getrandbits(24), psn=rng.getrandbits(24),
                      fecn=rng.getrandbits(1), becn=rng.getrandbits(1), ackreq=rng.getrandbits(1)),
                  *rest, tos=rng.getrandbits(8), ip_id=rng.getrandbits(16))
        scapy_field = Ether(f)[BTH].icrc  # scapy reads the trailer big-endian
        assert icrc(f) == wire_icrc(f) == int.from_bytes(struct.pack("!I", scapy_field), "little")
        assert verify_icrc(f)


def test_icrc_ipv6_agrees_with_scapy():
    p = Ether(src=MAC1, dst=MAC2) / IPv6(src="fd00::1", dst="fd00::2", tc=0x6A, fl=0x12345, hlim=3) \
        / UDP(sport=50000, dport=4791) / BTH(opcode=0x04, psn=5) / Raw(b"z" * 40)
    f = raw(p)
    assert verify_icrc(f) and icrc(f) == wire_icrc(f)


@pytest.mark.parametrize("offset", [14 + 12, 14 + 16, 14 + 20, 14 + 22, 14 + 28, 14 + 28 + 3,
                                    14 + 28 + 7, 14 + 28 + 11, 14 + 28 + 12, -5])
def test_corrupted_byte_fails_icrc(offset):
    """src IP, dst IP, UDP ports, BTH opcode/QP/PSN, RETH, payload: all covered."""
    f = bytearray(frame(BTH(opcode=0x06, dqpn=5, psn=77), RETH(virtual_addr=1, rkey=2, dma_length=3),
                        Raw(b"p" * 32)))
    assert verify_icrc(f)
    f[offset] ^= 0x01
    assert not verify_icrc(f)


@pytest.mark.parametrize("offset,value", [(15, 0x6B), (15, 0x03), (22, 1), (24, 0x12),
                                          (40, 0xAB), (46, 0xC0)])
def test_masked_fields_do_not_change_icrc(offset, value):
    """ToS (ECN marking by a switch), TTL, IP checksum, UDP checksum, FECN/BECN."""
    f = bytearray(frame(BTH(opcode=0x0A, dqpn=5, psn=77), RETH(virtual_addr=1, rkey=2, dma_length=3),
                        Raw(b"p" * 32)))
    f[offset] = value
    assert verify_icrc(f)


def test_icrc_ignores_ethernet_padding():
    f = frame(BTH(opcode=0x11), AETH(syndrome=0, msn=1))
    assert verify_icrc(f + b"\x00" * 10)


# ---------------------------------------------------------------------------
# fast builder
# ---------------------------------------------------------------------------
def template(**kw) -> FrameTemplate:
    return FrameTemplate(MAC1, MAC2, IP1, IP2, 49999, 0x123456, max_payload_bytes=1024, **kw)


@pytest.mark.parametrize("plen", [0, 1, 3, 4, 5, 1023, 1024])
@pytest.mark.parametrize("opcode", [0x06, 0x07, 0x08, 0x0A, 0x00, 0x04])
def test_fast_frame_dissects_and_matches_scapy_bytes(opcode, plen):
    t = template()
    payload = bytes(random.Random(plen).randbytes(plen))
    reth = (0xABCDEF0123, 0x1234, 99999) if opcode in (0x06, 0x0A) else None
    f = bytes(t.build(opcode, 0xFFFFFE, payload, ack_req=True, reth=reth))
    assert verify_icrc(f)
    p = Ether(f)
    assert p[IP].src == IP1 and p[IP].dst == IP2 and p[IP].tos == (26 << 2) | 2
    assert p[IP].len == len(f) - 14 and p[UDP].len == len(f) - 34
    assert p[UDP].sport == 49999 and p[UDP].dport == 4791 and p[UDP].chksum == 0
    b = p[BTH]
    assert (b.opcode, b.psn, b.ackreq, b.dqpn, b.pkey) == (opcode, 0xFFFFFE, 1, 0x123456, 0xFFFF)
    assert b.padcount == -plen & 3
    assert (RETH in p) == (reth is not None)
    if reth:
        assert (p[RETH].virtual_addr, p[RETH].rkey, p[RETH].dma_length) == reth
    body = raw(p[RETH].payload) if reth else raw(b.payload)
    assert body == payload + b"\x00" * (-plen & 3)
    # scapy computes the IP checksum and ICRC itself and gets the same bytes
    q = p.copy()
    del q[IP].chksum
    q[BTH].icrc = None
    assert raw(q) == f


def test_fast_frames_increment_ip_id_and_keep_checksum_valid():
    t = template()
    ids = []
    for i in range(3):
        p = Ether(bytes(t.build(0x04, i, b"abcd")))
        ids.append(p[IP].id)
        chk = p[IP].chksum
        del p[IP].chksum
        assert Ether(raw(p))[IP].chksum == chk
    assert ids[1] == ids[0] + 1 and ids[2] == ids[1] + 1


def test_fast_ack_and_dscp_ecn():
    t = template(dscp=46, ecn=roce.ECN_NOT_ECT)
    f = bytes(t.ack(0x000010, roce.NAK_PSN_SEQ_ERR, 42))
    p = Ether(f)
    assert p[IP].tos == 46 << 2
    assert p[BTH].opcode == 0x11 and p[BTH].psn == 0x10
    assert p[AETH].syndrome == 0x60 and p[AETH].msn == 42
    assert len(f) == 14 + 20 + 8 + 12 + 4 + 4
    assert verify_icrc(f)


def test_a_variant_builds_what_scapy_builds_in_its_class():
    """A QP's CNP template is its data template's variant (no scapy in the
    NIC's loop): the same bytes as a template scapy builds with that ToS and
    payload room, checksum and ICRC included, over several packets."""
    rng = random.Random(11)
    for _ in range(40):
        dscp, ecn = rng.randrange(64), rng.randrange(4)
        base = template(dscp=rng.randrange(64), ecn=rng.randrange(4))
        base.pkey = rng.randrange(1 << 16)
        for _ in range(rng.randrange(3)):           # the data template's ip_id moved on
            base.build(0x0A, 1, b"xy")
        v = base.variant(dscp=dscp, ecn=ecn, max_payload_bytes=16)
        ref = FrameTemplate(MAC1, MAC2, IP1, IP2, 49999, 0x123456, dscp=dscp, ecn=ecn,
                            max_payload_bytes=16)
        ref.pkey = base.pkey
        for psn in range(3):
            got = bytes(v.build(roce.CNP_OPCODE, psn, bytes(16), becn=True))
            assert got == bytes(ref.build(roce.CNP_OPCODE, psn, bytes(16), becn=True))
            assert verify_icrc(got) and Ether(got)[IP].tos == (dscp << 2) | ecn
        with pytest.raises(ValueError):
            v.build(roce.CNP_OPCODE, 0, bytes(20))  # its payload room is its own


def test_fast_builder_rejects_oversize_payload():
    with pytest.raises(ValueError):
        template().build(0x04, 0, b"x" * 1025)


# ---------------------------------------------------------------------------
# fast parser
# ---------------------------------------------------------------------------
def assert_parse_matches_scapy(f: bytes):
    pk = parse_roce(f)
    assert pk is not None
    p = Ether(f)
    ip, udp, b = p[IP], p[UDP], p[BTH]
    assert int_to_ip(pk.src_ip) == ip.src and int_to_ip(pk.dst_ip) == ip.dst
    assert pk.udp_sport == udp.sport
    assert (pk.opcode, pk.dst_qp, pk.psn, pk.ack_req) == (b.opcode, b.dqpn, b.psn, bool(b.ackreq))
    assert (pk.fecn, pk.becn) == (bool(b.fecn), bool(b.becn))
    assert pk.ecn == ip.tos & 3 and pk.dscp == ip.tos >> 2
    if RETH in p:
        assert (pk.reth_va, pk.reth_rkey, pk.reth_len) == \
            (p[RETH].virtual_addr, p[RETH].rkey, p[RETH].dma_length)
    else:
        assert pk.reth_va is None
    if AETH in p:
        assert (pk.aeth_syndrome, pk.aeth_msn) == (p[AETH].syndrome, p[AETH].msn)
    else:
        assert pk.aeth_syndrome is None
    last = p[BTH]
    while last.payload and not isinstance(last.payload, Raw):
        last = last.payload
    body = raw(last.payload)
    if b.padcount:
        body = body[:-b.padcount]
    assert bytes(pk.payload) == body
    return pk


def test_parser_agrees_with_scapy_random_frames():
    rng = random.Random(7)
    t = template()
    for i in range(200):
        op = rng.choice([0x00, 0x01, 0x02, 0x04, 0x06, 0x07, 0x08, 0x0A, 0x11])
        plen = 0 if op == 0x11 else rng.randrange(0, 1025)
        reth = (rng.getrandbits(64), rng.getrandbits(32), rng.getrandbits(32)) \
            if op in (0x06, 0x0A) else None
        aeth = (rng.getrandbits(8), rng.getrandbits(24)) if op == 0x11 else None
        f = bytearray(t.build(op, rng.getrandbits(24), rng.randbytes(plen),
                              ack_req=rng.random() < 0.5, reth=reth, aeth=aeth,
                              fecn=rng.random() < 0.2, becn=rng.random() < 0.2))
        f[15] = rng.getrandbits(8)  # a switch re-marking DSCP/ECN
        assert_parse_matches_scapy(bytes(f))
    # scapy-built frames too, including a CNP
    assert_parse_matches_scapy(frame(roce.cnp(77)))
    assert_parse_matches_scapy(CX4_CNP)


def test_parser_handles_vlan_and_ip_options():
    base = Ether(frame(BTH(opcode=0x0A, dqpn=9, psn=3, ackreq=1),
                       RETH(virtual_addr=4096, rkey=7, dma_length=12), Raw(b"hello world!")))
    tagged = Ether(src=MAC1, dst=MAC2) / Dot1Q(vlan=5) / base[IP]
    pk = parse_roce(raw(tagged))
    assert pk is not None and pk.reth_va == 4096 and bytes(pk.payload) == b"hello world!"
    opt = Ether(src=MAC1, dst=MAC2) / IP(src=IP1, dst=IP2, options=b"\x01\x01\x01\x00") \
        / UDP(sport=1, dport=4791, chksum=0) / BTH(opcode=0x0A, dqpn=9, psn=3) \
        / RETH(virtual_addr=8, rkey=1, dma_length=3) / Raw(b"abc")
    f = raw(opt)
    assert Ether(f)[IP].ihl == 6
    pk = parse_roce(f)
    assert pk is not None and pk.reth_va == 8 and bytes(pk.payload) == b"abc"
    assert verify_icrc(f)


def test_parser_rejects_non_roce():
    assert parse_roce(raw(Ether() / IP() / UDP(dport=4792) / Raw(b"x" * 40))) is None
    assert parse_roce(raw(Ether() / IP() / TCP(dport=4791) / Raw(b"x" * 40))) is None
    assert parse_roce(raw(Ether() / ARP())) is None
    assert parse_roce(b"\x00" * 20) is None
    truncated = frame(BTH(opcode=0x04), Raw(b"x" * 100))[:80]
    assert parse_roce(truncated) is None


def test_parser_verify_option_drops_bad_icrc():
    f = bytearray(template().build(0x04, 1, b"data"))
    assert parse_roce(bytes(f), verify=True) is not None
    f[-8] ^= 0xFF
    assert parse_roce(bytes(f)) is not None
    assert parse_roce(bytes(f), verify=True) is None


def test_ip_int_helpers():
    assert ip_to_int("10.0.2.1") == 0x0A000201 and int_to_ip(0x0A000201) == "10.0.2.1"
    with pytest.raises(ValueError):
        ip_to_int("10.0.2")
