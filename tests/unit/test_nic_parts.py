"""The NIC's parts alone, with explicit times (no socket loop, no sleep):
PFC reception, notification point, reaction point, requester go-back-N and
timers, responder, transmitter schedule, CPU gate and tenant filter."""
from __future__ import annotations

import struct

import pytest

from tests.nics import roce_nic
from emulator.nic import roce
from emulator.nic.wall import dcqcn_params
from emulator.schema.dcqcn import DcqcnSpec
from emulator.nic.frames import AckFrame, CnpFrame, DataFrame
from emulator.nic.host_cpu import CpuGate, CpuServers, TenantFilter
from emulator.nic.nic import NicStats
from emulator.nic.notification import NotificationPoint
from emulator.nic.pfc import PfcReceiver
from emulator.nic.qp import QpState, QueuePair, WcStatus
from emulator.nic.reaction import ReactionPoint
from emulator.nic.read import ReadResponder
from emulator.nic.requester import Requester
from emulator.nic.responder import Responder
from emulator.nic.transmitter import Transmitter
from emulator.clock import ManualClock
from emulator.wire import WIRE_OVERHEAD_BYTES

MAC_A, MAC_B, IP_A, IP_B = "02:00:00:00:0a:01", "02:00:00:00:0b:01", "10.0.1.1", "10.0.2.1"
RATE = 100_000_000


def make_qp(qpn=0x11, rqpn=0x22, mtu=1024, rate_bps=None):
    tpl = roce.FrameTemplate(MAC_A, MAC_B, IP_A, IP_B, 50000, rqpn, max_payload_bytes=mtu)
    return QueuePair(qpn, IP_B, rqpn, 50000, 0, 0, rate_bps, MAC_B, tpl, mtu)


def requester(cq, st, **kw):
    args = dict(link_rate_bps=RATE, mtu_bytes=1024, ack_every_n=16, rto_ns=1_000_000,
                retry_cnt=2, rnr_retry=None, max_outstanding_pkts=1 << 20, cq=cq, stats=st,
                unix_ns=ManualClock().unix_ns)
    args.update(kw)
    return Requester(**args)


def ack(qp, psn, syndrome=roce.AETH_ACK_SYNDROME):
    f = roce.FrameTemplate(MAC_B, MAC_A, IP_B, IP_A, 1, qp.qpn).build(
        roce.RC_ACK, psn, aeth=(syndrome, 0))
    return roce.parse_roce(bytes(f))


def pfc_frame(timers):
    enable = sum(1 << p for p in timers)
    t = [timers.get(p, 0) for p in range(8)]
    return (bytes.fromhex("0180c2000001") + bytes(6)
            + struct.pack("!HHH8H", 0x8808, 0x0101, enable, *t) + bytes(26))


class SockLog:
    def __init__(self):
        self.sent = []
        self.now = 0

    def send(self, b):
        self.sent.append((self.now, bytes(b)))
        return len(b)


# -- PFC -----------------------------------------------------------------------------
def test_pfc_pauses_for_the_quanta_and_sums_our_classes():
    pfc = PfcReceiver(RATE, (3, 6))
    assert pfc.on_frame(pfc_frame({3: 100, 4: 100}), 1000)
    q_ns = 100 * 512 * 1e9 / RATE
    assert pfc.paused(3, 1000) and not pfc.paused(3, int(1000 + q_ns))
    assert pfc.on_frame(pfc_frame({3: 0}), 2000)           # resume at once
    assert not pfc.paused(3, 2000)
    assert pfc.paused_ns(10**9) == 1000                     # priority 4 is not ours
    assert not pfc.on_frame(bytes(6) + pfc_frame({3: 1})[6:], 0)   # wrong MAC


# -- notification / reaction points -----------------------------------------------------
def test_notification_point_one_cnp_per_interval_per_qp():
    np_ = NotificationPoint(1000)
    a, b = make_qp(1, 2), make_qp(3, 4)
    for t in (0, 10, 999):
        np_.on_ce(a, t)
    np_.on_ce(b, 5)
    np_.on_ce(a, 1000)
    assert [(type(f), f.qp.qpn) for f in np_.out] == [(CnpFrame, 1), (CnpFrame, 3),
                                                      (CnpFrame, 1)]
    off = NotificationPoint(None)
    off.on_ce(a, 0)
    assert not off.out


