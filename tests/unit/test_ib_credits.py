"""InfiniBand link-level flow control (``emulator/ib/credits.py``, IBA 7.9.4):
the credit arithmetic modulo 4096, the receiver's advertisement, and a link
simulated on a manual clock where a sender meets a slow receiver: no packet
ever finds the buffer full, and the sender stalls exactly while it has a
packet and no credit."""
from __future__ import annotations

import heapq
import random

import pytest

from emulator.ib.credits import CreditParams, VlCredits, blocks
from emulator.wire import IB_CREDIT_MOD


@pytest.mark.parametrize("nbytes, n", [(1, 1), (64, 1), (65, 2), (4096 + 30, 65)])
def test_a_packet_takes_its_length_in_64_byte_blocks_rounded_up(nbytes, n):
    assert blocks(nbytes) == n


def test_no_credit_before_the_peer_advertises_any():
    vl = VlCredits()
    assert vl.credit_blocks() == 0 and not vl.can_send(1)


def test_a_sender_spends_exactly_the_credit_advertised():
    vl = VlCredits()
    vl.on_fc(fctbs=0, fccl=100, now_ns=0)
    assert vl.try_send(60, 0) and vl.try_send(40, 0)
    assert vl.credit_blocks() == 0
    assert not vl.try_send(1, 5)
    vl.on_fc(fctbs=0, fccl=101, now_ns=9)
    assert vl.try_send(1, 9)
    assert vl.stalls == 1 and vl.stalled_ns == 4


def test_a_held_packet_may_start_when_the_fccl_allowing_it_came():
    """``send_at_ns``, the transmitter's seam: the arrival of the FCCL that lets
    the packet go, None while the credit does not (past the wrap too)."""
    vl = VlCredits()
    assert vl.send_at_ns(1) is None
    vl.on_fc(fctbs=0, fccl=10, now_ns=700)
    assert vl.send_at_ns(10) == 700 and vl.send_at_ns(11) is None
    vl.fctbs = 4090
    vl.on_fc(fctbs=0, fccl=(4090 + 20) % IB_CREDIT_MOD, now_ns=900)
    assert vl.send_at_ns(20) == 900 and vl.send_at_ns(21) is None
    for n in range(0, 40):
        assert (vl.send_at_ns(n) is not None) == vl.can_send(n)


def test_credit_survives_the_12_bit_wrap():
    vl = VlCredits()
    vl.fctbs = 4090
    vl.on_fc(fctbs=0, fccl=(4090 + 20) % IB_CREDIT_MOD, now_ns=0)   # FCCL 14: past the wrap
    assert vl.credit_blocks() == 20
    assert vl.try_send(6, 0) and vl.fctbs == 0
    assert vl.try_send(14, 0) and vl.fctbs == 14
    assert not vl.can_send(1)


def test_the_receiver_advertises_its_free_buffer_at_most_2048_blocks_ahead():
    small = VlCredits(CreditParams(buffer_blocks=100))
    small.on_fc(fctbs=4000, fccl=0, now_ns=0)            # ABR := the peer's FCTBS
    assert small.advertised_fccl() == (4000 + 100) % IB_CREDIT_MOD
    assert small.on_data(30) and small.advertised_fccl() == (4000 + 100) % IB_CREDIT_MOD
    small.release(30)
    assert small.advertised_fccl() == (4000 + 130) % IB_CREDIT_MOD
    big = VlCredits(CreditParams(buffer_blocks=10_000))
    assert big.advertised_fccl() == 2048


def test_blocks_lost_on_the_link_are_not_owed_credit():
    rx = VlCredits(CreditParams(buffer_blocks=64))
    rx.on_data(10)            # 10 of the sender's 30 blocks arrived, 20 were lost
    rx.release(10)
    rx.on_fc(fctbs=30, fccl=0, now_ns=0)                 # the sender's count resets ABR
    _, fccl = rx.make_fc(0)
    assert fccl == 30 + 64     # all 64 blocks free, counted from the blocks really sent


