"""HPCC reaction point state machine (emulator.nic.hpcc), explicit times,
and its experiment-file spec (emulator.schema.hpcc)."""
from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from emulator.nic.hpcc import Hpcc
from emulator.nic.wall import hpcc_params
from emulator.nic.reaction import ReactionPoint
from emulator.schema.hpcc import HpccSpec
from tests.unit.test_ib_cc import FakeLogs

LINE = 100e9
T = 10_000                         # base RTT, ns
BT = LINE * T / 8e9                # B x T = W_init: 125,000 bytes
WRAP = 1 << 32
# the paper's parameters for a 100 Gbit/s NIC, T = 10 us
PAPER = hpcc_params(HpccSpec(base_rtt_us=T / 1000), 1.0, LINE)


def HpccParams(**kw):
    return replace(PAPER, **kw)


def cc_of(**kw):
    events = []
    p = HpccParams(**kw)
    cc = Hpcc(p, LINE, listener=lambda t, ev: events.append((t, ev)))
    return cc, events


class Link:
    """One port's INT counters: each ``sample`` advances its clock by ``dts``
    and its tx counter by ``frac`` of the line rate over that time."""

    def __init__(self, rate=LINE, tx=0, ts=0):
        self.rate, self.tx, self.ts = rate, tx, ts

    def sample(self, dts, frac, qlen=0):
        self.tx = (self.tx + round(self.rate * frac * dts / 8e9)) % WRAP
        self.ts = (self.ts + dts) % WRAP
        return (qlen, self.tx, self.ts, self.rate)


def start(cc, links, snd_nxt=100, now=0, qlen=0):
    """The first ACK: only stores the records."""
    cc.on_ack(now, 1, snd_nxt, [ln.sample(0, 0, qlen) for ln in links])


# -- parameters and start -----------------------------------------------------------------
def test_paper_defaults_and_initial_state():
    p = PAPER
    assert (p.enabled, p.eta, p.max_stage, p.w_ai_bytes, p.expected_flows, p.base_rtt_ns) == (
        True, 0.95, 5, None, 16, T)
    assert p.min_rate_frac == pytest.approx(100e6 / 100e9) and p.alpha_init == 0.0
    cc, ev = cc_of()
    assert cc.w_init_bytes == pytest.approx(BT) == 125_000    # W_init = B x T
    assert cc.window_bytes == cc.wc_bytes == cc.w_init_bytes
    assert cc.rate_bps == LINE                                 # R = W_init / T
    assert cc.w_ai_bytes == pytest.approx(BT * 0.05 / 16)      # W_init (1 - eta) / N
    assert cc.w_min_bytes == pytest.approx(BT * 0.001)
    assert (cc.u, cc.inc_stage, cc.last_update_seq, cc.active) == (0.0, 0, 0, False)
    assert cc.next_rate_ns > 10 ** 15 and cc.alpha_at(123) == 0.0 and ev == []
    assert HpccParams(base_rtt_ns=T, w_ai_bytes=80).machine(LINE).w_ai_bytes == 80


def test_first_ack_only_stores_the_records():
    cc, ev = cc_of()
    link = Link()
    cc.on_ack(5, 1, 100, [link.sample(T, 1.0, qlen=int(BT))])  # loaded, but nothing to compare
    assert ev == [] and cc.u == 0.0 and cc.window_bytes == BT and cc.wc_bytes == BT
    assert cc.last_update_seq == 100                           # ns-3: lastUpdateSeq = snd_nxt
    cc.on_ack(6, 2, 110, [link.sample(T, 1.0)])                # the second one reacts
    assert cc.u == pytest.approx(1.0) and ev == [(6, "ack")]


