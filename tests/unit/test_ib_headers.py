"""InfiniBand packets (``emulator/ib/headers.py``): the LRH's length, the
ICRC that a switch's changes leave intact and the VCRC that each hop
recomputes, flow-control packets, the Ethernet carrier on a veth, and the
capture writer whose files tshark dissects as InfiniBand (ERF records in a
pcap, ``emulator/dataplane/pcap.py``)."""
from __future__ import annotations

import random
import shutil
import struct
import subprocess

import pytest
from scapy.contrib.roce import AETH, BTH, GRH
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from emulator.nic.roce import RC_ACK, RC_WRITE_ONLY, RETH
from emulator.clock import ManualClock
from emulator.dataplane.pcap import IbPcapWriter
from emulator.ib.headers import (
    FC_PACKET_BYTES, LNH_IBA_GLOBAL, LRH, LRH_BYTES, IBFlowControl, check_crcs, reseal_vcrc, vcrc,
)
from emulator.wire import ETH_P_IB_DATA, ETH_P_IB_LINK


def write_only(payload: bytes = b"A" * 8, **lrh) -> bytes:
    return bytes(LRH(**{"sl": 3, "vl": 1, "dlid": 0x12, "slid": 0x34, **lrh})
                 / BTH(opcode=RC_WRITE_ONLY, dqpn=0x11, psn=5)
                 / RETH(virtual_addr=0x1000, rkey=7, dma_length=len(payload)) / Raw(payload))


def reference_vcrc(data) -> int:
    """The VCRC as IBA 7.8.2 defines it, bit by bit: CRC-16, polynomial
    0x100B (reflected 0xD008), seed 0xFFFF, LSB first, inverted."""
    c = 0xFFFF
    for b in bytes(data):
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0xD008 if c & 1 else c >> 1
    return c ^ 0xFFFF


def test_the_fast_vcrc_equals_the_definition_on_random_packets():
    rng = random.Random(7)
    for n in [0, 1, 2, 3, 8, 20, 63, 64, 65, *[rng.randrange(4200) for _ in range(60)]]:
        data = bytes(rng.randrange(256) for _ in range(n))
        assert vcrc(data) == reference_vcrc(data), n
        assert vcrc(memoryview(bytearray(data))) == reference_vcrc(data)


def test_header_lengths_come_from_the_layers():
    assert LRH_BYTES == 8 and FC_PACKET_BYTES == 6


@pytest.mark.parametrize("n", [0, 4, 8, 1024])
def test_the_lrh_counts_the_packet_in_words_without_its_vcrc(n):
    p = write_only(b"x" * n)
    assert LRH(p).pktlen * 4 == len(p) - 2 == 8 + 12 + 16 + n + 4
    assert check_crcs(p) == (True, True)


def test_a_switch_changing_the_vl_or_marking_fecn_keeps_the_icrc_and_reseals_the_vcrc():
    p = bytearray(write_only())
    p[0] = (p[0] & 0x0F) | (7 << 4)                  # SL-to-VL at a hop: VL 7
    assert check_crcs(p) == (True, False)            # the VCRC covers the VL ...
    reseal_vcrc(p)
    assert check_crcs(p) == (True, True)             # ... the ICRC does not
    p[8 + 4] |= 0x80                                 # BTH FECN: variant too
    assert check_crcs(reseal_vcrc(p)) == (True, True)


def test_any_other_flipped_bit_breaks_both_crcs():
    rng = random.Random(7)
    good = write_only(bytes(rng.randrange(256) for _ in range(64)))
    variant = {0: 0xF0, 12: 0xFF}                     # LRH VL bits, BTH Resv8a
    for _ in range(200):
        i = rng.randrange(len(good) - 6)             # not the CRCs themselves
        bit = 1 << rng.randrange(8)
        if variant.get(i, 0) & bit:
            continue
        p = bytearray(good)
        p[i] ^= bit
        assert check_crcs(p) == (False, False), f"byte {i} bit {bit:#x}"


def test_under_a_grh_the_hop_limit_and_traffic_class_are_variant_too():
    p = bytearray(bytes(LRH(lnh=LNH_IBA_GLOBAL, dlid=1, slid=2) / GRH(hoplmt=64, nexthdr=0x1B)
                        / BTH(opcode=RC_ACK, dqpn=3) / AETH(msn=1)))
    assert check_crcs(p) == (True, True)
    p[8 + 7] = 63                                    # a router decremented the hop limit
    p[8 + 0] |= 0x0A                                 # and set a traffic class
    assert check_crcs(reseal_vcrc(p)) == (True, True)


def test_a_flow_control_packet_carries_fctbs_vl_fccl_and_its_lpcrc():
    raw = bytes(IBFlowControl(fctbs=100, vl=2, fccl=4095))
    assert len(raw) == 6 and raw[:4] == bytes.fromhex("0064 2fff")
    assert struct.unpack("<H", raw[4:])[0] == vcrc(raw[:4])
    back = IBFlowControl(raw)
    assert (back.op, back.fctbs, back.vl, back.fccl) == (0, 100, 2, 4095)


def test_switches_and_nics_build_the_same_flow_control_packet_as_the_layer():
    from emulator.ib.frames import fc_frame, parse_fc
    frame = fc_frame(bytes(6), vl=3, fctbs=4000, fccl=17)
    assert frame[12:14] == ETH_P_IB_LINK.to_bytes(2, "big")
    assert frame[14:] == bytes(IBFlowControl(fctbs=4000, vl=3, fccl=17))
    assert parse_fc(frame) == (3, 4000, 17)
    bad = bytearray(frame)
    bad[15] ^= 0x01                                  # one bit of FCTBS: the LPCRC no longer matches
    assert parse_fc(bytes(bad)) is None
    assert parse_fc(frame[:-1]) is None


def test_the_vcrc_of_a_packet_and_its_vcrc_is_a_constant_residue():
    rng = random.Random(1)
    residues = {vcrc(d + struct.pack("<H", vcrc(d)))
                for d in (bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
                          for _ in range(50))}
    assert len(residues) == 1                        # a CRC, not a checksum of some bytes


def test_the_carrier_frame_dissects_as_the_packet_it_carries():
    data = Ether(bytes(Ether(type=ETH_P_IB_DATA)) + write_only())
    assert data[LRH].dlid == 0x12 and data[BTH].opcode == RC_WRITE_ONLY and data[RETH].rkey == 7
    link = Ether(bytes(Ether(type=ETH_P_IB_LINK) / IBFlowControl(fctbs=5, vl=0, fccl=9)))
    assert link[IBFlowControl].fccl == 9


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_tshark_dissects_the_capture_as_infiniband_data_and_link_packets(tmp_path):
    path = tmp_path / "port.pcap"
    w = IbPcapWriter(path, ManualClock())
    w.write(1_000, bytes(Ether(type=ETH_P_IB_DATA)) + write_only())
    w.write(2_000, bytes(Ether(type=ETH_P_IB_LINK) / IBFlowControl(fctbs=100, vl=0, fccl=300)))
    w.close()
    out = subprocess.run(
        ["tshark", "-r", str(path), "-T", "fields", "-E", "separator=,", "-e", "_ws.col.Protocol",
         "-e", "infiniband.lrh.dlid", "-e", "infiniband.bth.opcode", "-e", "infiniband.reth.r_key",
         "-e", "infiniband_link.fccl", "-e", "_ws.expert"],
        capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["InfiniBand,18,10,0x00000007,,", "InfiniBand Link,,,,300,"]