def test_reaction_point_cuts_and_recovers_on_its_timer():
    changes = []
    rp = ReactionPoint(dcqcn_params(DcqcnSpec(rate_increase_timer_us=1.0, alpha_update_us=1.0), 1.0, 40e9),
                       lambda qp, r, t, ev: changes.append((qp.qpn, r, t, ev)))
    qp = make_qp()
    rp.attach(qp, RATE, 0)
    rp.on_cnp(qp, 100)
    assert changes == [(qp.qpn, RATE / 2, 100, "cnp")]
    rp.advance(1099)
    assert len(changes) == 1
    rp.advance(1100)
    assert changes[-1][2:] == (1100, "rate_timer") and changes[-1][1] > RATE / 2


def test_the_timer_pass_walks_only_qps_a_cnp_set_running_until_they_recover():
    changes = []
    rp = ReactionPoint(dcqcn_params(DcqcnSpec(rate_increase_timer_us=1.0, alpha_update_us=1.0), 1.0, 40e9),
                       lambda qp, r, t, ev: changes.append((qp.qpn, r, t, ev)))
    qps = [make_qp(n, n + 100) for n in range(1, 41)]
    for qp in qps:
        rp.attach(qp, RATE, 0)
    assert rp.running == ()
    rp.on_cnp(qps[7], 100)
    assert rp.running == (qps[7],)
    t = 100
    while rp.running:                      # recovers on its timer alone (no traffic)
        t += 1000
        rp.advance(t)
        assert t < 10_000_000
    assert changes[-1][:2] == (qps[7].qpn, RATE) and not qps[7].cc.active
    assert all(c[0] == qps[7].qpn for c in changes)
    rp.on_cnp(qps[7], t + 5)               # cut again: back in the pass
    rp.on_cnp(qps[3], t + 5)
    assert set(rp.running) == {qps[3], qps[7]} and len(rp.running) == 2
    rp.on_cnp(qps[3], t + 6)               # a second CNP does not list it twice
    assert len(rp.running) == 2


# -- requester -------------------------------------------------------------------------
def test_requester_go_back_n_on_nak_and_completion_on_ack():
    cq, st = [], NicStats()
    rq = requester(cq, st)
    qp = make_qp()
    rq.qps.append(qp)
    rq.post(qp, 7, memoryview(bytes(4 * 1024)), True, 0, 9, True, now=0)
    frames = [rq.take(qp)[0] for _ in range(4)]
    assert [(type(f), f.k, f.psn, f.ack_req) for f in frames] == \
        [(DataFrame, k, k, k == 3) for k in range(4)]            # AckReq on the last
    for t, f in enumerate(frames[:3]):
        rq.sent(qp, t, f.psn + 1, f.ack_req)
    assert qp.rto_deadline_ns == 0                          # no response asked for yet
    rq.sent(qp, 10, 4, True)
    assert qp.rto_deadline_ns == 10 + 1_000_000
    rq.on_ack(qp, ack(qp, 1, roce.NAK_PSN_SEQ_ERR), 20)      # PSN 1 missing
    assert (qp.snd_una, qp.snd_nxt, st.nak_rewinds, qp.naks) == (1, 1, 1, 1)
    assert qp.rto_deadline_ns == 0                          # what it asked for is void
    f, _ = rq.take(qp)
    assert (f.psn, st.tx_retransmits, qp.retransmits) == (1, 1, 1)
    rq.on_ack(qp, ack(qp, 3), 30)
    assert [(c.wr_id, c.status, c.complete_ns) for c in cq] == [(7, WcStatus.SUCCESS, 30)]
    assert qp.rto_deadline_ns == 0


