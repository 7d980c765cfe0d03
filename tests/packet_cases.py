"""PTF-style packet cases for ``p4src/fabric.p4``, programmed as leaf1 of clos-2x2.

Each ``Case`` says: this frame enters on this port (with these extra ACL
entries installed next to the controller's ``switch_entities``), and these
frames leave on these ports -- or nothing leaves at all (dropped). Port 255
(``CPU_PORT``) means a PacketIn whose payload is the given frame and whose
``ingress_port`` metadata is the case's ingress port.

Expectations are built with Scapy from the P4 source alone (no pipeline
code), so the same table can be replayed against BMv2 (simple_switch_grpc)
as against the embedded target: only what fabric.p4 defines is asserted.
In particular the ECMP member a flow hashes to is target-specific (BMv2's
selector uses its crc16 and its own member order), so ECMP cases list every
group member as an acceptable output (``any_of``). A malformed packet's case
also names the reason (``Malformed``, the codes fabric.p4 mirrors) whose
``malformed_drop_counter`` cell must count it.

leaf1 of clos-2x2 (controller's routes):
    port 1 -> h1 (10.0.1.1/32)    port 3 -> spine1 \\  10.0.2.0/24:
    port 2 -> h2 (10.0.1.2/32)    port 4 -> spine2 /  ECMP group of both
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from scapy.compat import raw
from scapy.layers.inet import ICMP, IP, IPOption_Router_Alert, TCP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw
from scapy.utils import checksum

from emulator.nic.roce import BTH, RETH
from emulator.int_md import INT_KIND_COLLECT, INT_KIND_ECHO, INT_UDP_DPORT, IntHop, IntShim
from emulator.control.controller import switch_entities
from emulator.dataplane.malformed import Malformed, malformed_cell
from emulator.topo import ip_to_int, load_fabric

REPO = Path(__file__).resolve().parents[1]
TOPOLOGY = REPO / "topologies" / "clos-2x2.yaml"
FABRIC = load_fabric(TOPOLOGY)
PLAN = FABRIC.addresses
SWITCH = "leaf1"
DEVICE_ID = FABRIC.device_id(SWITCH)

CPU_PORT = 255
ROCEV2_PORT = 4791
BROADCAST = "ff:ff:ff:ff:ff:ff"

ROUTER_MAC = PLAN.router_mac(SWITCH)
_PEER = {p.port_no: p.peer for p in FABRIC.ports(SWITCH)}
H1, H2 = _PEER[1], _PEER[2]                       # hosts on ports 1 and 2
H1_PORT, H2_PORT = 1, 2
H1_MAC, H2_MAC = PLAN.host_mac(H1), PLAN.host_mac(H2)
H1_IP, H2_IP = PLAN.host_ip(H1), PLAN.host_ip(H2)
UPLINK_MAC = {port: PLAN.router_mac(peer) for port, peer in _PEER.items()
              if FABRIC.node(peer).is_switch}    # {3: spine1's MAC, 4: spine2's MAC}
UPLINKS = tuple(sorted(UPLINK_MAC))
REMOTE_HOST = next(h.name for h in FABRIC.hosts() if FABRIC.host_leaf(h.name).name != SWITCH)
REMOTE_IP = PLAN.host_ip(REMOTE_HOST)             # in the other leaf's /24
UNROUTED_IP = "192.168.0.1"                       # covered by no route

assert not FABRIC.node(H1).is_switch and not FABRIC.node(H2).is_switch and UPLINKS == (3, 4), \
    "clos-2x2 no longer has hosts on ports 1-2 and uplinks on 3-4 of leaf1: fix the cases"


# ---------------------------------------------------------------- frames

def rocev2(src_ip: str = H2_IP, dst_ip: str = H1_IP, *, sport: int = 49152,
           dst_mac: str = ROUTER_MAC, src_mac: str = H2_MAC, ttl: int = 64,
           ip_id: int = 1, tos: int = (26 << 2) | 0b10, payload_len: int = 64,
           psn: int = 7) -> bytes:
    """An RC RDMA WRITE Only over UDP 4791 (BTH + RETH + payload + ICRC)."""
    payload = bytes((i * 7 + psn) & 0xFF for i in range(payload_len))
    return raw(Ether(dst=dst_mac, src=src_mac)
               / IP(src=src_ip, dst=dst_ip, ttl=ttl, id=ip_id, tos=tos, flags="DF")
               / UDP(sport=sport, dport=ROCEV2_PORT, chksum=0)
               / BTH(opcode=0x0A, dqpn=0x000111, psn=psn, ackreq=1)
               / RETH(virtual_addr=0x1000, rkey=0x1234, dma_length=payload_len)
               / Raw(payload))


def rocev2_int(max_hops: int = 3, hop_count: int = 0, kind: int = INT_KIND_COLLECT,
               hops: list | None = None, **kw) -> bytes:
    """``rocev2(**kw)`` as an HPCC source sends it: UDP to INT_UDP_DPORT, an
    INT shim with ``max_hops`` records (``hops``: IntHop layers, zeros by
    default), then the same BTH, RETH, payload and ICRC (emulator/int_md.py)."""
    plain = Ether(rocev2(**kw))
    recs = hops if hops is not None else [IntHop() for _ in range(max_hops)]
    ip = plain[IP].copy()
    ip.remove_payload()
    del ip.len, ip.chksum                       # Scapy recomputes both
    return raw(Ether(dst=plain.dst, src=plain.src) / ip
               / UDP(sport=plain[UDP].sport, dport=INT_UDP_DPORT, chksum=0)
               / IntShim(kind=kind, hop_count=hop_count, max_hops=max_hops, hops=recs)
               / Raw(raw(plain[UDP].payload)))


def arp_request(src_mac: str = H1_MAC, src_ip: str = H1_IP, dst_ip: str = H2_IP) -> bytes:
    return raw(Ether(dst=BROADCAST, src=src_mac) / ARP(hwsrc=src_mac, psrc=src_ip, pdst=dst_ip))


def mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def ipv4_checksum(frame: bytes) -> int:
    """Scapy's checksum of the frame's IPv4 base header (what the header should carry)."""
    ip = IP(frame[14:34])
    del ip.chksum
    return IP(raw(ip)).chksum


def ipv4_checksum_ok(frame: bytes) -> bool:
    return struct.unpack_from("!H", frame, 24)[0] == ipv4_checksum(frame)


def with_ipv4_checksum(frame: bytes, csum: int) -> bytes:
    return frame[:24] + struct.pack("!H", csum) + frame[26:]


def with_ipv4_base(frame: bytes, *, version_ihl: int | None = None,
                   total_len: int | None = None) -> bytes:
    """``frame`` with the IPv4 version/IHL byte or total length replaced and a
    right checksum over the 20-byte base header (what fabric.p4 verifies), so
    that the one field changed is the only defect."""
    b = bytearray(frame)
    if version_ihl is not None:
        b[14] = version_ihl
    if total_len is not None:
        b[16:18] = struct.pack("!H", total_len)
    b[24:26] = b"\0\0"
    b[24:26] = struct.pack("!H", checksum(bytes(b[14:34])))
    return bytes(b)


def padded(frame: bytes) -> bytes:
    """What a NIC sends for a short frame: zero padding up to 60 bytes (no FCS)."""
    return frame + bytes(max(0, 60 - len(frame)))


def udp_frame(payload: bytes, dport: int = 5000, **ip) -> bytes:
    """h2 -> h1, UDP with ``payload``, not padded."""
    return raw(Ether(dst=ROUTER_MAC, src=H2_MAC) / IP(src=H2_IP, dst=H1_IP, **ip)
               / UDP(sport=49152, dport=dport, chksum=0) / Raw(payload))


def ipv4_cut(frame: bytes, total_len: int) -> bytes:
    """The IPv4 datagram of ``frame`` cut to ``total_len`` bytes (total length
    and checksum made right), not padded."""
    return with_ipv4_base(frame[:14 + total_len], total_len=total_len)


def routed(frame: bytes, smac: str, dmac: str) -> bytes:
    """fabric.p4's set_nexthop + FabricComputeChecksum, done with Scapy.

    MACs rewritten, TTL - 1, IPv4 header checksum recomputed from scratch over
    the base header (update_checksum: whatever checksum came in); every byte
    after the IPv4 header (UDP, BTH, RETH, payload, ICRC) untouched.
    """
    ip = IP(frame[14:34])
    ip.ttl -= 1
    del ip.chksum
    return mac_bytes(dmac) + mac_bytes(smac) + frame[12:14] + raw(ip) + frame[34:]


def to_h1(frame: bytes) -> bytes:
    return routed(frame, ROUTER_MAC, H1_MAC)


def to_h2(frame: bytes) -> bytes:
    return routed(frame, ROUTER_MAC, H2_MAC)


def to_uplink(frame: bytes, port: int) -> bytes:
    return routed(frame, ROUTER_MAC, UPLINK_MAC[port])


# ---------------------------------------------------------------- ACL entries

@dataclass(frozen=True)
class Acl:
    """One ``acl`` entry: ternary matches ``{field: (value, mask)}``, an action, a priority."""

    priority: int
    action: str                                   # punt_to_cpu | drop | NoAction
    match: tuple[tuple[str, tuple[int, int]], ...]

    @classmethod
    def of(cls, priority: int, action: str, **match: tuple[int, int]) -> "Acl":
        return cls(priority, action, tuple(sorted(match.items())))

    def entry(self, p4info):
        return p4info.table_entry("acl", dict(self.match), self.action, priority=self.priority)


PORT_MASK = 0x1FF                                 # ig_port is bit<9>
PUNT_ROCE_FROM_PORT1 = Acl.of(10, "punt_to_cpu", ig_port=(1, PORT_MASK), ip_proto=(17, 0xFF),
                              l4_dst_port=(ROCEV2_PORT, 0xFFFF))
PUNT_L4_4791 = Acl.of(10, "punt_to_cpu", l4_dst_port=(ROCEV2_PORT, 0xFFFF))
DROP_ROCE_HI = Acl.of(20, "drop", ip_proto=(17, 0xFF), l4_dst_port=(ROCEV2_PORT, 0xFFFF))
DROP_ROCE_LO = Acl.of(5, "drop", ip_proto=(17, 0xFF), l4_dst_port=(ROCEV2_PORT, 0xFFFF))
PERMIT_H1_HI = Acl.of(30, "NoAction", ipv4_dst=(ip_to_int(H1_IP), 0xFFFFFFFF))
PUNT_ARP = Acl.of(10, "punt_to_cpu", eth_type=(0x0806, 0xFFFF))
PUNT_UNROUTED_NET = Acl.of(10, "punt_to_cpu",
                           ipv4_dst=(ip_to_int(UNROUTED_IP) & 0xFFFF0000, 0xFFFF0000))


def program(conn, p4info, acl=(), device_config: bytes = b"") -> dict[str, list]:
    """Set the pipeline (fresh state) and write leaf1's entities, then ``acl``.
    ``device_config``: the target's program (BMv2: fabric.p4's JSON)."""
    conn.set_pipeline(p4info, device_config)
    ents = switch_entities(FABRIC, p4info, SWITCH)
    for kind in ("tables", "members", "groups", "routes"):   # members before groups before routes
        if ents[kind]:
            conn.insert(ents[kind])
    for a in acl:
        conn.insert(a.entry(p4info))
    return ents


# ---------------------------------------------------------------- cases

@dataclass(frozen=True)
class Case:
    name: str
    ingress_port: int
    frame: bytes
    expect: tuple[tuple[int, bytes], ...] = ()    # () = dropped
    any_of: bool = False                          # exactly one of ``expect`` (ECMP)
    acl: tuple[Acl, ...] = ()
    why: str = ""
    malformed: Malformed | None = None            # dropped as malformed, for this reason

    def __post_init__(self):
        assert self.malformed is None or self.dropped, self.name

    @property
    def dropped(self) -> bool:
        return not self.expect

    @property
    def ports(self) -> set[int]:
        return {self.ingress_port} | {p for p, _ in self.expect}

    def malformed_counts(self, times: int = 1) -> dict[Malformed, tuple[int, int]]:
        """What ``malformed_counts()`` must read after the frame was sent ``times`` times."""
        return {} if self.malformed is None else {self.malformed: (times, times * len(self.frame))}


def malformed_counts(conn, ingress_port: int) -> dict[Malformed, tuple[int, int]]:
    """The non-zero ``malformed_drop_counter`` cells of one ingress port, by reason.

    One cell per read: the whole counter (4096 cells) is slow to read per case."""
    counts = {}
    for reason in Malformed:
        index = malformed_cell(ingress_port, reason)
        cell = conn.read_counter("malformed_drop_counter", index=index)[index]
        if cell != (0, 0):
            counts[reason] = cell
    return counts


def _frame_whose_routed_checksum_is_zero() -> bytes:
    """A frame to h1 whose header sums to 0xFFFF after the TTL decrement (IP id chosen)."""
    f = rocev2(ip_id=0)
    folded_sum = ~ipv4_checksum(to_h1(f)) & 0xFFFF      # one's complement sum with id 0
    f = rocev2(ip_id=0xFFFF - folded_sum)               # adding the id makes it 0xFFFF
    assert ipv4_checksum(to_h1(f)) == 0x0000 and struct.unpack_from("!H", f, 24)[0] == 0xFEFF
    return f


def _frame_whose_checksum_is_zero() -> bytes:
    """A frame to h1 whose right header checksum is 0x0000 (IP id chosen)."""
    f = rocev2(ip_id=0)
    folded_sum = ~ipv4_checksum(f) & 0xFFFF
    f = rocev2(ip_id=0xFFFF - folded_sum)
    assert ipv4_checksum(f) == 0x0000 and ipv4_checksum_ok(f)
    return f


def _cases() -> list[Case]:
    c: list[Case] = []
    f = rocev2()
    c.append(Case("rocev2_to_local_host", H2_PORT, f, ((H1_PORT, to_h1(f)),),
                  why="/32 host route: dmac = host MAC, smac = router MAC, TTL - 1"))
    f = rocev2(H1_IP, H2_IP, src_mac=H1_MAC, sport=50000, payload_len=1024)
    c.append(Case("rocev2_1k_to_other_local_host", H1_PORT, f, ((H2_PORT, to_h2(f)),)))
    f = rocev2(ttl=2)
    c.append(Case("ttl_2_is_routed_with_ttl_1", H2_PORT, f, ((H1_PORT, to_h1(f)),)))
    f = rocev2(H1_IP, REMOTE_IP, src_mac=H1_MAC)
    c.append(Case("rocev2_to_other_leaf_takes_an_uplink", H1_PORT, f,
                  tuple((p, to_uplink(f, p)) for p in UPLINKS), any_of=True,
                  why="10.0.2.0/24 -> ECMP group over both uplinks"))
    f = raw(Ether(dst=ROUTER_MAC, src=H2_MAC) / IP(src=H2_IP, dst=H1_IP, id=9) / ICMP(id=1, seq=1)
            / Raw(b"ping" * 8))
    c.append(Case("icmp_is_routed_too", H2_PORT, f, ((H1_PORT, to_h1(f)),)))

    # IPv4 header checksum: FabricComputeChecksum recomputes it from scratch.
    f = _frame_whose_routed_checksum_is_zero()
    c.append(Case("checksum_that_becomes_0x0000", H2_PORT, f, ((H1_PORT, to_h1(f)),),
                  why="an incremental update would give 0xFFFF; update_checksum gives 0x0000"))
    f = _frame_whose_checksum_is_zero()
    c.append(Case("checksum_0x0000_is_right", H2_PORT, f, ((H1_PORT, to_h1(f)),)))

    # Drops.
    c.append(Case("dst_mac_not_router_mac", H2_PORT, rocev2(dst_mac=H1_MAC),
                  why="my_station miss"))
    c.append(Case("broadcast_dst_mac", H2_PORT, rocev2(dst_mac=BROADCAST)))
    c.append(Case("ttl_1", H2_PORT, rocev2(ttl=1)))
    c.append(Case("ttl_0", H2_PORT, rocev2(ttl=0)))
    c.append(Case("no_route", H2_PORT, rocev2(dst_ip=UNROUTED_IP)))
    c.append(Case("arp_is_not_routed", H1_PORT, arp_request()))
    c.append(Case("arp_to_router_mac_is_not_routed", H1_PORT,
                  raw(Ether(dst=ROUTER_MAC, src=H1_MAC) / ARP(op=2, hwsrc=H1_MAC, psrc=H1_IP,
                                                          hwdst=ROUTER_MAC, pdst=H2_IP))))
    c.append(Case("runt_ipv4_without_full_header", H2_PORT, rocev2()[:30],
                  malformed=Malformed.IPV4_TRUNCATED,
                  why="ipv4 extract fails (PacketTooShort): EtherType 0x0800 without a header"))

    # Malformed IPv4: dropped before any lookup, counted by reason. Each
    # frame would be routed to h1 but for its one defect.
    M = Malformed
    f = rocev2()
    for name, vi, reason in (("ipv4_version_6", 0x65, M.IPV4_VERSION),
                             ("ipv4_version_0", 0x05, M.IPV4_VERSION),
                             ("ipv4_ihl_3", 0x43, M.IPV4_IHL),
                             ("ipv4_ihl_4", 0x44, M.IPV4_IHL),
                             ("ipv4_ihl_15_within_frame", 0x4F, M.IPV4_OPTIONS)):
        c.append(Case(name, H2_PORT, with_ipv4_base(f, version_ihl=vi), malformed=reason))
    c.append(Case("ipv4_ihl_15_beyond_frame", H2_PORT,
                  with_ipv4_base(padded(ipv4_cut(f, 28)), version_ihl=0x4F),
                  malformed=M.IPV4_OPTIONS, why="options are refused before their length is"))
    c.append(Case("ipv4_router_alert_option", H2_PORT,
                  raw(Ether(dst=ROUTER_MAC, src=H2_MAC)
                      / IP(src=H2_IP, dst=H1_IP, options=IPOption_Router_Alert())
                      / UDP(sport=49152, dport=ROCEV2_PORT) / BTH(opcode=0x04) / Raw(bytes(64))),
                  malformed=M.IPV4_OPTIONS,
                  why="a well-formed IHL 6 header: options are not supported by this fabric"))
    for total_len in (10, 19, 60000, len(f) - 14 + 1):
        c.append(Case(f"ipv4_total_length_{total_len}", H2_PORT,
                      with_ipv4_base(f, total_len=total_len), malformed=M.IPV4_TOTAL_LENGTH))
    c.append(Case("frame_cut_short_of_total_length", H2_PORT, rocev2()[:40],
                  acl=(PUNT_L4_4791,), malformed=M.IPV4_TOTAL_LENGTH,
                  why="the ACL would punt it (UDP 4791): malformed packets never reach the ACL"))
    good = rocev2(ip_id=77)
    c.append(Case("bad_checksum", H2_PORT, with_ipv4_checksum(good, ipv4_checksum(good) ^ 0x5A5A),
                  malformed=M.IPV4_CHECKSUM, why="not repaired by update_checksum: dropped"))
    f = _frame_whose_checksum_is_zero()
    c.append(Case("checksum_0xffff_for_0x0000", H2_PORT, with_ipv4_checksum(f, 0xFFFF),
                  malformed=M.IPV4_CHECKSUM,
                  why="verify_checksum compares with csum16, which is never 0xFFFF"))
    f = rocev2(dst_ip=UNROUTED_IP)
    c.append(Case("acl_punt_does_not_rescue_bad_checksum", H2_PORT,
                  with_ipv4_checksum(f, ipv4_checksum(f) ^ 1), acl=(PUNT_UNROUTED_NET,),
                  malformed=M.IPV4_CHECKSUM))
    f = udp_frame(b"")
    for total_len in (20, 27):
        c.append(Case(f"udp_truncated_{total_len}", H2_PORT, ipv4_cut(f, total_len),
                      malformed=M.UDP_TRUNCATED))
    c.append(Case("udp_truncated_in_padded_frame", H2_PORT, padded(ipv4_cut(f, 24)),
                  malformed=M.UDP_TRUNCATED,
                  why="padding is no UDP header: judged by the total length"))
    f = rocev2()
    c.append(Case("bth_truncated", H2_PORT, ipv4_cut(f, 28 + 11), malformed=M.BTH_TRUNCATED))
    c.append(Case("bth_truncated_in_padded_frame", H2_PORT, padded(ipv4_cut(f, 28 + 4)),
                  malformed=M.BTH_TRUNCATED))
    c.append(Case("udp_4791_without_bth", H2_PORT, padded(ipv4_cut(f, 28)),
                  malformed=M.BTH_TRUNCATED))

    # INT (HPCC): a stack that does not fit its packet, or says more than it
    # holds or than fabric.p4's stack can, is dropped before any lookup.
    c.append(Case("int_more_records_than_the_stack", H2_PORT, rocev2_int(max_hops=6),
                  malformed=M.INT_STACK, why="INT_MAX_HOPS is 5"))
    c.append(Case("int_more_filled_than_present", H2_PORT, rocev2_int(max_hops=3, hop_count=4),
                  malformed=M.INT_STACK))
    f = rocev2_int(max_hops=3)
    c.append(Case("int_records_beyond_the_packet", H2_PORT, ipv4_cut(f, 28 + 8 + 2 * 16),
                  malformed=M.INT_STACK))
    c.append(Case("int_no_bth_after_the_records", H2_PORT, ipv4_cut(f, 28 + 8 + 3 * 16 + 8),
                  malformed=M.INT_STACK))
    c.append(Case("int_shim_truncated_in_padded_frame", H2_PORT, padded(ipv4_cut(f, 28 + 4)),
                  malformed=M.INT_STACK, why="padding is no shim: judged by the total length"))
    # Well formed: routed like any RoCE packet (no int_port entry: no record written).
    f = rocev2_int(max_hops=3)
    c.append(Case("int_collecting_stack_routed", H2_PORT, f, ((H1_PORT, to_h1(f)),)))
    f = rocev2_int(max_hops=2, hop_count=2, kind=INT_KIND_ECHO,
                   hops=[IntHop(qlen_bytes=7, tx_bytes=8, ts_ns=9, rate_mbps=10)] * 2)
    c.append(Case("int_echo_routed_untouched", H2_PORT, f, ((H1_PORT, to_h1(f)),)))

    # Legal small packets: shorter than 60 bytes, padded by the NIC.
    f = padded(ipv4_cut(rocev2(), 40))
    c.append(Case("bth_only_in_padded_frame", H2_PORT, f, ((H1_PORT, to_h1(f)),),
                  why="total length 40 in a 60-byte frame: padding is legal and stays"))
    f = padded(udp_frame(b""))
    c.append(Case("empty_udp_in_padded_frame", H2_PORT, f, ((H1_PORT, to_h1(f)),)))
    f = padded(raw(Ether(dst=ROUTER_MAC, src=H2_MAC) / IP(src=H2_IP, dst=H1_IP) / ICMP()))
    c.append(Case("icmp_in_padded_frame", H2_PORT, f, ((H1_PORT, to_h1(f)),)))

    # ACL: punt / drop / permit, by priority.
    f = rocev2(H1_IP, H2_IP, src_mac=H1_MAC)
    c.append(Case("acl_punts_roce_from_port1_after_rewrite", H1_PORT, f, ((CPU_PORT, to_h2(f)),),
                  acl=(PUNT_ROCE_FROM_PORT1,),
                  why="punt_to_cpu only sets egress_spec: set_nexthop's rewrite stays"))
    f = rocev2()
    c.append(Case("acl_port1_punt_ignores_port2", H2_PORT, f, ((H1_PORT, to_h1(f)),),
                  acl=(PUNT_ROCE_FROM_PORT1,)))
    f = rocev2(H1_IP, H2_IP, src_mac=H1_MAC)
    c.append(Case("acl_higher_priority_drop_beats_punt", H1_PORT, f,
                  acl=(PUNT_ROCE_FROM_PORT1, DROP_ROCE_HI)))
    c.append(Case("acl_higher_priority_punt_beats_drop", H1_PORT, f, ((CPU_PORT, to_h2(f)),),
                  acl=(PUNT_ROCE_FROM_PORT1, DROP_ROCE_LO)))
    f = rocev2()
    c.append(Case("acl_permit_shadows_lower_drop", H2_PORT, f, ((H1_PORT, to_h1(f)),),
                  acl=(DROP_ROCE_HI, PERMIT_H1_HI)))
    f = arp_request(H2_MAC, H2_IP, H1_IP)
    c.append(Case("acl_punts_arp_unchanged", H2_PORT, f, ((CPU_PORT, f),), acl=(PUNT_ARP,)))
    f = rocev2(dst_ip=UNROUTED_IP)
    c.append(Case("acl_punt_rescues_unrouted_frame_unchanged", H2_PORT, f, ((CPU_PORT, f),),
                  acl=(PUNT_UNROUTED_NET,), why="punt after mark_to_drop: egress_spec = CPU"))
    # l4_dst_port is the UDP destination port only.
    f = raw(Ether(dst=ROUTER_MAC, src=H2_MAC) / IP(src=H2_IP, dst=H1_IP)
            / TCP(sport=1234, dport=ROCEV2_PORT, flags="S"))
    c.append(Case("acl_l4_port_ignores_tcp", H2_PORT, f, ((H1_PORT, to_h1(f)),),
                  acl=(PUNT_L4_4791,)))
    return c


CASES: list[Case] = _cases()
CASE_IDS = [c.name for c in CASES]
assert len(set(CASE_IDS)) == len(CASE_IDS)


# ---------------------------------------------------------------- verdicts

def verify(got, case: Case) -> None:
    """PTF's verify_packets / verify_packet_any_port / verify_no_other_packets in one.

    ``got``: every ``(port, frame)`` that came out (packet-ins as CPU_PORT).
    """
    got = sorted((port, bytes(frame)) for port, frame in got)
    if case.any_of:
        ok = len(got) == 1 and got[0] in case.expect
    else:
        ok = got == sorted(case.expect)
    assert ok, explain(got, case)


def explain(got, case: Case) -> str:
    def show(outcome) -> str:
        if not outcome:
            return "    dropped"
        return "\n".join(f"    port {port}: {Ether(frame).summary()} "
                         f"ttl {frame[22] if len(frame) > 22 else '-'} "
                         f"csum {frame[24:26].hex() if len(frame) > 25 else '-'}\n      {frame.hex()}"
                         for port, frame in outcome)
    return (f"{case.name} ({case.why or 'see tests/packet_cases.py'})\n"
            f"  got{' one of' if case.any_of else ''}\n{show(got)}\n  expected\n{show(case.expect)}")