def test_an_update_is_due_after_enough_freed_blocks_or_the_period():
    vl = VlCredits(CreditParams(update_blocks=16, update_period_ns=1000), now_ns=0)
    assert vl.fc_due(0)                   # the first at once
    vl.make_fc(0)
    assert not vl.fc_due(999) and vl.next_fc_ns() == 1000
    vl.on_data(20)
    vl.release(15)
    assert not vl.fc_due(10)
    vl.release(1)
    assert vl.fc_due(10)
    vl.make_fc(10)
    assert not vl.fc_due(1009) and vl.fc_due(1010)


@pytest.mark.parametrize("bad", [{"buffer_blocks": 0}, {"update_blocks": 0}, {"update_period_ns": 0}])
def test_parameters_that_cannot_work_are_refused(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        CreditParams(**bad)


# ------------------------------------------------------------ a link on a manual clock

def simulate(seed: int, n_packets: int = 400, delay_ns: int = 50):
    """A sender (always a packet ready until ``n_packets``, serialized at one
    block per ns) and a receiver draining its buffer slower, in bursts,
    on one link with ``delay_ns`` each way; flow-control packets both
    ways when due. Returns (sender, receiver, stall intervals the
    simulation saw, the end time)."""
    rng = random.Random(seed)
    params = CreditParams(buffer_blocks=rng.choice([24, 40, 64]), update_blocks=rng.choice([1, 4, 8]),
                          update_period_ns=rng.choice([200, 500]))
    tx, rx = VlCredits(params), VlCredits(params)       # tx's receiver half and rx's sender half idle
    sizes = [rng.choice([1, 2, 4, 16]) for _ in range(n_packets)]
    events: list = []       # (t, seq, kind, data)
    seq = 0

    def at(t, kind, data=None):
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, data))

    at(0, "fc_from_rx")
    at(0, "tx_try")
    at(0, "drain")
    queue: list[int] = []       # the receiver's buffer, packets in order
    sent = in_flight = 0
    busy_until = 0
    stalled_from = None
    intervals = []
    t = 0
    while events:
        t, _, kind, data = heapq.heappop(events)
        if kind == "tx_try":
            if sent == n_packets or t < busy_until:
                continue
            n = sizes[sent]
            if tx.try_send(n, t):
                if stalled_from is not None:
                    intervals.append((stalled_from, t))
                    stalled_from = None
                sent += 1
                in_flight += 1
                busy_until = t + n
                at(t + n + delay_ns, "arrive", n)
                at(busy_until, "tx_try")
                if sent == n_packets:
                    tx.idle(t)
            elif stalled_from is None:
                stalled_from = t             # a packet ready, no credit: the sender waits
        elif kind == "arrive":
            assert rx.on_data(data), "a packet found the receiver's buffer full"
            queue.append(data)
            in_flight -= 1
        elif kind == "drain":
            if queue:
                rx.release(queue.pop(0))
            if rx.fc_due(t):
                at(t, "fc_from_rx")
            if sent < n_packets or queue or in_flight:
                at(t + rng.choice([1, 3, 10, 40]), "drain")
        elif kind == "fc_from_rx":
            fctbs, fccl = rx.make_fc(t)
            at(t + delay_ns, "fc_at_tx", (fctbs, fccl))
        elif kind == "fc_at_tx":
            tx.on_fc(*data, now_ns=t)
            at(t, "tx_try")
    return tx, rx, intervals, t, sent


@pytest.mark.parametrize("seed", range(12))
def test_a_slow_receiver_is_never_overrun_and_the_sender_stalls_exactly_without_credit(seed):
    tx, rx, intervals, _, sent = simulate(seed)
    assert sent == 400                                # everything went, in the end
    assert rx.overruns == 0                           # the buffer never overflowed
    assert rx.free_blocks == rx.params.buffer_blocks  # and drained
    assert intervals, "the receiver was slow: the sender must have waited"
    assert tx.stalls == len(intervals)
    assert tx.stalled_ns == sum(end - start for start, end in intervals)


def test_without_credit_checks_the_same_link_would_overflow():
    # the counterfactual: the same traffic, sent regardless of credit
    params = CreditParams(buffer_blocks=24)
    rx = VlCredits(params)
    overflowed = [not rx.on_data(4) for _ in range(10)]   # 40 blocks into 24
    assert any(overflowed) and rx.overruns == 4
