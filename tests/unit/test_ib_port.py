"""The transmit side of an InfiniBand port (``emulator/ib/port.py``) on
explicit times: serialization, credit gating and the stall it causes (to
the nanosecond), head-of-line blocking confined to one VL, VL arbitration
by weight and priority, VL15 first; and a 15-to-1 incast through a
credit-based switch where no buffer ever overflows."""
from __future__ import annotations

import heapq

import pytest

from emulator.ib.credits import CreditParams, VlCredits, blocks
from emulator.ib.port import ArbEntry, IbEgressPort
from emulator.wire import IB_VL15

GBPS_8 = 8e9          # 1 byte per ns: times below read as byte counts


def port(vls=(0,), credit=2048, **kw):
    sent = []
    credits = {vl: VlCredits(CreditParams(buffer_blocks=4096)) for vl in vls}
    for cr in credits.values():
        if credit:
            cr.on_fc(fctbs=0, fccl=credit, now_ns=0)
    p = IbEgressPort(GBPS_8, credits, lambda end, vl, pkt, meta: sent.append((end, vl, len(pkt))), **kw)
    return p, sent


def test_packets_go_back_to_back_at_the_port_rate():
    p, sent = port()
    p.enqueue(0, b"x" * 1000, vl=0)
    p.enqueue(0, b"y" * 500, vl=0)
    assert p.service(0) == 1000 and sent == [(1000, 0, 1000)]
    assert p.service(1700) is None                       # served late: still back to back
    assert sent[1] == (1500, 0, 500) and p.busy_until == 1500


def test_a_carrier_before_the_packet_takes_no_credit_no_time_and_no_bytes():
    sent = []
    cr = VlCredits(CreditParams(buffer_blocks=4096))
    cr.on_fc(fctbs=0, fccl=1, now_ns=0)                  # one block of credit
    p = IbEgressPort(GBPS_8, {0: cr}, lambda end, vl, pkt, meta: sent.append((end, len(pkt))),
                     carrier_bytes=14)
    p.enqueue(0, b"c" * 14 + b"x" * 64, vl=0)            # a 64-byte packet behind its carrier
    p.service(0)
    assert sent == [(64, 78)] and cr.fctbs == 1 and p.tx_bytes[0] == 64


def test_a_vl_without_credit_stalls_exactly_until_the_credit_comes():
    p, sent = port(credit=0)
    p.enqueue(100, b"x" * 640, vl=0)                     # 10 blocks
    assert p.service(100) is None and sent == []
    cr = p.credits[0]
    assert cr.stalled_since == 100 and cr.stalls == 1
    cr.on_fc(fctbs=0, fccl=9, now_ns=400)                # 9 blocks: not enough
    assert p.service(400) is None and sent == []
    cr.on_fc(fctbs=0, fccl=10, now_ns=700)
    p.service(900)                                       # woken late: it went when the credit came
    assert sent == [(700 + 640, 0, 640)]
    assert p.stalled_ns(2000) == {0: 600} and cr.stalled_since is None


def test_head_of_line_blocking_stays_within_its_vl():
    p, sent = port(vls=(0, 1), credit=0)
    p.credits[1].on_fc(fctbs=0, fccl=100, now_ns=0)
    p.enqueue(0, b"a" * 64, vl=0)                        # VL0: no credit
    p.enqueue(0, b"b" * 64, vl=1)
    p.enqueue(0, b"c" * 64, vl=1)
    p.service(0)
    p.service(64)
    assert [vl for _, vl, _ in sent] == [1, 1]
    assert p.stalled_ns(128) == {0: 128, 1: 0}


def test_weights_share_the_link_between_vls():
    low = [ArbEntry(0, 16), ArbEntry(1, 32)]             # 1 KiB : 2 KiB per round
    p, sent = port(vls=(0, 1), credit=2000, low=low)
    for _ in range(200):
        p.enqueue(0, b"x" * 256, vl=0)
        p.enqueue(0, b"y" * 256, vl=1)
    t = 0
    while t is not None and t < 60 * 256:
        t = p.service(t)
    by_vl = [sum(n for _, vl, n in sent if vl == v) for v in (0, 1)]
    assert by_vl[1] == pytest.approx(2 * by_vl[0], rel=0.1)


def test_high_priority_goes_first_but_lets_one_low_packet_through_per_limit():
    p, sent = port(vls=(0, 1), credit=2048, high=[ArbEntry(1, 255)], low=[ArbEntry(0, 64)],
                   high_limit=1)                          # 4 KiB of high, then one low
    for _ in range(20):
        p.enqueue(0, b"h" * 1024, vl=1)
        p.enqueue(0, b"l" * 1024, vl=0)
    t = 0
    while t is not None and len(sent) < 15:
        t = p.service(t)
    assert "".join("H" if vl == 1 else "L" for _, vl, _ in sent[:15]) == "HHHHLHHHHLHHHHL"