def test_only_qps_with_work_are_walked_and_an_idle_one_comes_back_at_its_post():
    """``Requester.busy``: a QP joins at its post, stays while anything is
    unacknowledged or its timer is armed, and leaves at the next ``timers``
    once idle; the transmitter's round-robin goes on over what is left."""
    tx, rq, sock, *_ = transmitter()
    a, b, c = make_qp(1, 2), make_qp(3, 4), make_qp(5, 6)
    rq.qps.extend((a, b, c))
    assert rq.busy == [] and rq.idle()
    for q in (a, b):
        rq.post(q, 1, memoryview(bytes(1024)), False, 0, 0, True, now=0)
    assert rq.busy == [a, b]
    run(tx, sock, 1_000_000)
    assert [roce.parse_roce(f).dst_qp for _, f in sock.sent] == [2, 4]
    rq.timers(1_000_000)
    assert rq.busy == [a, b]                        # sent, the ACKs owed: timers armed
    rq.on_ack(a, ack(a, 0), 1_000_001)
    rq.timers(1_000_002)
    assert rq.busy == [b] and not a.busy and not rq.idle()
    rq.on_ack(b, ack(b, 0), 1_000_003)
    rq.timers(1_000_004)
    assert rq.busy == [] and rq.idle() and rq.next_timer_ns(7e9) == 7e9
    for q in (c, a):                               # back at their posts, in post order
        rq.post(q, 2, memoryview(bytes(2048)), False, 0, 0, True, now=2_000_000)
    assert rq.busy == [c, a]
    run(tx, sock, 3_000_000, t=2_000_000)
    assert [roce.parse_roce(f).dst_qp for _, f in sock.sent[2:]] == [6, 2, 6, 2]


def test_requester_ack_timeout_runs_from_the_ack_request():
    """A sender slower than its link (here: one packet per 100 us, a busy
    CPU) sends 16 packets between two AckReqs: the timeout (1 ms) runs from
    the packet that asks for the ACK, not from the first unacknowledged one."""
    cq, st = [], NicStats()
    rq = requester(cq, st)
    qp = make_qp()
    rq.qps.append(qp)
    rq.post(qp, 7, memoryview(bytes(32 * 1024)), True, 0, 9, True, now=0)
    for k in range(16):
        f, _ = rq.take(qp)
        rq.sent(qp, k * 100_000, f.psn + 1, f.ack_req)
        rq.timers(k * 100_000)
    assert f.ack_req and qp.rto_deadline_ns == 15 * 100_000 + 1_000_000
    assert st.timeouts == 0
    rq.on_ack(qp, ack(qp, 15), 1_600_000)                   # all asked for is answered
    assert qp.snd_una == 16 and qp.rto_deadline_ns == 0
    f, _ = rq.take(qp)
    rq.sent(qp, 1_700_000, f.psn + 1, f.ack_req)
    rq.timers(10_000_000)
    assert st.timeouts == 0 and qp.rto_deadline_ns == 0


def test_requester_timeouts_back_off_wait_for_pfc_and_fail():
    cq, st = [], NicStats()
    pfc = PfcReceiver(RATE, (3, 6))
    rq = requester(cq, st, hold=pfc.hold(3))
    qp = make_qp()
    rq.qps.append(qp)
    rq.post(qp, 1, memoryview(b"x"), False, 0, 0, True, now=0)
    f, _ = rq.take(qp)
    rq.sent(qp, 0, 1, f.ack_req)                            # deadline 1 ms
    q_ns = 512 * 1e9 / RATE
    pfc.on_frame(pfc_frame({3: 800}), 200_000)              # paused 200 us .. 4.296 ms
    t = 0
    while not st.timeouts:                                  # the timer skips the pause
        t = rq.next_timer_ns(float("inf"))
        rq.timers(t)
    assert t == 1_000_000 + 800 * q_ns and qp.timeouts == 1 and qp.snd_nxt == 0
    assert qp.rto_deadline_ns == 0                          # until it is resent:
    rq.take(qp)
    rq.sent(qp, t + 10, 1, True)
    assert qp.rto_deadline_ns == t + 10 + 2_000_000         # doubled
    for backoff in (2_000_000, 4_000_000):
        t = qp.rto_deadline_ns
        rq.timers(t)
        if qp.state == QpState.RTS:
            rq.take(qp)
            rq.sent(qp, t, 1, True)
            assert qp.rto_deadline_ns == t + 2 * backoff
    assert [c.status for c in cq] == [WcStatus.RETRY_EXC_ERR] and qp.timeouts == 3


