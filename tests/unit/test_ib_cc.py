"""IB congestion control, the CA's reaction side (emulator.nic.ib_cc), explicit times."""
from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from emulator.nic.dcqcn import Dcqcn
from emulator.nic.ib_cc import IbCc
from emulator.nic.reaction import ReactionPoint
from emulator.nic.wall import dcqcn_params, ib_cc_params
from emulator.schema.dcqcn import DcqcnSpec
from emulator.schema.ib_cc import IbCcSpec

LINE = 100e9
T150 = 1024 * 150                 # the default CCTI timer: 153.6 us
DEFAULTS = ib_cc_params(IbCcSpec(), 1.0)


def IbCcParams(**kw):
    """The defaults with ``kw`` changed (``ccti_timer`` sets the clock's too, D = 1)."""
    if "ccti_timer" in kw:
        kw["ccti_timer_ns"] = 1024 * kw["ccti_timer"]
    return replace(DEFAULTS, **kw)


def cc_of(**kw):
    events = []
    p = IbCcParams(**kw)
    cc = IbCc(p, LINE, listener=lambda t, ev: events.append((t, ev)))
    return cc, events


def rate(shift, mult):
    return LINE / (1 + mult / 2 ** shift)


def test_defaults():
    p = IbCcParams()
    assert (p.enabled, p.ccti_increase, p.ccti_timer, p.ccti_min) == (True, 1, 150, 0)
    assert p.ccti_timer_ns == 153_600 and p.ccti_limit == 127
    assert len(p.cct) == 128 and p.cct[0] == (2, 0) and p.cct[127] == (2, 127)
    cc = IbCc(p, LINE)
    assert (cc.ccti, cc.rate_bps, cc.active, cc.alpha_at(0)) == (0, LINE, False, 0.0)


def test_becn_raises_ccti_and_rate_follows_the_table():
    cc, ev = cc_of(ccti_increase=2, cct=((0, 0), (0, 1), (1, 3), (3, 5), (2, 16383)))
    cc.on_cnp(1000)
    assert cc.ccti == 2 and cc.rate_bps == rate(1, 3)          # 1.5 packet times of gap
    assert cc.rate_bps == LINE / 2.5
    assert cc.active and cc.next_rate_ns == 1000 + T150
    assert cc.alpha_at(1000) == 2.0                             # the log's alpha is the CCTI
    cc.on_cnp(2000)
    assert cc.ccti == 4 and cc.rate_bps == rate(2, 16383)
    assert ev == [(1000, "cnp"), (2000, "cnp")]


def test_default_table_rates():
    cc, _ = cc_of()
    seen = []
    for t in range(1, 5):
        cc.on_cnp(t)
        seen.append(cc.rate_bps / LINE)
    assert seen == pytest.approx([0.8, 1 / 1.5, 1 / 1.75, 0.5])


def test_ccti_caps_at_the_table_end():
    cc, ev = cc_of(ccti_increase=3, cct=((0, 0), (0, 1), (0, 2), (0, 3)))
    for t in (10, 20, 30):
        cc.on_cnp(t)
    assert cc.ccti == 3 and cc.rate_bps == LINE / 4
    assert len(ev) == 3                                          # every BECN reported


def test_timer_decrements_one_step_per_period_to_ccti_min():
    cc, ev = cc_of(ccti_increase=3, ccti_timer=10, ccti_min=1)
    period = 1024 * 10
    cc.on_cnp(0)                                                 # CCTI 1 -> 4
    assert cc.ccti == 4
    cc.advance(period - 1)
    assert cc.ccti == 4 and len(ev) == 1                         # not before a full period
    cc.advance(period)
    assert cc.ccti == 3 and cc.rate_bps == rate(2, 3) and cc.active
    cc.advance(2 * period)
    cc.advance(3 * period)
    assert cc.ccti == 1 and cc.rate_bps == rate(2, 1)            # stops at ccti_min
    assert not cc.active and cc.next_rate_ns > 10 ** 15
    cc.advance(100 * period)
    assert cc.ccti == 1
    assert ev == [(0, "cnp")] + [(k * period, "rate_timer") for k in (1, 2, 3)]


def test_becn_while_the_timer_runs_does_not_restart_it():
    cc, ev = cc_of()
    cc.on_cnp(0)
    cc.on_cnp(T150 - 5)                                          # hfi1: started only if not active
    assert cc.ccti == 2 and cc.next_rate_ns == T150
    cc.advance(T150)
    assert cc.ccti == 1 and ev[-1] == (T150, "rate_timer")
    cc.advance(2 * T150)
    assert cc.ccti == 0 and not cc.active and ev[-1] == (2 * T150, "rate_timer")
    # back at the floor: the next BECN starts a fresh timer from its own time
    cc.on_cnp(5 * T150 + 7)
    assert cc.next_rate_ns == 6 * T150 + 7


def test_late_advance_runs_every_due_expiry_at_its_own_time():
    cc, ev = cc_of(ccti_increase=5)
    cc.on_cnp(100)
    cc.advance(100 + 3 * T150 + 1)
    assert cc.ccti == 2
    assert ev[1:] == [(100 + k * T150, "rate_timer") for k in (1, 2, 3)]
    assert cc.next_rate_ns == 100 + 4 * T150


def test_becn_runs_due_expiries_first():
    cc, ev = cc_of(ccti_increase=2)
    cc.on_cnp(0)                                                 # 2, timer due at T150
    cc.on_cnp(T150 + 1)                                          # expiry (-> 1) then BECN (-> 3)
    assert cc.ccti == 3
    assert ev == [(0, "cnp"), (T150, "rate_timer"), (T150 + 1, "cnp")]
    assert cc.next_rate_ns == 2 * T150                           # the running timer, not restarted