def test_a_limit_of_zero_lets_one_high_packet_through_per_low_packet():
    p, sent = port(vls=(0, 1), high=[ArbEntry(1, 64)], low=[ArbEntry(0, 64)], high_limit=0)
    for _ in range(3):
        p.enqueue(0, b"h" * 512, vl=1)
        p.enqueue(0, b"l" * 512, vl=0)
    t = 0
    while t is not None:
        t = p.service(t)
    assert [vl for _, vl, _ in sent] == [1, 0, 1, 0, 1, 0]


def test_without_a_limit_low_priority_waits_for_high_to_empty():
    p, sent = port(vls=(0, 1), credit=2048, high=[ArbEntry(1, 64)], low=[ArbEntry(0, 64)],
                   high_limit=255)
    for _ in range(5):
        p.enqueue(0, b"h" * 512, vl=1)
    p.enqueue(0, b"l" * 512, vl=0)
    t = 0
    while t is not None:
        t = p.service(t)
    assert [vl for _, vl, _ in sent] == [1, 1, 1, 1, 1, 0]


def test_vl15_goes_before_data_and_needs_no_credit():
    p, sent = port(credit=0)
    p.enqueue(0, b"d" * 64, vl=0)
    p.enqueue(0, b"m" * 256, vl=IB_VL15)
    p.service(0)
    assert sent == [(256, IB_VL15, 256)]


def test_sl_to_vl_mapping_picks_the_queue_and_a_vl_the_port_lacks_is_refused():
    p, _ = port(vls=(0, 1), sl2vl=[0, 1] * 8)
    assert p.enqueue(0, b"x", sl=3) == 1 and p.enqueue(0, b"x", sl=4) == 0
    with pytest.raises(ValueError, match="SL 2 maps to VL 5"):
        port(vls=(0, 1), sl2vl=[0, 1, 5] + [0] * 13)


# ------------------------------------------------------------ 15-to-1 incast

def test_a_15_to_1_incast_through_a_credit_switch_drops_nothing_and_stalls_the_senders():
    """15 senders -> a switch (an input buffer of 64 blocks per ingress
    link) -> one receiver; every link 1 B/ns and 20 ns each way;
    flow-control packets go back when due. The receiver's link carries a
    fifteenth of what could arrive: the switch's buffers fill, the credits
    run out, and the senders wait instead of the switch dropping."""
    delay, size, per_sender = 20, 1024, 40
    params = CreditParams(buffer_blocks=64, update_blocks=16, update_period_ns=2000)
    events: list = []
    seq = 0

    def at(t, kind, *data):
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, data))

    switch_in = [VlCredits(params) for _ in range(15)]   # the switch's receive side of link i
    host_rx = VlCredits(params)                          # the receiver NIC's
    delivered = []

    def switch_sent(end, vl, packet, meta):                    # leaves the switch's buffer as it goes
        i = packet[0]
        switch_in[i].release(blocks(len(packet)))
        if switch_in[i].fc_due(end):
            at(end, "fc_to_sender", i)
        at(end + delay, "at_host", packet)

    senders = [IbEgressPort(GBPS_8, {0: VlCredits(params)},
                            lambda end, vl, p, meta: at(end + delay, "at_switch", p))
               for _ in range(15)]
    out = IbEgressPort(GBPS_8, {0: VlCredits(params)}, switch_sent)
    for i, s in enumerate(senders):
        for _ in range(per_sender):
            s.enqueue(0, bytes([i]) * size, vl=0)
        at(0, "fc_to_sender", i)
    at(0, "fc_to_switch")
    t = 0
    wakes: set[int] = set()
    while events:
        t, _, kind, data = heapq.heappop(events)
        if kind == "at_switch":
            (p,) = data
            assert switch_in[p[0]].on_data(blocks(len(p))), "a switch buffer overflowed"
            out.enqueue(t, p, vl=0)
        elif kind == "at_host":
            (p,) = data
            assert host_rx.on_data(blocks(len(p))), "the receiver's buffer overflowed"
            host_rx.release(blocks(len(p)))              # the NIC consumes at line rate
            delivered.append(p[0])
            if host_rx.fc_due(t):
                at(t, "fc_to_switch")
        elif kind == "fc_to_sender":
            (i,) = data
            _, fccl = switch_in[i].make_fc(t)
            at(t + delay, "fc_at_sender", i, fccl)
        elif kind == "fc_at_sender":
            i, fccl = data
            senders[i].credits[0].on_fc(0, fccl, t)
        elif kind == "fc_to_switch":
            _, fccl = host_rx.make_fc(t)
            at(t + delay, "fc_at_switch", fccl)
        elif kind == "fc_at_switch":
            out.credits[0].on_fc(0, data[0], t)
        for port_ in (*senders, out):                    # each element gets its turn
            nxt = port_.service(t)
            if nxt is not None and nxt not in wakes:
                wakes.add(nxt)
                at(nxt, "wake")
    assert len(delivered) == 15 * per_sender             # everything arrived
    assert sum(c.overruns for c in switch_in) == 0 and host_rx.overruns == 0
    assert min(s.stalled_ns(t)[0] for s in senders) > 0  # every sender waited for credit
    # the receiver's link was the bottleneck and it stayed busy
    assert t < 15 * per_sender * size * 1.1
