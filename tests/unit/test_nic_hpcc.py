"""HPCC in the NIC: the INT source (data frames reserve records), the INT sink
(the records go back in ACKs), and the reaction point acting on them. Two
NICs over a socketpair on a manual clock (``tests.nic_sim``); a hook in
between plays the switch that fills a record, as fabric.p4's egress does."""
from __future__ import annotations

from scapy.layers.l2 import Ether

from emulator import int_md
from emulator.nic.hpcc import Hpcc
from emulator.nic.nic import WcStatus
from emulator.nic.roce import RC_ACK, parse_roce
from emulator.int_md import INT_KIND_COLLECT, INT_KIND_ECHO, IntShim
from tests.unit.test_nic_core import pairs, pattern  # noqa: F401 (the fixture)

RATE_BPS = 200_000_000                      # the pair's link (D = 1: fabric = clock)
T_NS = 100_000                              # HPCC's base RTT for these tests
HOPS = 3


class FakeSwitch:
    """Fills the next record of every collecting stack A sends: a queue of
    ``qlen_bytes``, the port's tx bytes, the clock's ns, the link rate."""

    def __init__(self, clock, qlen_bytes):
        self.clock, self.qlen_bytes = clock, qlen_bytes
        self.tx_bytes = 0
        self.data_stacks = []               # (kind, hop_count, max_hops) of A's frames

    def hook(self, frame: bytes) -> bytes:
        if not int_md.is_int(frame):
            return frame
        out = bytearray(frame)
        self.tx_bytes += len(out)
        shim = Ether(frame)[IntShim]
        self.data_stacks.append((shim.kind, shim.hop_count, shim.max_hops))
        int_md.push_hop(out, self.qlen_bytes, self.tx_bytes, self.clock.now_ns(), RATE_BPS // 10**6)
        return bytes(out)


def hpcc_pair(pairs, qlen_bytes, logged=True):
    # the rate floor: ns-3's MinRate default, 0.001 of the line
    hpcc = {"base_rtt_us": T_NS / 1000, "min_rate_gbps": RATE_BPS * 0.001 / 1e9}
    sw = {}

    def hook_ab(frame):
        return sw["sw"].hook(frame)
    p = pairs(rate_bps=RATE_BPS, hook_ab=hook_ab, hpcc=hpcc, int_max_hops=HOPS, ack_every_n=1)
    sw["sw"] = FakeSwitch(p.sock_a.clock, qlen_bytes)
    p.sock_b.logging = logged
    return p, sw["sw"]


def write(p, size):
    src = p.a.register_mr(size, buf=pattern(size))
    dst = p.b.register_mr(size, addr=0x10000, rkey=0x1234)
    p.a.post_write(p.qa, 1, (src, 0, size), 0x10000, 0x1234)
    p.start()
    assert p.wait(lambda ca, cb: len(ca) == 1)
    assert p.cq[p.a][0].status == WcStatus.SUCCESS
    assert dst.buf == src.buf
    return p.cq[p.a][0]


def test_data_reserves_records_and_acks_bring_them_back(pairs):
    p, sw = hpcc_pair(pairs, qlen_bytes=0)
    write(p, 64 * 1024)
    # every data frame of A left with an empty stack of HOPS records
    assert sw.data_stacks and set(sw.data_stacks) == {(INT_KIND_COLLECT, 0, HOPS)}
    acks = [Ether(f) for _, f in p.sock_b.log if int_md.is_int(f)]
    assert acks and all(a[IntShim].kind == INT_KIND_ECHO for a in acks)
    assert all((a[IntShim].hop_count, a[IntShim].max_hops) == (1, HOPS) for a in acks)
    assert all(a[IntShim].hops[0].rate_mbps == RATE_BPS // 10**6 for a in acks)
    # stripped, they are RoCEv2 ACKs whose ICRC holds
    for _, f in p.sock_b.log:
        plain = int_md.strip(f).frame
        assert parse_roce(plain, verify=True).opcode == RC_ACK
    assert p.a.stats.rx_icrc_errors == p.b.stats.rx_icrc_errors == 0
    assert p.b.stats.rx_int_errors == 0
    # the frame sizes the pacer counted include the INT bytes
    assert p.a.transmitter.framing.hdr_bytes == 54 + int_md.int_bytes(HOPS)


def test_an_idle_path_keeps_the_line_rate(pairs):
    p, sw = hpcc_pair(pairs, qlen_bytes=0, logged=False)
    write(p, 256 * 1024)
    cc = p.qa.cc
    assert isinstance(cc, Hpcc)
    # one sender at line rate: U near 1 > eta, so W = Wc eta / U + W_AI stays near W_init
    assert cc.u > 0.8
    assert cc.window_bytes > 0.85 * cc.w_init_bytes
    assert p.a.stats.tx_retransmits == 0 and p.a.stats.timeouts == 0


def test_a_standing_queue_cuts_window_and_rate(pairs):
    # a queue of B x T bytes: u = 1 (queue) + ~1 (link busy) = 2, so W about halves per RTT
    bt = RATE_BPS * T_NS // 8 // 10**9
    p, sw = hpcc_pair(pairs, qlen_bytes=4 * bt, logged=False)
    write(p, 256 * 1024)
    cc = p.qa.cc
    assert cc.u > 2.0
    assert cc.window_bytes < 0.5 * cc.w_init_bytes
    assert p.qa.rate_bps is not None and p.qa.rate_bps < 0.5 * RATE_BPS
    # the window bounds the packets in flight: ceil(W / MTU)
    assert p.qa.window_pkts == max(1, -int(-cc.window_bytes // 1024))
    assert p.a.stats.tx_retransmits == 0 and p.a.stats.timeouts == 0


def test_a_nic_without_int_sends_plain_rocev2(pairs):
    p = pairs(rate_bps=RATE_BPS)
    p.sock_b.logging = True
    src = p.a.register_mr(4096, buf=pattern(4096))
    p.b.register_mr(4096, addr=0x10000, rkey=0x1234)
    p.a.post_write(p.qa, 1, (src, 0, 4096), 0x10000, 0x1234)
    p.start()
    assert p.wait(lambda ca, cb: len(ca) == 1)
    assert p.sock_b.log and not any(int_md.is_int(f) for _, f in p.sock_b.log)