def test_on_tx_is_a_noop():
    cc, ev = cc_of()
    cc.on_cnp(0)
    cc.on_tx(10 ** 9, 1)
    assert cc.ccti == 1 and len(ev) == 1


def test_dilation_scales_only_the_timer():
    p = ib_cc_params(IbCcSpec(ccti_timer=150), 10.0)
    assert p.ccti_timer_ns == 10 * T150
    q = ib_cc_params(IbCcSpec(), 1000.0)
    assert q.ccti_timer_ns == 1000 * T150 and q.ccti_timer == 150
    cc = IbCc(q, LINE / 1000)                                    # the dilated line rate
    cc.on_cnp(0)
    assert cc.rate_bps == LINE / 1000 * 0.8 and cc.next_rate_ns == 1000 * T150


@pytest.mark.parametrize("kw, msg", [
    ({"ccti_increase": 0}, "ccti_increase"),
    ({"ccti_timer": 0}, "ccti_timer"),
    ({"ccti_timer": 65536}, "ccti_timer"),
    ({"ccti_min": -1}, "ccti_min"),
    ({"ccti_min": 4, "cct": [[0, 0]] * 4}, "ccti_min"),
    ({"ccti_min": 128}, "ccti_min"),                     # the default table has 128
    ({"cct": []}, "cct"),
    ({"cct": [[0, 0]] * 1025}, "cct"),
    ({"cct": [[0, 0], [4, 1]]}, r"cct\.1\.0"),
    ({"cct": [[0, 0], [0, 16384]]}, r"cct\.1\.1"),
    ({"cct": [[0, 0], [0, -1]]}, r"cct\.1\.1"),
    ({"cct": [[0, 0, 0]]}, "cct"),
    ({"ccti_timer": 1.5}, "ccti_timer"),
    ({"ccti_incr": 2}, "ccti_incr"),
])
def test_spec_bounds(kw, msg):
    import json
    with pytest.raises(ValidationError, match=msg):
        IbCcSpec.model_validate_json(json.dumps(kw))


def test_params_from_the_spec():
    p = ib_cc_params(IbCcSpec.model_validate_json(
        '{"ccti_increase": 2, "ccti_timer": 10, "cct": [[0, 0], [1, 1], [3, 7]]}'), 1.0)
    assert (p.ccti_increase, p.ccti_timer, p.cct) == (2, 10, ((0, 0), (1, 1), (3, 7)))
    assert p.ccti_timer_ns == 10_240 and p.ccti_limit == 2


def test_machine_builds_the_right_state_machine():
    assert isinstance(IbCcParams().machine(LINE), IbCc)
    d = dcqcn_params(DcqcnSpec(), 1.0, LINE).machine(LINE)
    assert isinstance(d, Dcqcn) and d.rate_bps == LINE


# -- ReactionPoint hosting IB CC --------------------------------------------------------
class FakeQp:
    def __init__(self, qpn=0x11, remote_qpn=0x22):
        self.qpn, self.remote_qpn, self.cc = qpn, remote_qpn, None


class FakeLogs:
    def __init__(self):
        self.qps, self.cnps = [], []

    def qp(self, t, qpn, rate_bps, alpha, event):
        self.qps.append((t, qpn, rate_bps, alpha, event))

    def cnp(self, t, qpn, remote_qpn, direction):
        self.cnps.append((t, qpn, remote_qpn, direction))


def test_reaction_point_with_ib_cc():
    changes, logs = [], FakeLogs()
    rp = ReactionPoint(IbCcParams(ccti_timer=1), lambda qp, r, t, ev:
                       changes.append((qp.qpn, r, t, ev)), logs)
    qp = FakeQp()
    rp.attach(qp, LINE, 0)
    assert isinstance(qp.cc, IbCc) and changes == []              # line rate: nothing to tell
    rp.on_cnp(qp, 100)
    assert changes == [(0x11, LINE * 0.8, 100, "cnp")]
    rp.advance(100 + 1023)
    assert len(changes) == 1
    rp.advance(100 + 1024)
    assert changes[-1] == (0x11, LINE, 1124, "rate_timer") and not qp.cc.active
    assert logs.qps == [(0, 0x11, LINE, 0.0, "init"), (100, 0x11, LINE * 0.8, 1.0, "cnp"),
                        (1124, 0x11, LINE, 0.0, "rate_timer")]
    assert logs.cnps == [(100, 0x11, 0x22, "rx")]


def test_reaction_point_ccti_min_is_a_standing_delay():
    changes, logs = [], FakeLogs()
    rp = ReactionPoint(IbCcParams(ccti_min=4), lambda qp, r, t, ev:
                       changes.append((r, t, ev)), logs)
    qp = FakeQp()
    rp.attach(qp, LINE, 50)
    assert changes == [(LINE / 2, 50, "init")]                    # CCT[4] = (2, 4): half
    assert logs.qps == [(50, 0x11, LINE / 2, 4.0, "init")]


def test_reaction_point_disabled_ib_cc():
    logs = FakeLogs()
    rp = ReactionPoint(IbCcParams(enabled=False, ccti_min=2), lambda *a: None, logs)
    qp = FakeQp()
    rp.attach(qp, LINE, 0)
    rp.on_cnp(qp, 10)
    assert qp.cc is None and not rp.enabled
    assert logs.qps == [(0, 0x11, LINE, 2.0, "init")] and logs.cnps == [(10, 0x11, 0x22, "rx")]
