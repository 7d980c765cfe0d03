"""DCQCN reaction point state machine (emulator.nic.dcqcn), explicit times."""
from __future__ import annotations

from dataclasses import replace

import pytest

from emulator.nic.dcqcn import Dcqcn
from emulator.nic.wall import dcqcn_params
from emulator.schema.dcqcn import DcqcnSpec

LINE = 1e9
US = 1_000
# the paper's parameters, for its 40 Gbit/s NIC (the fractions of the line rate)
PAPER = dcqcn_params(DcqcnSpec(), 1.0, 40e9)


def rp(**kw):
    events = []
    p = replace(PAPER, **kw)
    cc = Dcqcn(p, LINE, listener=lambda t, ev: events.append((t, ev)))
    return cc, events


def test_paper_defaults():
    p = PAPER
    assert (p.g, p.alpha_timer_ns, p.rate_timer_ns, p.byte_counter_bytes,
            p.fast_recovery_steps) == (1 / 256, 55 * US, 55 * US, 10 << 20, 5)
    assert p.rai_frac == pytest.approx(0.001) and p.rhai_frac == pytest.approx(0.005)
    assert p.min_rate_frac == pytest.approx(0.0025) and p.enabled


def test_cnp_cuts_by_half_alpha_and_remembers_target():
    g = 1 / 16
    cc, ev = rp(g=g, alpha_init=0.5)
    assert not cc.active and cc.rate_bps == LINE
    cc.on_cnp(1000)
    assert cc.target_bps == LINE
    assert cc.rate_bps == pytest.approx(LINE * (1 - 0.5 / 2))       # cut with the old alpha
    a1 = (1 - g) * 0.5 + g
    assert cc.alpha_at(1000) == pytest.approx(a1)
    r1 = cc.rate_bps
    cc.on_cnp(2000)                                                 # < K later: no decay
    assert cc.target_bps == pytest.approx(r1)
    assert cc.rate_bps == pytest.approx(r1 * (1 - a1 / 2))
    assert cc.alpha_at(2000) == pytest.approx((1 - g) * a1 + g)
    assert ev == [(1000, "cnp"), (2000, "cnp")] and cc.active


