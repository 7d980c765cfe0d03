"""A QP's frame template: its header is the bytes Scapy builds for it,
though Scapy builds only one per NIC and class (``roce_frames._header``)."""
from __future__ import annotations

import random

from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulator.nic import roce_frames
from emulator.nic.roce import RC_SEND_ONLY
from emulator.wire import BTH_OFFSET, ROCEV2_UDP_DPORT


def scapy_header(src_mac, dst_mac, src_ip, dst_ip, tos, ttl, sport, pkey, dqpn) -> bytes:
    return bytes(Ether(src=src_mac, dst=dst_mac)
                 / IP(src=src_ip, dst=dst_ip, tos=tos, ttl=ttl, flags="DF", id=0)
                 / UDP(sport=sport, dport=ROCEV2_UDP_DPORT, chksum=0)
                 / BTH(opcode=RC_SEND_ONLY, pkey=pkey, dqpn=dqpn, psn=0))[:BTH_OFFSET + 12]


def test_every_qps_header_is_the_one_scapy_builds_for_it():
    rng = random.Random(7)
    roce_frames._SHAPES.clear()
    for _ in range(300):
        # few NICs and classes (the cache's keys), many peers
        src_mac = rng.choice(["02:00:0a:00:01:01", "02:00:0a:00:02:07"])
        src_ip = rng.choice(["10.0.1.1", "10.0.2.7"])
        tos, ttl, pkey = rng.choice([(26 << 2) | 2, 104, 0]), rng.choice([64, 1]), \
            rng.choice([0xFFFF, 0x8001])
        dst_mac = ":".join(f"{rng.randrange(256):02x}" for _ in range(6))
        dst_ip = ".".join(str(rng.randrange(256)) for _ in range(4))
        sport, dqpn = rng.randrange(65536), rng.randrange(1 << 24)
        args = (src_mac, dst_mac, src_ip, dst_ip, tos, ttl, sport, pkey, dqpn)
        assert roce_frames._header(*args) == scapy_header(*args), args
    assert len(roce_frames._SHAPES) <= 2 * 2 * 3 * 2 * 2      # built once per shape


def test_a_template_builds_the_frame_of_its_qp():
    tpl = roce_frames.FrameTemplate("02:00:0a:00:01:01", "02:fa:00:00:00:01", "10.0.1.1",
                                    "10.0.2.1", 0xC011, 0x22, max_payload_bytes=64)
    frame = Ether(bytes(tpl.build(RC_SEND_ONLY, 5, b"abcd")))
    assert frame[IP].dst == "10.0.2.1" and frame[UDP].sport == 0xC011
    assert frame[BTH].dqpn == 0x22 and frame[BTH].psn == 5
    ip = frame[IP].copy()
    del ip.chksum                                              # Scapy's own, from scratch
    assert IP(bytes(ip)).chksum == frame[IP].chksum


def test_a_parsed_packet_is_a_roce_packet_with_every_field():
    """parse_roce builds its RocePacket with tuple.__new__: the same type,
    fields and value as RocePacket(...) would give."""
    tpl = roce_frames.FrameTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1",
                                    "10.0.0.2", 50000, 17, max_payload_bytes=1024)
    frame = bytes(tpl.build(0x06, 5, b"x" * 1001, ack_req=True, reth=(1 << 40, 7, 4096)))
    pkt = roce_frames.parse_roce(frame, verify=True)
    assert type(pkt) is roce_frames.RocePacket
    assert pkt == roce_frames.RocePacket(*pkt) and len(pkt) == len(roce_frames.RocePacket._fields)
    assert (pkt.udp_sport, pkt.opcode, pkt.dst_qp, pkt.psn, pkt.ack_req) == (50000, 0x06, 17, 5, True)
    assert (pkt.reth_va, pkt.reth_rkey, pkt.reth_len, pkt.aeth_msn) == (1 << 40, 7, 4096, None)
    assert bytes(pkt.payload) == b"x" * 1001