def test_requester_fails_after_rnr_retry_rnr_naks_in_a_row_and_flushes_the_rest():
    cq, st = [], NicStats()
    rq = requester(cq, st, rnr_retry=1)
    qp = make_qp()
    rq.qps.append(qp)
    for wr_id in (1, 2, 3):
        rq.post(qp, wr_id, memoryview(b"x"), False, 0, 0, True, now=0)
    rq.take(qp)
    rq.sent(qp, 0, 1, True)
    rq.on_ack(qp, ack(qp, 0, roce.AETH_RNR_NAK | 1), 100)      # the one retry rnr_retry allows
    assert qp.state == QpState.RTS and cq == [] and qp.snd_nxt == 0
    rq.take(qp)
    rq.sent(qp, 200, 1, True)
    rq.on_ack(qp, ack(qp, 0, roce.AETH_RNR_NAK | 1), 300)
    assert qp.state == QpState.ERROR and not qp.has_tx_data() and qp.rto_deadline_ns == 0
    assert [(c.wr_id, c.status, c.complete_ns) for c in cq] == [
        (1, WcStatus.RNR_RETRY_EXC_ERR, 300), (2, WcStatus.WR_FLUSH_ERR, 300),
        (3, WcStatus.WR_FLUSH_ERR, 300)]
    assert (st.qp_errors, st.retry_exc_errors, st.rnr_retry_exc_errors, st.wr_flush_errors) \
        == (1, 0, 1, 2)
    rq.fail(qp, WcStatus.RETRY_EXC_ERR, 400)                     # already failed: nothing more
    assert len(cq) == 3 and st.qp_errors == 1


def test_requester_rnr_timer_is_fabric_time():
    cq, st = [], NicStats()
    rq = requester(cq, st, dilation=1000)
    qp = make_qp()
    rq.qps.append(qp)
    rq.post(qp, 1, memoryview(bytes(2048)), False, 0, 0, True, now=0)
    rq.take(qp)
    rq.sent(qp, 0, 1, False)
    rq.on_ack(qp, ack(qp, 0, roce.AETH_RNR_NAK | 14), 50)   # code 14: 1.28 ms (fabric)
    assert qp.paused_until_ns == 50 + 1_280_000 * 1000 and qp.naks == 1 and qp.snd_nxt == 0


# -- responder ------------------------------------------------------------------------------
def test_responder_places_in_order_naks_a_gap_once_and_coalesces_acks():
    cq, st = [], NicStats()
    mr_buf = bytearray(4096)
    from emulator.nic.qp import MemoryRegion
    mrs = {9: MemoryRegion(0, 9, mr_buf)}
    rs = Responder(mrs=mrs, mtu_bytes=1024, min_rnr_timer=14, report_remote_writes=True,
                   cq=cq, stats=st, unix_ns=ManualClock().unix_ns)
    qp = make_qp(0x22, 0x11)
    tpl = roce.FrameTemplate(MAC_A, MAC_B, IP_A, IP_B, 1, 0x22)

    def pkt(op, psn, data, **kw):
        return roce.parse_roce(bytes(tpl.build(op, psn, data, **kw)))
    rs.on_request(qp, pkt(roce.RC_WRITE_FIRST, 0, b"a" * 1024, reth=(0, 9, 3072)), 1)
    rs.on_request(qp, pkt(roce.RC_WRITE_LAST, 2, b"c" * 1024, ack_req=True), 2)   # gap
    rs.on_request(qp, pkt(roce.RC_WRITE_LAST, 3, b"c" * 1024, ack_req=True), 3)
    assert list(rs.out) == [AckFrame(qp, 1, roce.NAK_PSN_SEQ_ERR, 0)] and st.tx_naks == 1
    rs.out.clear()
    rs.on_request(qp, pkt(roce.RC_WRITE_MIDDLE, 1, b"b" * 1024), 4)
    rs.on_request(qp, pkt(roce.RC_WRITE_LAST, 2, b"c" * 1024, ack_req=True), 5)
    rs.on_request(qp, pkt(roce.RC_WRITE_LAST, 2, b"c" * 1024, ack_req=True), 6)   # duplicate
    assert not rs.out
    rs.flush_acks()
    assert list(rs.out) == [AckFrame(qp, 2, roce.AETH_ACK_SYNDROME, 1)]
    assert mr_buf[:3072] == b"a" * 1024 + b"b" * 1024 + b"c" * 1024
    assert [(c.byte_len, c.post_ns, c.complete_ns) for c in cq] == [(3072, 1, 5)]