def test_alpha_rises_with_cnps_and_decays_every_k_without():
    g, k = 1 / 256, 55 * US
    cc, _ = rp(alpha_init=0.0, rate_timer_ns=10**12)
    t = 0
    for n in range(1, 21):
        t += 10 * US                                                # CNPs closer than K
        cc.on_cnp(t)
        assert cc.alpha_at(t) == pytest.approx(1 - (1 - g) ** n)
    a = cc.alpha_at(t)
    assert cc.alpha_at(t + k - 1) == a                              # not before a full K
    assert cc.alpha_at(t + k) == pytest.approx(a * (1 - g))
    assert cc.alpha_at(t + 10 * k + k // 2) == pytest.approx(a * (1 - g) ** 10)
    # a CNP restarts the K timer from the decayed value
    t2 = t + 3 * k
    r = cc.rate_bps
    cc.on_cnp(t2)
    assert cc.rate_bps == pytest.approx(r * (1 - a * (1 - g) ** 3 / 2))   # cut by the decayed alpha
    assert cc.alpha_at(t2) == pytest.approx((1 - g) * a * (1 - g) ** 3 + g)
    assert cc.alpha_at(t2 + k - 1) == cc.alpha_at(t2)


def test_fast_recovery_halves_the_gap_to_the_target_f_times():
    t_ns, f = 50 * US, 5
    cc, ev = rp(rate_timer_ns=t_ns, fast_recovery_steps=f, byte_counter_bytes=10**12)
    cc.on_cnp(0)
    rt, rc0 = cc.target_bps, cc.rate_bps
    assert (rt, rc0) == (LINE, LINE / 2)
    for i in range(1, f + 1):
        cc.advance(i * t_ns - 1)
        assert cc.t_stage == i - 1                                  # not yet
        cc.advance(i * t_ns)
        assert cc.target_bps == rt                                  # target fixed
        assert rt - cc.rate_bps == pytest.approx((rt - rc0) / 2 ** i)
    assert [e for _, e in ev] == ["cnp"] + ["rate_timer"] * f
    assert [t for t, _ in ev[1:]] == [i * t_ns for i in range(1, f + 1)]


def test_additive_then_hyper_increase_after_f_stages():
    f, t_ns, b = 5, 50 * US, 100_000
    rai, rhai = 0.01, 0.05
    cc, ev = rp(rate_timer_ns=t_ns, byte_counter_bytes=b, fast_recovery_steps=f,
                rai_frac=rai, rhai_frac=rhai, alpha_init=1.0)
    cc.on_cnp(0)                                        # Rc = Rt/2 = LINE/2 ... Rt = LINE
    cc.on_cnp(1)                                        # Rt = LINE/2, Rc ~ LINE/4
    rt = cc.target_bps
    assert rt == pytest.approx(LINE / 2)
    cc.advance(1 + f * t_ns)                            # F timer events: fast recovery
    assert cc.t_stage == f and cc.target_bps == rt
    rc = cc.rate_bps
    cc.advance((f + 1) * t_ns + 1)                      # timer stage F+1, bytes 0: additive
    assert cc.target_bps == pytest.approx(rt + rai * LINE)
    assert cc.rate_bps == pytest.approx((cc.target_bps + rc) / 2)
    rt = cc.target_bps
    # byte counter: F events bring it to F (still additive: min(T, BC) <= F) ...
    now = (f + 1) * t_ns + 2
    for _ in range(f):
        cc.on_tx(b, now)
    assert cc.bc_stage == f
    assert cc.target_bps == pytest.approx(rt + f * rai * LINE)
    rt = cc.target_bps
    # ... the next one has both counters past F: hyper increase, i = min(T, BC) - F
    rc = cc.rate_bps
    cc.on_tx(b, now)
    assert (cc.t_stage, cc.bc_stage) == (f + 1, f + 1)
    assert cc.target_bps == pytest.approx(rt + 1 * rhai * LINE)
    assert cc.rate_bps == pytest.approx((cc.target_bps + rc) / 2)
    assert ev[-1] == (now, "byte_counter")


def test_byte_counter_alone_drives_recovery():
    b = 64_000
    cc, ev = rp(byte_counter_bytes=b, rate_timer_ns=10**12)
    cc.on_cnp(0)
    cc.on_tx(b - 1, 10)
    assert cc.bc_stage == 0 and len(ev) == 1
    cc.on_tx(1, 20)                                     # exactly B bytes: one event
    assert cc.bc_stage == 1 and ev[-1] == (20, "byte_counter")
    assert cc.rate_bps == pytest.approx(LINE * 0.75)
    cc.on_tx(3 * b + 5, 30)                             # three more events at once
    assert cc.bc_stage == 4 and cc.bytes_acc == 5
    cc.on_cnp(40)                                       # a CNP clears the counters
    assert (cc.bc_stage, cc.t_stage, cc.bytes_acc) == (0, 0, 0)


def test_rate_bounds_and_return_to_line_rate():
    cc, ev = rp(min_rate_frac=0.01, rate_timer_ns=50 * US, rai_frac=0.05, rhai_frac=0.1,
                byte_counter_bytes=10**12)
    for i in range(200):                                # CNP storm: never below R_min
        cc.on_cnp(i * US)
        assert cc.rate_bps >= 0.01 * LINE - 1e-6
    assert cc.rate_bps == pytest.approx(0.01 * LINE)
    # no more CNPs: timer-driven recovery all the way back, never above line rate
    t = 200 * US
    seen = []
    while cc.active and t < 10**10:
        t += 50 * US
        cc.advance(t)
        seen.append(cc.rate_bps)
        assert cc.rate_bps <= LINE and cc.target_bps <= LINE
    assert not cc.active and cc.rate_bps == LINE           # dormant again at line rate
    assert seen == sorted(seen)                              # monotonic recovery
    n = len(ev)
    cc.advance(t + 10**9)
    cc.on_tx(10**6, t + 10**9)
    assert len(ev) == n                                  # dormant: no events


def test_advance_catches_up_missed_timer_events_at_their_times():
    cc, ev = rp(rate_timer_ns=10 * US, byte_counter_bytes=10**12)
    cc.on_cnp(5)
    cc.advance(5 + 35 * US)
    assert [t for t, e in ev if e == "rate_timer"] == [5 + 10 * US, 5 + 20 * US, 5 + 30 * US]


def test_params_from_the_spec_put_times_on_the_clock_and_rates_as_fractions():
    p = dcqcn_params(DcqcnSpec(enabled=False, g=0.5, rate_increase_timer_us=550.0,
                               rate_ai_gbps=0.1), 10.0, 10e9)
    assert (p.enabled, p.g, p.rate_timer_ns, p.rai_frac) == (False, 0.5, 5_500_000, 0.01)
    assert p.alpha_timer_ns == 550_000                  # the default, dilated
    assert dcqcn_params(DcqcnSpec(min_rate_gbps=20.0), 1.0, 10e9).min_rate_frac == 1.0