def test_full_rate_no_queue_gives_u_one_and_eta_times_wc():
    cc, ev = cc_of()
    link = Link()
    start(cc, [link])
    cc.on_ack(T, 101, 200, [link.sample(T, 1.0)])
    assert cc.u == pytest.approx(1.0)                          # tau = T: U = u
    w = BT / (1.0 / 0.95) + cc.w_ai_bytes
    assert cc.window_bytes == pytest.approx(w) and cc.wc_bytes == pytest.approx(w)
    assert cc.rate_bps == pytest.approx(LINE * w / BT)
    assert cc.inc_stage == 0 and cc.last_update_seq == 200
    assert ev == [(T, "ack")] and cc.alpha_at(T) == cc.u


def test_standing_queue_of_one_bdp_halves_the_window():
    cc, _ = cc_of()
    link = Link()
    cc.on_ack(0, 1, 100, [link.sample(0, 0, qlen=int(BT))])
    cc.on_ack(T, 101, 200, [link.sample(T, 1.0, qlen=int(BT))])
    assert cc.u == pytest.approx(2.0)                          # 1 (tx) + BT / BT (queue)
    w = BT * 0.95 / 2 + cc.w_ai_bytes
    assert cc.window_bytes == pytest.approx(w)
    assert 0.45 < cc.window_bytes / BT < 0.5
    assert cc.rate_bps == pytest.approx(LINE * w / BT)


def test_queue_term_uses_the_smaller_of_the_two_qlens():
    cc, _ = cc_of()
    link = Link()
    cc.on_ack(0, 1, 100, [link.sample(0, 0, qlen=int(BT / 4))])
    cc.on_ack(T, 101, 200, [link.sample(T, 0.5, qlen=int(BT))])
    assert cc.u == pytest.approx(0.5 + 0.25)


def test_additive_increase_below_eta_then_multiplicative_after_max_stage():
    cc, ev = cc_of()
    link = Link()
    seq = 100
    start(cc, [link], snd_nxt=seq, qlen=int(BT))
    ai = cc.w_ai_bytes

    def rtt(frac, qlen=0):
        nonlocal seq
        cc.on_ack(link.ts + T, seq + 1, seq + 100, [link.sample(T, frac, qlen)])
        seq += 100

    rtt(1.0, int(BT))                                          # U = 2: cut to ~half
    assert cc.u == pytest.approx(2.0)
    wc = BT * 0.95 / 2 + ai
    assert cc.wc_bytes == pytest.approx(wc) and cc.inc_stage == 0
    for stage in range(1, 6):                                  # U = 0.6 < eta: Wc + W_AI
        rtt(0.6)
        assert cc.u == pytest.approx(0.6)
        wc += ai
        assert cc.wc_bytes == pytest.approx(wc) and cc.window_bytes == pytest.approx(wc)
        assert cc.inc_stage == stage
    rtt(0.6)                                                   # stage 5 = maxStage: MI
    wc = wc / (0.6 / 0.95) + ai
    assert cc.wc_bytes == pytest.approx(wc) and cc.inc_stage == 0
    assert cc.rate_bps == pytest.approx(LINE * wc / BT)
    rtt(0.6)                                                   # and additive again
    assert cc.wc_bytes == pytest.approx(wc + ai) and cc.inc_stage == 1
    assert len(ev) == 8


def test_wc_moves_once_per_rtt():
    cc, ev = cc_of()
    link = Link()
    start(cc, [link], snd_nxt=100)
    cc.on_ack(T, 101, 200, [link.sample(T, 1.0)])             # passes 100: W_c updated
    wc = cc.wc_bytes
    assert cc.last_update_seq == 200
    # three more ACKs of the same RTT (ack_seq <= 200), each with its own U:
    # every one computes W from the same W_c, which stays
    prev_q = 0
    for i, (ack, frac, qlen) in enumerate(((150, 0.96, int(BT)), (180, 1.0, int(BT)),
                                           (200, 1.0, int(BT / 2)))):
        cc.on_ack(link.ts + T, ack, 250 + i, [link.sample(T, frac, qlen)])
        u = frac + min(qlen, prev_q) / BT                      # 0.96, 2, 1.5
        prev_q = qlen
        assert cc.u == pytest.approx(u)
        assert cc.window_bytes == pytest.approx(wc * 0.95 / u + cc.w_ai_bytes)
        assert cc.wc_bytes == wc and cc.inc_stage == 0 and cc.last_update_seq == 200
    assert len(ev) == 4
    # below eta for a while: the stage counts RTTs, not ACKs
    for ack in (190, 195, 200):
        cc.on_ack(link.ts + T, ack, 300, [link.sample(T, 0.5)])
        assert cc.window_bytes == pytest.approx(wc + cc.w_ai_bytes) and cc.inc_stage == 0
    cc.on_ack(link.ts + T, 201, 300, [link.sample(T, 0.5)])   # the RTT's update
    assert cc.wc_bytes == pytest.approx(wc + cc.w_ai_bytes) and cc.inc_stage == 1
    assert cc.last_update_seq == 300


