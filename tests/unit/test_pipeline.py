"""fabric.p4's ingress on the embedded target, programmed over real P4Runtime.

Every test starts a ``P4RuntimeServer`` on 127.0.0.1 (ephemeral port) with a
fresh ``SwitchState``, connects a ``SwitchConnection`` as the primary, sets
the pipeline and writes the controller's ``switch_entities`` for leaf1 of
clos-2x2 (plus a case's ACL entries), then drives
``FabricPipeline(state, p4info).ingress(frame, port)`` with Scapy-built
frames. The expectations come from ``tests/packet_cases.py`` (PTF style:
frame + ingress port -> frames + egress ports, or dropped) and are built from
fabric.p4 alone, so they can be replayed against BMv2.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulator.nic.roce import BTH, RETH, verify_icrc
from emulator.control.p4rt_client import SwitchConnection
from emulator.dataplane.p4rt_server import P4RuntimeServer
from emulator.dataplane.pipeline import DROP_PORT, FabricPipeline
from emulator.dataplane.state import SwitchState
from emulator.p4.p4info import P4Info
from tests import packet_cases as pc
from tests.packet_cases import (
    CASE_IDS, CASES, CPU_PORT, DEVICE_ID, H1_IP, H1_MAC, H1_PORT, H2_IP, H2_MAC, H2_PORT,
    PUNT_ARP, PUNT_ROCE_FROM_PORT1, REMOTE_IP, ROUTER_MAC, UPLINK_MAC, UPLINKS, malformed_counts, program,
    rocev2, to_h1, to_h2, to_uplink, verify,
)
from tests.switch_rig import p4rt_switch

COUNTER_CELLS = 256


@pytest.fixture(scope="module")
def p4info():
    return P4Info.load()


@dataclass
class Target:
    """One embedded switch without sockets: state, its P4Runtime server, a controller, ingress."""

    state: SwitchState
    server: P4RuntimeServer
    conn: SwitchConnection
    p4: P4Info
    pipeline: FabricPipeline

    def send(self, frame: bytes, port: int) -> tuple[tuple[int, bytes], ...]:
        """PTF-style outcome of one frame: ((egress port, frame),) or () when dropped."""
        egress, out = self.pipeline.ingress(frame, port)
        return () if egress == DROP_PORT else ((egress, bytes(out)),)

    def counter(self, name: str) -> dict[int, tuple[int, int]]:
        """Every cell of a counter, read back over P4Runtime."""
        cells = self.conn.read_counter(name)
        assert sorted(cells) == list(range(COUNTER_CELLS))
        return cells


@pytest.fixture
def target(p4info):
    with p4rt_switch(p4info, DEVICE_ID) as (state, server, conn):
        yield Target(state, server, conn, p4info, FabricPipeline(state, p4info))


# ---------------------------------------------------------------- the case table

@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_case(target, case):
    program(target.conn, target.p4, case.acl)
    first = target.send(case.frame, case.ingress_port)
    verify(first, case)
    # The same frame again: now served from the flow cache, same outcome.
    assert target.send(case.frame, case.ingress_port) == first
    drops = target.conn.read_counter("pipeline_drop_counter", index=case.ingress_port)
    assert drops[case.ingress_port] == ((2, 2 * len(case.frame)) if case.dropped else (0, 0))
    # A malformed packet counts in its reason's cell, and only there.
    assert malformed_counts(target.conn, case.ingress_port) == case.malformed_counts(times=2)


# ---------------------------------------------------------------- routing in detail

def test_routed_rocev2_frame_dissected(target):
    program(target.conn, target.p4)
    frame = rocev2(H2_IP, H1_IP, src_mac=H2_MAC, ttl=64, payload_len=512, psn=0x123456)
    (port, out), = target.send(frame, H2_PORT)
    assert port == H1_PORT
    assert len(out) == len(frame)
    p, q = Ether(out), Ether(frame)
    assert (p.dst, p.src, p.type) == (H1_MAC, ROUTER_MAC, 0x0800)
    assert p[IP].ttl == 63
    for f in ("version", "ihl", "tos", "len", "id", "flags", "frag", "proto", "src", "dst"):
        assert getattr(p[IP], f) == getattr(q[IP], f), f
    # The header checksum is what Scapy computes for the new header.
    recomputed = p[IP].copy()
    recomputed.remove_payload()
    del recomputed.chksum
    assert p[IP].chksum == IP(raw(recomputed)).chksum != q[IP].chksum
    # UDP, BTH, RETH, payload and ICRC: byte for byte what came in.
    assert out[34:] == frame[34:]
    assert (p[UDP].sport, p[UDP].dport, p[UDP].chksum) == (49152, 4791, 0)
    assert (p[BTH].opcode, p[BTH].psn, p[BTH].dqpn) == (0x0A, 0x123456, 0x111)
    assert p[RETH].dma_length == 512
    assert out[-4:] == frame[-4:] and verify_icrc(out)   # ICRC skips TTL and checksum


def test_ecmp_spreads_udp_source_ports_over_both_uplinks(target):
    program(target.conn, target.p4)
    chosen = {}
    for sport in range(49152, 49152 + 64):
        frame = rocev2(H1_IP, REMOTE_IP, src_mac=H1_MAC, sport=sport)
        (port, out), = target.send(frame, H1_PORT)
        assert port in UPLINKS
        assert out == to_uplink(frame, port)           # dmac = that spine's router MAC
        chosen[sport] = port
    assert set(chosen.values()) == set(UPLINKS), chosen
    # The selector hashes the 5-tuple only: TTL, IP id, DSCP, length, PSN and
    # the ingress port do not move a flow; a fresh pipeline agrees.
    fresh = FabricPipeline(target.state, target.p4)
    for sport, port in chosen.items():
        for variant, ingress in ((dict(ttl=9, ip_id=sport, tos=0, payload_len=900, psn=3), H1_PORT),
                                 (dict(ttl=200, ip_id=1, payload_len=16), H2_PORT)):
            frame = rocev2(H1_IP, REMOTE_IP, src_mac=H1_MAC, sport=sport, **variant)
            assert target.send(frame, ingress) == ((port, to_uplink(frame, port)),)
            assert fresh.ingress(frame, ingress)[0] == port


def test_more_specific_route_beats_ecmp_prefix_and_default_route_catches_the_rest(target):
    p4 = target.p4
    ents = program(target.conn, p4)
    member_of_port = {p4.decode_action(m.action).param(p4.param_id("set_nexthop", "port")): m.member_id
                      for m in ents["members"]}
    target.conn.insert([
        p4.table_entry("ipv4_lpm", {"ipv4_dst": (REMOTE_IP, 32)}, member_id=member_of_port[4]),
        # No match field at all: the LPM don't-care (/0) entry.
        p4.table_entry("ipv4_lpm", {}, member_id=member_of_port[3]),
    ])
    for sport in range(49152, 49152 + 16):
        f = rocev2(H1_IP, REMOTE_IP, src_mac=H1_MAC, sport=sport)
        assert target.send(f, H1_PORT) == ((4, to_uplink(f, 4)),)
    f = rocev2(H1_IP, pc.UNROUTED_IP, src_mac=H1_MAC)
    assert target.send(f, H1_PORT) == ((3, to_uplink(f, 3)),)
    f = rocev2()
    assert target.send(f, H2_PORT) == ((H1_PORT, to_h1(f)),)   # /32 still beats /0


# ---------------------------------------------------------------- no pipeline config

def test_everything_dropped_before_a_pipeline_config(target, p4info):
    frames = [(rocev2(), H2_PORT), (rocev2(H1_IP, REMOTE_IP, src_mac=H1_MAC), H1_PORT),
              (pc.arp_request(), H1_PORT)]
    for frame, port in frames:
        assert target.send(frame, port) == ()
    assert target.state.counters == {}        # nothing counted either
    # A pipeline with empty tables: still dropped, now counted as pipeline drops.
    target.conn.set_pipeline(p4info)
    for frame, port in frames:
        assert target.send(frame, port) == ()
    drops = target.counter("pipeline_drop_counter")
    assert drops[H2_PORT] == (1, len(frames[0][0]))
    assert drops[H1_PORT] == (2, len(frames[1][0]) + len(frames[2][0]))


# ---------------------------------------------------------------- counters

def test_port_counters_count_packets_and_bytes(target):
    program(target.conn, target.p4, [PUNT_ARP])
    rx = {i: [0, 0] for i in range(COUNTER_CELLS)}
    enq = {i: [0, 0] for i in range(COUNTER_CELLS)}
    drop = {i: [0, 0] for i in range(COUNTER_CELLS)}

    def add(table, index, frame):
        table[index][0] += 1
        table[index][1] += len(frame)

    traffic = [(rocev2(payload_len=n), H2_PORT) for n in (64, 300, 1024)]
    traffic += [(rocev2(H1_IP, REMOTE_IP, src_mac=H1_MAC, sport=s, payload_len=200), H1_PORT)
                for s in range(49152, 49160)]
    traffic += [(rocev2(dst_mac=H1_MAC), H2_PORT),            # my_station miss: drop
                (rocev2(ttl=1), H2_PORT),                      # TTL: drop
                (rocev2(H1_IP, pc.UNROUTED_IP, src_mac=H1_MAC), H1_PORT),  # no route: drop
                (pc.arp_request(), H1_PORT)]                   # ACL punt: to CPU, no enq
    punted = 0
    for frame, port in traffic:
        got = target.send(frame, port)
        add(rx, port, frame)
        if not got:
            add(drop, port, frame)
        elif got[0][0] == CPU_PORT:
            punted += 1
        else:
            add(enq, got[0][0], frame)
    assert punted == 1
    assert enq[H1_PORT] == [3, sum(len(rocev2(payload_len=n)) for n in (64, 300, 1024))]
    assert enq[3][0] + enq[4][0] == 8          # which uplink each flow took: as observed
    assert drop[H2_PORT][0] == 2 and drop[H1_PORT][0] == 1
    for name, want in (("rx_port_counter", rx), ("enq_port_counter", enq),
                       ("pipeline_drop_counter", drop)):
        got = target.counter(name)
        assert {i: list(v) for i, v in got.items()} == want, name
    # Egress counts at dequeue (the switch's traffic manager), not in ingress.
    assert set(target.counter("tx_port_counter").values()) == {(0, 0)}


def test_packet_out_takes_no_lookup_and_counts_enq_only(target):
    program(target.conn, target.p4)
    outs = []
    target.state.packet_out_handler = lambda payload, port: outs.append(
        (target.pipeline.packet_out(payload, port), payload))
    frame = rocev2(dst_mac=H2_MAC, src_mac=ROUTER_MAC, ttl=1)   # would be dropped by ingress
    target.conn.packet_out(frame, 2)
    deadline = time.monotonic() + 5
    while not outs and time.monotonic() < deadline:
        time.sleep(0.01)
    assert outs == [(2, frame)]
    assert target.counter("enq_port_counter")[2][0] == 1
    assert set(target.counter("rx_port_counter").values()) == {(0, 0)}
    assert set(target.counter("pipeline_drop_counter").values()) == {(0, 0)}


# ---------------------------------------------------------------- writes after a flow is cached

def _member_of_port(target, ents, port: int) -> int:
    p4 = target.p4
    return next(m.member_id for m in ents["members"]
                if p4.decode_action(m.action).param(p4.param_id("set_nexthop", "port")) == port)


def test_modified_member_redirects_a_cached_flow(target):
    p4 = target.p4
    ents = program(target.conn, p4)
    frame = rocev2()
    for _ in range(3):
        assert target.send(frame, H2_PORT) == ((H1_PORT, to_h1(frame)),)
    new_mac = "02:00:00:00:99:99"
    target.conn.modify(p4.action_profile_member(
        "ecmp_selector", _member_of_port(target, ents, H1_PORT), "set_nexthop",
        {"port": 2, "smac": ROUTER_MAC, "dmac": new_mac}))
    assert target.send(frame, H2_PORT) == ((2, pc.routed(frame, ROUTER_MAC, new_mac)),)


def test_deleted_and_reinserted_route_applies_to_a_cached_flow(target):
    p4 = target.p4
    ents = program(target.conn, p4)
    frame = rocev2()
    assert target.send(frame, H2_PORT) == ((H1_PORT, to_h1(frame)),)
    route = p4.table_entry("ipv4_lpm", {"ipv4_dst": (H1_IP, 32)},
                           member_id=_member_of_port(target, ents, H1_PORT))
    target.conn.delete(route)
    assert target.send(frame, H2_PORT) == ()
    target.conn.insert(route)
    assert target.send(frame, H2_PORT) == ((H1_PORT, to_h1(frame)),)
    # my_station gone: nothing is routed any more.
    target.conn.delete(p4.table_entry("my_station", {"eth_dst": ROUTER_MAC}))
    assert target.send(frame, H2_PORT) == ()


def test_acl_written_after_a_flow_was_cached_takes_effect(target):
    p4 = target.p4
    program(target.conn, p4)
    frame = rocev2(H1_IP, H2_IP, src_mac=H1_MAC)
    for _ in range(2):
        assert target.send(frame, H1_PORT) == ((H2_PORT, to_h2(frame)),)
    target.conn.insert(PUNT_ROCE_FROM_PORT1.entry(p4))
    assert target.send(frame, H1_PORT) == ((CPU_PORT, to_h2(frame)),)
    target.conn.delete(PUNT_ROCE_FROM_PORT1.entry(p4))
    assert target.send(frame, H1_PORT) == ((H2_PORT, to_h2(frame)),)


def test_modified_ecmp_group_moves_cached_flows(target):
    p4 = target.p4
    ents = program(target.conn, p4)
    frames = [rocev2(H1_IP, REMOTE_IP, src_mac=H1_MAC, sport=s) for s in range(49152, 49152 + 32)]
    before = [target.send(f, H1_PORT)[0][0] for f in frames]
    assert set(before) == set(UPLINKS)
    group = ents["groups"][0]
    only4 = p4.action_profile_group("ecmp_selector", group.group_id,
                                    [_member_of_port(target, ents, 4)], max_size=group.max_size)
    target.conn.modify(only4)
    for f in frames:
        assert target.send(f, H1_PORT) == ((4, to_uplink(f, 4)),)
    target.conn.modify(group)
    assert [target.send(f, H1_PORT)[0][0] for f in frames] == before


def test_new_pipeline_config_empties_tables_and_counters(target):
    program(target.conn, target.p4)
    frame = rocev2()
    assert target.send(frame, H2_PORT) == ((H1_PORT, to_h1(frame)),)
    target.conn.set_pipeline(target.p4)
    assert target.send(frame, H2_PORT) == ()
    assert target.counter("rx_port_counter")[H2_PORT] == (1, len(frame))
    assert target.counter("enq_port_counter")[H1_PORT] == (0, 0)


def test_every_uplink_mac_is_a_spine_router_mac():
    # Guards the expectations above: the ECMP next hops are the spines' router MACs.
    assert UPLINK_MAC == {3: pc.PLAN.router_mac("spine1"), 4: pc.PLAN.router_mac("spine2")}
    assert H1_MAC == pc.PLAN.host_mac("h1") and H1_PORT == 1


def test_ecmp_hash_is_bmv2_crc16():
    """The selector hash is CRC-16/ARC (BMv2's crc16): its check value, and
    consecutive QP source ports do not all land on one of two uplinks."""
    from emulator.p4.ecmp import crc16_arc, ecmp_hash
    assert crc16_arc(b"123456789") == 0xBB3D
    picks = [ecmp_hash(0x0A000101, 0x0A000201, 17, 0xC000 + i, 4791) % 2 for i in range(8)]
    assert 2 <= sum(picks) <= 6, picks


# ---------------------------------------------------------------- malformed packets and the flow cache

def test_malformed_packet_of_a_cached_flow_is_dropped_not_served_from_the_cache(target):
    """The flow key leaves out the total length and the checksum: a packet of
    a cached flow with either wrong, or too short for its BTH, is still dropped."""
    from emulator.dataplane.malformed import Malformed
    program(target.conn, target.p4)
    good = rocev2()
    assert target.send(good, H2_PORT) == ((H1_PORT, to_h1(good)),)     # cached now
    bad = [(pc.with_ipv4_checksum(good, pc.ipv4_checksum(good) ^ 0x0100), Malformed.IPV4_CHECKSUM),
           (pc.with_ipv4_base(good, total_len=len(good) - 13), Malformed.IPV4_TOTAL_LENGTH),
           (pc.with_ipv4_base(good, total_len=19), Malformed.IPV4_TOTAL_LENGTH),
           (pc.padded(pc.ipv4_cut(good, 32)), Malformed.BTH_TRUNCATED),
           (pc.with_ipv4_base(good, version_ihl=0x46), Malformed.IPV4_OPTIONS)]
    for frame, _ in bad:
        assert frame[:6] + frame[23:24] + frame[26:38] == good[:6] + good[23:24] + good[26:38]
        assert target.send(frame, H2_PORT) == ()
    assert target.send(good, H2_PORT) == ((H1_PORT, to_h1(good)),)
    want: dict = {}
    for frame, reason in bad:
        packets, nbytes = want.get(reason, (0, 0))
        want[reason] = (packets + 1, nbytes + len(frame))
    assert malformed_counts(target.conn, H2_PORT) == want
    assert target.counter("pipeline_drop_counter")[H2_PORT] == (len(bad), sum(len(f) for f, _ in bad))


def test_first_failing_check_names_the_reason():
    from emulator.dataplane.malformed import Malformed
    from emulator.dataplane.ipv4_checks import malformed_reason
    f = rocev2()
    bad_csum = lambda fr: pc.with_ipv4_checksum(fr, pc.ipv4_checksum(fr) ^ 1)  # noqa: E731
    assert malformed_reason(f) == 0
    assert malformed_reason(bad_csum(pc.with_ipv4_base(f, version_ihl=0x63))) == Malformed.IPV4_VERSION
    assert malformed_reason(pc.with_ipv4_base(f, version_ihl=0x43)[:33]) == Malformed.IPV4_TRUNCATED
    assert malformed_reason(pc.with_ipv4_base(f, version_ihl=0x46, total_len=9)) == Malformed.IPV4_OPTIONS
    assert malformed_reason(bad_csum(pc.with_ipv4_base(f, total_len=9))) == Malformed.IPV4_TOTAL_LENGTH
    assert malformed_reason(bad_csum(pc.ipv4_cut(f, 30))) == Malformed.IPV4_CHECKSUM
    assert malformed_reason(pc.padded(pc.ipv4_cut(f, 40))) == 0


def test_checksum_check_is_bmv2s_verify_checksum():
    """ipv4_checksum_ok agrees with verify_checksum (csum16 of the other
    fields == the field) on random headers and on the 0x0000/0xFFFF edge."""
    import random
    import struct
    from scapy.utils import checksum
    from emulator.dataplane.ipv4_checks import ipv4_checksum_ok
    rng = random.Random(7)
    headers = []
    for _ in range(3000):
        h = bytearray(rng.randbytes(20))
        h[0] = 0x45
        right = checksum(bytes(h[:10]) + b"\0\0" + bytes(h[12:]))
        h[10:12] = struct.pack("!H", rng.choice((right, right ^ rng.randrange(1, 0x10000), 0, 0xFFFF)))
        headers.append(bytes(h))
    zero = pc._frame_whose_checksum_is_zero()[14:34]      # right checksum: 0x0000
    headers += [zero, zero[:10] + b"\xff\xff" + zero[12:]]
    for h in headers:
        bmv2 = checksum(h[:10] + b"\0\0" + h[12:]) == struct.unpack_from("!H", h, 10)[0]
        assert ipv4_checksum_ok(bytes(14) + h) == bmv2, h.hex()
    assert ipv4_checksum_ok(bytes(14) + zero) and not ipv4_checksum_ok(bytes(14) + headers[-1])


def test_packet_out_of_a_malformed_frame_is_not_checked(target):
    """fabric.p4 sends a packet-out to its port before any check: the controller chose."""
    program(target.conn, target.p4)
    frame = pc.with_ipv4_base(rocev2(), version_ihl=0x65)
    assert target.pipeline.packet_out(frame, H1_PORT) == H1_PORT
    assert malformed_counts(target.conn, CPU_PORT) == {}


def test_rewrite_checksum_is_update_checksums_from_scratch():
    """rewrite() derives the new checksum from the old, valid one: the same
    value as csum16 recomputed over the header after the TTL decrement."""
    import random
    import struct
    from emulator.dataplane.ipv4_checks import ipv4_checksum_ok
    from emulator.dataplane.pipeline import Verdict, _ipv4_header_checksum, rewrite
    rng = random.Random(11)
    frames = [pc._frame_whose_routed_checksum_is_zero(), pc._frame_whose_checksum_is_zero()]
    by_len: dict[int, bytes] = {}       # a frame per payload length, built once (Scapy: ~2 ms)
    for _ in range(3000):
        ttl, ip_id, tos = rng.randrange(2, 256), rng.randrange(65536), rng.randrange(256)
        n = rng.randrange(1, 64)
        if n not in by_len:
            by_len[n] = rocev2(payload_len=n)
        f = bytearray(by_len[n])
        # the IPv4 header rocev2(ttl=, ip_id=, tos=, payload_len=n) has (its
        # ICRC aside, which rewrite() neither reads nor writes)
        f[15], f[18:20], f[22] = tos, struct.pack("!H", ip_id), ttl
        f[26:34] = rng.randbytes(8)
        f[24:26] = struct.pack("!H", _ipv4_header_checksum(f))
        frames.append(bytes(f))
    for f in frames:
        assert ipv4_checksum_ok(f)
        out = rewrite(f, Verdict(H1_PORT, decrement_ttl=True))
        assert out[22] == f[22] - 1
        assert (out[24] << 8 | out[25]) == _ipv4_header_checksum(out), f.hex()


def test_controller_reads_malformed_drops_per_port_and_reason(target):
    from emulator.control.controller import FabricController
    program(target.conn, target.p4)
    good = rocev2()
    bad = pc.with_ipv4_checksum(good, pc.ipv4_checksum(good) ^ 0x8000)
    v6 = pc.with_ipv4_base(good, version_ihl=0x65)
    for frame, port in ((bad, H2_PORT), (bad, H2_PORT), (v6, H1_PORT), (good, H2_PORT)):
        target.send(frame, port)
    ctl = FabricController(pc.FABRIC, {}, target.p4)
    ctl.conns = {"leaf1": target.conn}
    cells = ctl.read_port_counters()
    h2, h1 = cells[("leaf1", H2_PORT)], cells[("leaf1", H1_PORT)]
    assert (h2["malformed_ipv4_checksum_packets"], h2["malformed_ipv4_checksum_bytes"]) == (2, 2 * len(bad))
    assert h2["pipeline_drop_packets"] == 2 and h2["rx_packets"] == 3
    assert h1["malformed_ipv4_version_packets"] == 1
    assert not [k for k in h1 if k.startswith("malformed_") and k != "malformed_ipv4_version_packets"
                and k != "malformed_ipv4_version_bytes"]
