"""INT for HPCC (emulator/int_md.py): the Scapy layers define the layout, the
fast paths (insert, strip, push_hop) must agree with them byte for byte."""
from __future__ import annotations

import random

import pytest
from scapy.compat import raw
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulator import int_md
from emulator.nic.roce import RC_ACK, RC_WRITE_ONLY, FrameTemplate, parse_roce, verify_icrc
from emulator.dataplane.ipv4_checks import ipv4_checksum_ok
from emulator.int_md import (
    INT_HOP_BYTES, INT_KIND_COLLECT, INT_KIND_ECHO, INT_MAX_HOPS, INT_OFFSET, INT_SHIM_BYTES,
    INT_UDP_DPORT, IntHop, IntShim,
)
from emulator.wire import ROCEV2_UDP_DPORT


def _frame(payload_len: int = 100, psn: int = 5) -> bytes:
    tpl = FrameTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.1.1", "10.0.2.1",
                        49153, 0x11, max_payload_bytes=1024)
    return bytes(tpl.build(RC_WRITE_ONLY, psn, bytes(i & 0xFF for i in range(payload_len)), ack_req=True,
                           reth=(0x1000, 0x42, payload_len)))


def test_lengths_come_from_the_layers():
    assert INT_SHIM_BYTES == 8 and INT_HOP_BYTES == 16
    assert len(raw(IntShim(hops=[IntHop()] * 3))) == int_md.int_bytes(3) == 56


def test_insert_matches_scapy_and_keeps_a_valid_ipv4_header():
    plain = _frame()
    out = int_md.insert(plain, INT_KIND_COLLECT, 3)
    assert len(out) == len(plain) + int_md.int_bytes(3)
    assert ipv4_checksum_ok(out)
    p = Ether(bytes(out))
    assert p[UDP].dport == INT_UDP_DPORT and p[UDP].len == len(out) - 34
    assert p[IP].len == len(out) - 14
    shim = p[IntShim]
    assert (shim.kind, shim.hop_count, shim.max_hops, shim.orig_dport) == (1, 0, 3, ROCEV2_UDP_DPORT)
    assert len(shim.hops) == 3 and all(raw(h) == bytes(16) for h in shim.hops)
    assert p[BTH].opcode == RC_WRITE_ONLY and p[BTH].psn == 5     # dissected past the stack


def test_strip_restores_the_source_frame_and_its_icrc():
    plain = _frame()
    out = int_md.insert(plain, INT_KIND_COLLECT, 5)
    assert not verify_icrc(out) or parse_roce(out) is None   # not a RoCEv2 frame as it stands
    back = int_md.strip(out)
    assert bytes(back.frame) == plain and back.kind == INT_KIND_COLLECT
    assert back.max_hops == 5 and back.hops == b""
    assert verify_icrc(back.frame)


def test_push_hop_fills_the_next_slot_like_scapy_builds_it():
    rng = random.Random(7)
    for _ in range(50):
        n = rng.randint(1, INT_MAX_HOPS)
        out = int_md.insert(_frame(rng.randint(0, 1024)), INT_KIND_COLLECT, n)
        recs = [tuple(rng.getrandbits(32) for _ in range(4)) for _ in range(rng.randint(0, n))]
        for r in recs:
            assert int_md.push_hop(out, *r)
        shim = Ether(bytes(out))[IntShim]
        assert shim.hop_count == len(recs)
        assert [(h.qlen_bytes, h.tx_bytes, h.ts_ns, h.rate_mbps) for h in shim.hops[:len(recs)]] == recs
        stripped = int_md.strip(out)
        assert [tuple(h) for h in int_md.unpack_hops(stripped.hops)] == recs
        assert verify_icrc(stripped.frame)


def test_a_full_stack_or_an_echo_is_not_written():
    out = int_md.insert(_frame(), INT_KIND_COLLECT, 1)
    assert int_md.push_hop(out, 1, 2, 3, 4)
    before = bytes(out)
    assert not int_md.push_hop(out, 5, 6, 7, 8) and bytes(out) == before
    echo = int_md.insert(_frame(), INT_KIND_ECHO, 2, bytes(out[INT_OFFSET + 8:INT_OFFSET + 24]))
    before = bytes(echo)
    assert not int_md.push_hop(echo, 5, 6, 7, 8) and bytes(echo) == before
    assert Ether(before)[IntShim].hop_count == 1


def test_echo_carries_the_records_back_in_an_ack():
    tpl = FrameTemplate("02:00:00:00:00:02", "02:00:00:00:00:01", "10.0.2.1", "10.0.1.1",
                        49154, 0x22, max_payload_bytes=1024)
    ack = bytes(tpl.build(RC_ACK, 9, aeth=(0x1F, 1)))
    recs = b"".join(int(i).to_bytes(4, "big") for i in range(8))      # two records
    out = int_md.insert(ack, INT_KIND_ECHO, 3, recs)
    shim = Ether(bytes(out))[IntShim]
    assert (shim.kind, shim.hop_count, shim.max_hops) == (INT_KIND_ECHO, 2, 3)
    back = int_md.strip(out)
    assert back.hops == recs and bytes(back.frame) == ack
    assert parse_roce(back.frame).opcode == RC_ACK


@pytest.mark.parametrize("count,max_hops,cut", [(4, 3, 0), (0, 3, 60), (0, 5, 100)])
def test_strip_refuses_a_stack_that_does_not_fit(count, max_hops, cut):
    out = int_md.insert(_frame(20), INT_KIND_COLLECT, 3)
    out[INT_OFFSET + 1] = count
    out[INT_OFFSET + 2] = max_hops
    if cut:
        out = out[:INT_OFFSET + cut]
    assert int_md.strip(out) is None


def test_is_int_only_for_ipv4_udp_to_the_int_port():
    out = int_md.insert(_frame(), INT_KIND_COLLECT, 2)
    assert int_md.is_int(out)
    assert not int_md.is_int(_frame())
    tcp = bytearray(out)
    tcp[23] = 6
    assert not int_md.is_int(tcp)


def test_wireshark_dissects_the_stack_then_rocev2(tmp_path):
    """emulator/wireshark/int_hpcc.lua: the records, then the BTH as RoCEv2."""
    import shutil
    import subprocess
    from pathlib import Path
    from scapy.utils import wrpcap
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed (apt install tshark)")
    script = Path(__file__).resolve().parents[2] / "emulator" / "wireshark" / "int_hpcc.lua"
    out = int_md.insert(_frame(), INT_KIND_COLLECT, 3)
    assert int_md.push_hop(out, 1000, 2000, 3000, 25000)
    wrpcap(str(tmp_path / "int.pcap"), [Ether(bytes(out))])
    res = subprocess.run(["tshark", "-X", f"lua_script:{script}", "-r", str(tmp_path / "int.pcap"),
                          "-T", "fields", "-e", "int.kind", "-e", "int.hop_count",
                          "-e", "int.max_hops", "-e", "int.hop.qlen_bytes", "-e", "int.hop.rate_mbps",
                          "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.psn"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    kind, count, max_hops, qlen, rate, opcode, psn = res.stdout.strip().split("\t")
    assert (kind, count, max_hops) == ("1", "1", "3")
    assert qlen.split(",") == ["1000", "0", "0"] and rate.split(",")[0] == "25000"
    assert (opcode, psn) == (str(RC_WRITE_ONLY), "5")