def test_counters_wrap_around():
    cc, _ = cc_of()
    link = Link(tx=WRAP - 1000, ts=WRAP - 3000)
    start(cc, [link])
    rec = link.sample(T // 2, 1.0)                            # both counters wrap
    assert rec[1] < 100_000 and rec[2] < T
    cc.on_ack(1, 101, 200, [rec])
    assert cc.u == pytest.approx(0.5)                          # u = 1, tau = T/2: half way


def test_ewma_with_tau_below_t_and_the_most_loaded_hop():
    cc, _ = cc_of()
    a, b = Link(), Link(rate=LINE / 2)
    start(cc, [a, b])
    cc.on_ack(1, 101, 200, [a.sample(T, 0.8), b.sample(T, 0.3)])
    assert cc.u == pytest.approx(0.8)                          # tau = T
    u0 = cc.u
    # hop a: u = 0.5 over T/2; hop b (half the rate, a queue of half its
    # B x T): u = 1.5 over T/4
    cc.on_ack(2, 150, 200, [a.sample(T // 2, 0.5), b.sample(T // 4, 1.0, qlen=int(BT / 4))])
    assert cc.u == pytest.approx(0.75 * u0 + 0.25 * 1.0)      # the queue counts from the next
    cc.on_ack(3, 160, 200, [a.sample(T // 2, 0.5), b.sample(T // 4, 1.0, qlen=int(BT / 4))])
    u1 = 0.75 * u0 + 0.25 * 1.0
    assert cc.u == pytest.approx(0.75 * u1 + 0.25 * 1.5)      # b's u and b's tau
    # a tau above T counts as T: U = u
    cc.on_ack(4, 170, 200, [a.sample(3 * T, 0.2), b.sample(3 * T, 0.1)])
    assert cc.u == pytest.approx(0.2)


def test_path_change_is_stored_without_reacting():
    cc, ev = cc_of()
    a, b = Link(), Link()
    start(cc, [a])
    cc.on_ack(1, 101, 200, [a.sample(T, 1.0)])
    state = (cc.u, cc.window_bytes, cc.wc_bytes, cc.inc_stage, cc.last_update_seq)
    n = len(ev)
    cc.on_ack(2, 201, 300, [a.sample(T, 1.0, qlen=int(BT)), b.sample(T, 1.0)])  # 2 hops now
    assert (cc.u, cc.window_bytes, cc.wc_bytes, cc.inc_stage, cc.last_update_seq) == state
    assert len(ev) == n
    cc.on_ack(3, 202, 300, [a.sample(T, 0.5), b.sample(T, 0.9)])
    assert cc.u == pytest.approx(0.9)                          # against the stored 2 hops
    assert cc.last_update_seq == 300 and len(ev) == n + 1


def test_a_hop_with_equal_timestamps_is_skipped():
    cc, ev = cc_of()
    a, b = Link(), Link()
    start(cc, [a, b])
    # hop a: same ts, more bytes (would be an infinite rate); hop b: a real sample
    a.tx += 10_000
    cc.on_ack(1, 101, 200, [(int(BT), a.tx, a.ts, LINE), b.sample(T, 1.0)])
    assert cc.u == pytest.approx(1.0) and ev == [(1, "ack")]
    # no hop with a new timestamp: nothing happens, not even the per-RTT update
    state = (cc.u, cc.window_bytes, cc.wc_bytes, cc.inc_stage, cc.last_update_seq)
    cc.on_ack(2, 500, 600, [(0, a.tx, a.ts, LINE), (0, b.tx, b.ts, LINE)])
    assert (cc.u, cc.window_bytes, cc.wc_bytes, cc.inc_stage, cc.last_update_seq) == state
    assert len(ev) == 1
    cc.on_ack(3, 501, 600, [a.sample(T, 0.2), b.sample(T, 0.1)])
    # hop a against the record it kept: the 10,000 bytes count now, 0.08 more
    assert cc.u == pytest.approx(0.28) and cc.last_update_seq == 600


def test_rate_floor_and_ceiling():
    cc, _ = cc_of(min_rate_frac=0.01, max_stage=0)
    link = Link()
    start(cc, [link])
    seq = 100
    for _ in range(20):                                        # a huge standing queue
        cc.on_ack(link.ts, seq + 1, seq + 100, [link.sample(T, 1.0, qlen=int(20 * BT))])
        seq += 100
        assert cc.rate_bps >= 0.01 * LINE * (1 - 1e-12)
    assert cc.window_bytes == pytest.approx(0.01 * BT)
    assert cc.rate_bps == pytest.approx(0.01 * LINE)
    for _ in range(50):                                        # an idle path: back to line rate
        cc.on_ack(link.ts, seq + 1, seq + 100, [link.sample(T, 0.0)])
        seq += 100
        assert cc.rate_bps <= LINE
    assert cc.u == 0.0 and cc.window_bytes == BT and cc.rate_bps == LINE


def test_cnp_tx_and_advance_do_nothing_but_count():
    cc, ev = cc_of()
    cc.on_cnp(10)
    cc.on_cnp(20)
    cc.on_tx(10 ** 9, 30)
    cc.advance(10 ** 12)
    assert cc.cnps == 2 and ev == [] and cc.rate_bps == LINE and not cc.active


# -- parameters ---------------------------------------------------------------------------
def test_the_machine_needs_a_line_rate():
    with pytest.raises(ValueError, match="line_bps"):
        Hpcc(PAPER, 0)
    with pytest.raises(ValueError, match="base_rtt_ns"):
        Hpcc(replace(PAPER, base_rtt_ns=0), LINE)


def test_params_from_the_spec_keep_fabric_time_and_carry_the_dilation():
    spec = HpccSpec(base_rtt_us=8.0, min_rate_gbps=0.5)
    p1, p = hpcc_params(spec, 1.0, LINE), hpcc_params(spec, 1000.0, LINE)
    assert p1.base_rtt_ns == p.base_rtt_ns == 8000          # fabric ns, the INT clock
    assert (p1.dilation, p.dilation) == (1.0, 1000.0)
    assert replace(p, dilation=1.0) == p1
    assert p.enabled is True and p.w_ai_bytes is None
    assert p.min_rate_frac == pytest.approx(0.005)
    assert hpcc_params(HpccSpec(base_rtt_us=1.0), 1.0, 50e6).min_rate_frac == 1.0   # capped
    # the NIC runs at line / D: the same windows in bytes, the rate / D
    a, b = p1.machine(LINE), p.machine(LINE / 1000)
    assert b.w_init_bytes == pytest.approx(a.w_init_bytes) == 100_000
    assert b.w_ai_bytes == pytest.approx(a.w_ai_bytes)
    assert b.rate_bps == LINE / 1000


def test_spec_defaults_and_bounds():
    spec = HpccSpec()
    assert (spec.eta, spec.max_stage, spec.w_ai_bytes, spec.expected_flows,
            spec.base_rtt_us, spec.min_rate_gbps, spec.dport) == (0.95, 5, None, 16, None, 0.1, 4791)
    for bad in ({"eta": 1.5}, {"eta": 0.0}, {"max_stage": -1}, {"expected_flows": 0},
                {"w_ai_bytes": 0.0}, {"base_rtt_us": 0.0}, {"min_rate_gbps": 0.0},
                {"eta": "0.9"}, {"etta": 0.9}, {"enabled": True}):
        with pytest.raises(ValidationError):
            HpccSpec(**bad)


# -- ReactionPoint hosting HPCC -----------------------------------------------------------
class FakeQp:
    def __init__(self, qpn=0x11, remote_qpn=0x22):
        self.qpn, self.remote_qpn, self.cc = qpn, remote_qpn, None
        self.mtu_bytes, self.window_pkts = 1024, 1 << 30


def test_reaction_point_with_hpcc():
    changes, logs = [], FakeLogs()
    rp = ReactionPoint(HpccParams(base_rtt_ns=T), lambda qp, r, t, ev:
                       changes.append((r, t, ev)), logs)
    qp = FakeQp()
    rp.attach(qp, LINE, 0)
    assert isinstance(qp.cc, Hpcc) and changes == []
    rp.on_cnp(qp, 50)                                          # logged, counted, no reaction
    rp.advance(10 ** 9)
    assert changes == [] and qp.cc.cnps == 1 and logs.cnps == [(50, 0x11, 0x22, "rx")]
    link = Link()
    start(qp.cc, [link])
    qp.cc.on_ack(T, 101, 200, [link.sample(T, 1.0, qlen=0)])
    r = qp.cc.rate_bps
    assert changes == [(r, T, "ack")] and r < LINE
    assert logs.qps == [(0, 0x11, LINE, 0.0, "init"), (T, 0x11, r, pytest.approx(1.0), "ack")]


# -- closed loop: a fluid model of one bottleneck -----------------------------------------
def test_converges_to_eta_with_no_queue():
    """N senders at line rate into one link of the same rate: the queue
    integrates the excess; each sender gets an ACK every ``dt`` with the INT
    record the link had half a base RTT earlier and the sequence number it
    had sent one base RTT earlier. Senders start 5 RTTs apart, each at line
    rate. In steady state HPCC holds the link at eta plus one W_AI per flow
    per RTT, U = eta + n W_AI / W_init, with an empty queue, shared fairly."""
    n, dt, steps, mtu = 4, 200, 16_000, 1000
    ccs = [HpccParams(base_rtt_ns=T).machine(LINE) for _ in range(n)]
    first = [i * 5 * T // dt for i in range(n)]
    half, full = T // 2 // dt, T // dt
    q, tx = 0.0, WRAP - 10 ** 6                                # the tx counter wraps early on
    sent = [0.0] * n
    ints, seqs, util, queue = [], [], [], []
    cap = LINE * dt / 8e9
    for k in range(steps):
        now = k * dt
        arriving = sum(c.rate_bps for i, c in enumerate(ccs) if k >= first[i]) * dt / 8e9
        out = min(cap, q + arriving)
        q += arriving - out
        tx = (tx + round(out)) % WRAP
        ints.append((int(q), tx, now % WRAP, LINE))
        for i, c in enumerate(ccs):
            if k >= first[i]:
                sent[i] += c.rate_bps * dt / 8e9
        seqs.append([int(s // mtu) for s in sent])
        for i, c in enumerate(ccs):
            if k - full >= first[i]:
                c.on_ack(now, seqs[k - full][i] + 1, seqs[k][i], [ints[k - half]])
        util.append(out / cap)
        queue.append(q)
    tail = steps // 10
    assert max(queue) > BT                                     # the joins did build a queue
    assert max(queue[-tail:]) < 0.01 * BT                      # ... that is gone
    u = sum(util[-tail:]) / tail
    assert u == pytest.approx(0.95 + n * ccs[0].w_ai_bytes / BT, abs=0.005)
    assert 0.95 <= u < 1
    rates = [c.rate_bps for c in ccs]
    assert max(rates) / min(rates) < 1.05     # fair: the gap shrinks by e every ~76 RTTs