# -- transmitter ---------------------------------------------------------------------------
def transmitter(delay_ns=0, **kw):
    st = NicStats()
    rq = requester([], st)
    sock = SockLog()
    pfc = PfcReceiver(RATE, (3, 6))
    rs = Responder(mrs={}, mtu_bytes=1024, min_rnr_timer=14, report_remote_writes=True,
                   cq=[], stats=st, unix_ns=ManualClock().unix_ns)
    np_ = NotificationPoint(0)
    tx = Transmitter(sock=sock, rate_bps=RATE, mtu_bytes=1024, ack_every_n=16,
                     max_lag_ns=500_000, tx_delay_ns=delay_ns, priority=3, cnp_priority=6,
                     max_outstanding_pkts=1 << 20, pause_until_ns=pfc.until_ns, requester=rq,
                     read_responder=ReadResponder(rs, {}, 1024, st), cnp_queue=np_.out,
                     ack_queue=rs.out, stats=st, cnp_template=lambda qp: roce.FrameTemplate(
                         MAC_A, qp.tpl_dst_mac, IP_A, qp.remote_ip, qp.udp_sport, qp.remote_qpn,
                         dscp=48, ecn=roce.ECN_NOT_ECT, max_payload_bytes=16))
    return tx, rq, sock, pfc, rs, np_


def run(tx, sock, until_ns, t=0):
    """Wake the transmitter exactly when it asks until ``until_ns``."""
    while t <= until_ns:
        sock.now = t
        tx.service(t)
        w = tx.next_wake_ns(t, until_ns + 1)
        t = max(int(w) + (w > int(w)), t + 1)


def test_frames_leave_when_serialized_plus_delay_in_strict_priority():
    tx, rq, sock, pfc, rs, np_ = transmitter(delay_ns=10_000)
    qp = make_qp()
    rq.qps.append(qp)
    rq.post(qp, 1, memoryview(bytes(2048)), True, 0, 9, True, now=0)
    rs.out.append(AckFrame(qp, 5, roce.AETH_ACK_SYNDROME, 1))
    np_.out.append(CnpFrame(qp))
    run(tx, sock, 2_000_000)
    ops = [roce.parse_roce(f).opcode for _, f in sock.sent]
    assert ops == [roce.CNP_OPCODE, roce.RC_ACK, roce.RC_WRITE_FIRST, roce.RC_WRITE_LAST]
    assert tx.stats.tx_lag_frames == 2          # the lag run fidelity reads: data frames only
    ft = [(len(f) + WIRE_OVERHEAD_BYTES) * 8e9 / RATE for _, f in sock.sent]
    end = 0.0
    for (t, _), f in zip(sock.sent, ft):
        end += f
        assert t == pytest.approx(end + 10_000, abs=1)
    # the ACK timeout runs from the packet that asks for the ACK (the last)
    assert qp.rto_deadline_ns == pytest.approx(sock.sent[3][0] + 1_000_000, abs=1)


def test_a_paused_class_starts_nothing_but_the_wire_still_delivers():
    tx, rq, sock, pfc, rs, np_ = transmitter()
    qp = make_qp()
    rq.qps.append(qp)
    rq.post(qp, 1, memoryview(bytes(4096)), True, 0, 9, True, now=0)
    sock.now = 0
    tx.service(0)                                        # frame 0 serialized at 0
    pfc.on_frame(pfc_frame({3: 1000}), 100)              # pause while it is on the wire
    np_.out.append(CnpFrame(qp))
    run(tx, sock, 10_000_000, t=100)
    pause_end = 100 + 1000 * 512 * 1e9 / RATE
    starts = [t - (len(f) + WIRE_OVERHEAD_BYTES) * 8e9 / RATE for t, f in sock.sent]
    ops = [roce.parse_roce(f).opcode for _, f in sock.sent]
    assert ops[:2] == [roce.RC_WRITE_FIRST, roce.CNP_OPCODE]   # CNP not paused
    assert all(s >= pause_end - 1 for s, op in zip(starts, ops) if op != roce.CNP_OPCODE
               and s > 0)
    assert len([op for op in ops if op != roce.CNP_OPCODE]) == 4


def test_per_qp_rate_and_round_robin_schedule():
    tx, rq, sock, *_ = transmitter()
    a, b = make_qp(1, 2), make_qp(3, 4, rate_bps=RATE // 4)
    rq.qps.extend((a, b))
    for q in (a, b):
        rq.post(q, 1, memoryview(bytes(8 * 1024)), False, 0, 0, True, now=0)
    run(tx, sock, 10_000_000)
    order = [roce.parse_roce(f).dst_qp for _, f in sock.sent]
    assert order[:2] == [2, 4]                           # round-robin start
    tb = [t for (t, f) in sock.sent if roce.parse_roce(f).dst_qp == 4]
    gap = (len(sock.sent[1][1]) + WIRE_OVERHEAD_BYTES) * 8e9 / (RATE // 4)
    assert all(t1 - t0 == pytest.approx(gap, abs=2) for t0, t1 in zip(tb, tb[1:]))


# -- CPU gate and tenant filter ----------------------------------------------------------------
def test_cpu_gate_holds_frames_until_the_work_is_done():
    st = NicStats()
    gate = CpuGate(CpuServers(1, clock=ManualClock()), 2, st)
    qp = make_qp()
    qp.cpu_tx_ns = qp.cpu_rx_ns = 1000.0
    assert gate.tx(qp, 0.0, 0, 0, 100) == -1.0 and gate.tx_ready_ns == 1000
    assert gate.tx(qp, 0.0, 1000, 0, 100) == 1000
    pkt = roce.parse_roce(bytes(qp.tpl.build(roce.RC_SEND_ONLY, 0, b"x")))
    for t in (0, 0, 0):
        gate.rx_admit(b"f%d" % t, pkt, qp, t)
    assert st.cpu_rx_drops == 1                          # backlog of 2
    assert gate.next_rx_ns() == 2000
    assert list(gate.rx_due(2999)) == [b"f0"] and gate.next_rx_ns() == 3000


def test_tenant_filter_drops_other_partitions_and_charges_the_filter():
    st = NicStats()
    cpu = CpuServers(1, clock=ManualClock())
    tf = TenantFilter(0x8001, cpu, 500.0, st)
    ours = bytes(roce.FrameTemplate(MAC_B, MAC_A, IP_B, IP_A, 1, 1, pkey=0x8001)
                 .build(roce.RC_SEND_ONLY, 0, b"x"))
    theirs = bytes(roce.FrameTemplate(MAC_B, MAC_A, IP_B, IP_A, 1, 1, pkey=0x8002)
                   .build(roce.RC_SEND_ONLY, 0, b"x"))
    assert not tf.drops(ours, 0) and tf.drops(theirs, 0)
    assert st.tenant_drops == 1 and cpu.busy_ns == 500


# -- run fidelity: time lost to a late process -------------------------------------------------
def test_transmitter_gives_up_lateness_beyond_its_catch_up_window():
    tx, rq, sock, *_ = transmitter()
    qp = make_qp()
    rq.qps.append(qp)
    rq.post(qp, 1, memoryview(bytes(4 * 1024)), False, 0, 0, True, now=0)
    frame_ns = (1024 + 58 + WIRE_OVERHEAD_BYTES) * 8e9 / RATE   # an MTU WRITE frame
    sock.now = 0
    tx.service(0)                    # frame 0 at slot 0; it asks to run again at frame_ns
    assert tx.stats.tx_given_up_ns == 0
    late = 5_000_000                 # the process runs again 5 ms late
    tx.service(late)
    # it catches up 500 us (max_lag_ns) and gives up the rest of the gap
    given_up = late - 500_000 - frame_ns
    assert tx.stats.tx_given_up_ns == pytest.approx(given_up, abs=2)
    run(tx, sock, 20_000_000, t=late + 1)      # then on time: nothing more given up
    assert tx.stats.tx_given_up_ns == pytest.approx(given_up, abs=2)
    # an idle NIC gives up nothing however long it sleeps
    rq.post(qp, 2, memoryview(bytes(1024)), False, 0, 0, True, now=100_000_000)
    run(tx, sock, 120_000_000, t=100_000_000)
    assert tx.stats.tx_given_up_ns == pytest.approx(given_up, abs=2)


@pytest.mark.parametrize("post_ns", [3_000, 100_000, 1_000_000])
def test_a_frame_starts_no_earlier_than_its_post_however_late_the_wire_was_served(post_ns):
    """An ACK's wire goes idle at its end; the NIC is not served then (its
    loop woke for something else later), and a WRITE posted after the end
    must start at its post, not at the ACK's end: a collective's credit
    messages once left up to 4 frame times before they were posted and read
    as lag. A WRITE posted while the ACK was on the wire did wait for it."""
    tx, rq, sock, pfc, rs, np_ = transmitter(delay_ns=2_000_000)
    qp = make_qp()
    rq.qps.append(qp)
    rs.out.append(AckFrame(qp, 5, roce.AETH_ACK_SYNDROME, 1))
    sock.now = 0
    tx.service(0)                                       # the ACK, alone, at 0
    ack_end = tx.slot_free_ns
    assert 0 < ack_end < 10_000
    rq.post(qp, 1, memoryview(bytes(1024)), False, 0, 0, True, now=post_ns)
    served = post_ns + 10_000                           # served 10 us after the post
    sock.now = served
    tx.service(served)
    start = max(post_ns, ack_end)
    frame_ns = (1024 + 58 + WIRE_OVERHEAD_BYTES) * 8e9 / RATE
    assert tx.slot_free_ns == pytest.approx(start + frame_ns, abs=1)
    assert tx.stats.tx_lag_frames == 1
    assert tx.stats.tx_lag_sum_ns == pytest.approx(served - start, abs=1)
    assert tx.stats.tx_given_up_ns == 0


@pytest.mark.parametrize("why", ["link delay", "paced QP", "late process"])
def test_an_idle_wire_gives_up_nothing_however_long_until_its_next_frame(why):
    """A wire with nothing to send is idle, not behind: the rail fabrics' 1 us
    links (11 frame times, beyond the 4-frame catch-up window) once made every
    message's end read as time given up when the NIC next woke, at the end of
    the propagation, and collectives 'lost' 3-6 % of their time to it."""
    tx, rq, sock, *_ = transmitter(delay_ns=2_000_000 if why == "link delay" else 0)
    frame_ns = (1024 + 58 + WIRE_OVERHEAD_BYTES) * 8e9 / RATE
    qp = make_qp(rate_bps=RATE // 40 if why == "paced QP" else None)   # 40 frame times apart
    rq.qps.append(qp)
    frames = 3 if why == "paced QP" else 1
    rq.post(qp, 1, memoryview(bytes(frames * 1024)), False, 0, 0, True, now=0)
    if why == "late process":
        sock.now = 0
        tx.service(0)                    # the only frame, then the process wakes 5 ms late
        sock.now = 5_000_000
        tx.service(5_000_000)
    else:
        run(tx, sock, 10_000_000)        # woken when it asks: at the frame's end, not the link's
    assert len(sock.sent) == frames
    assert tx.stats.tx_given_up_ns == 0
    # The window still counts what a frame waiting for the wire lost: 2 frames, 5 ms late.
    rq.post(qp, 2, memoryview(bytes(2 * 1024)), False, 0, 0, True, now=20_000_000)
    sock.now = 20_000_000
    tx.service(20_000_000)
    sock.now = 25_000_000
    tx.service(25_000_000)
    slot = 20_000_000 + (frame_ns if why != "paced QP" else 40 * frame_ns)
    assert tx.stats.tx_given_up_ns == pytest.approx(25_000_000 - 500_000 - slot, abs=2)


def test_receive_lateness_is_the_kernel_stamp_against_now_and_stalls_count_beyond_the_window():
    import socket
    import time

    from emulator.nic.nic import RoceNic
    from emulator.clock import MonotonicClock

    class SevenMsLate(MonotonicClock):
        """Reads frames 7 ms after the kernel stamped them."""
        __slots__ = ()

        def unix_ns(self):
            return time.time_ns() + 7_000_000

    rx, peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), \
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    peer.bind(("127.0.0.1", 0))
    rx.connect(peer.getsockname())
    peer.connect(rx.getsockname())
    nic = roce_nic(None, MAC_A, IP_A, MAC_B, sock=rx, max_lag_ns=2_000_000, clock=SevenMsLate(),
                  absorb_udp=False)
    try:
        peer.send(bytes(64))
        nic.run_until(lambda: nic.stats.rx_late_samples > 0, 5.0)
        st = nic.stats
        assert st.rx_late_samples == 1 and st.rx_ignored == 1
        assert 7_000_000 <= st.rx_late_sum_ns == st.rx_late_max_ns < 7_000_000 + 2_000_000_000
        assert st.rx_stall_ns == st.rx_late_sum_ns - 2_000_000       # beyond the window
        assert nic.lost_ns() == st.rx_stall_ns
        d = st.as_dict()
        assert sum(n for _, _, n in d["rx_late_hist"]) == 1
        assert d["rx_late_hist"][0][0] <= st.rx_late_sum_ns <= d["rx_late_hist"][0][1]
    finally:
        nic.close()
        peer.close()
