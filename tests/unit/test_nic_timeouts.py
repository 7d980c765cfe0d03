"""ACK timeouts in fabric time, on a ``ManualClock`` (``tests.nic_sim``):
the default timeout is the same fabric time at any dilation; queueing and
PFC pauses -- local or anywhere on the path -- do not look like loss; a real
loss is recovered (NAK, timeout) and counted per QP, per flow of a host
agent's result and in summary.json."""
from __future__ import annotations

import errno
import socket
import struct

import pytest

from tests.nics import roce_nic
from emulator.nic import roce
from emulator.nic.nic import WcStatus
from emulator.schema.nic import DEFAULT_RTO_FABRIC_NS
from emulator.nic.roce import parse_roce
from tests.nic_sim import DelayLine

from .test_nic_core import (  # noqa: F401 (pairs: a fixture)
    IP_A, IP_B, MAC_A, MAC_B, QPN_A, QPN_B, ShimSock, pairs, pattern,
)

FABRIC_RATE = 100_000_000_000        # a 100 Gbit/s host link
D = 1000                             # dilation of most tests: the clock runs at 100 Mbit/s
RTO = DEFAULT_RTO_FABRIC_NS          # fabric ns
US = 1000


def pair_at(pairs, d=D, **kw):
    """Two NICs on a 100 Gbit/s fabric link at dilation ``d``, with the
    default ACK timeout (``rto_ns`` not given)."""
    return pairs(rate_bps=FABRIC_RATE, rto_ns=None, dilation=d, **kw)


def data_psn(frame):
    pk = parse_roce(frame)
    return None if pk is None or pk.opcode == roce.RC_ACK else pk.psn


def write(p, npkts, wr_id=1):
    """A WRITE of ``npkts`` full packets from A to B; returns (src, dst) MRs."""
    size = npkts * 1024
    src = p.a.register_mr(size, buf=pattern(size))
    dst = p.b.register_mr(size, addr=0x10000, rkey=0x1234)
    p.a.post_write(p.qa, wr_id, (src, 0, size), 0x10000, 0x1234)
    return src, dst


def done(p, wr_id=1):
    return p.wait(lambda ca, cb: any(c.wr_id == wr_id for c in ca), timeout_s=100.0)


def pfc_frame(quanta: int, priority: int = 3) -> bytes:
    t = [0] * 8
    t[priority] = quanta
    return (bytes.fromhex("0180c2000001") + bytes.fromhex(MAC_B.replace(":", ""))
            + struct.pack("!HHH8H", 0x8808, 0x0101, 1 << priority, *t) + bytes(26))


def recovery(qp) -> tuple[int, int, int]:
    return qp.retransmits, qp.timeouts, qp.naks


# -- the default is fabric time ------------------------------------------------------------------
class LoseOnce:
    """A wire hook that drops data PSN ``psn`` the first time it passes and
    records ``(clock ns, psn)`` of every data frame put on the wire (``sent``);
    set ``pair`` before traffic flows (its clock stamps them)."""

    def __init__(self, psn: int):
        self.psn, self.sent, self.lost, self.pair = psn, [], False, None

    def __call__(self, f):
        psn = data_psn(f)
        if psn is not None:
            self.sent.append((self.pair.clock.now_ns(), psn))
            if psn == self.psn and not self.lost:
                self.lost = True
                return None
        return f


@pytest.mark.parametrize("d", [1, 1000, 10000])
def test_default_ack_timeout_is_the_same_fabric_time_at_any_dilation(pairs, d):
    """A lost tail (no later packet to cause a NAK) is resent one ACK
    timeout after it left -- the tail asks for the ACK, the timer runs from
    it: 320 us of fabric time whatever D."""
    hook = LoseOnce(7)
    p = hook.pair = pair_at(pairs, d, hook_ab=hook)
    sent = hook.sent
    assert p.a.rto_ns == RTO * d and p.a.dilation == d
    src, dst = write(p, 8)
    assert done(p)
    assert p.cq[p.a][0].status == WcStatus.SUCCESS and dst.buf == src.buf
    tail, first_resent = sent[7][0], sent[8][0]
    assert RTO <= (first_resent - tail) / d <= RTO + 100    # + the resend's frame time
    # go-back-N from the oldest unacknowledged PSN (PSNs 0-6 asked for no ACK)
    retx, timeouts, naks = recovery(p.qa)
    assert (timeouts, naks) == (1, 0) and retx == p.qa.tx_data_packets - 8 >= 1
    assert p.a.stats.timeouts == 1 and p.a.stats.tx_retransmits == retx


# -- queueing and pauses are not loss --------------------------------------------------------------
@pytest.mark.parametrize("queue_us, timeouts", [(300, 0), (400, 1)])
def test_queueing_shorter_than_the_ack_timeout_is_not_loss(pairs, queue_us, timeouts):
    """Every data frame waits ``queue_us`` (fabric) in a queue on the path
    -- a queue that takes that long to drain, or one paused for that long
    by PFC anywhere downstream: below the 320 us timeout nothing is resent
    (above it, the timeout fires: the test can tell)."""
    line = []
    p = pair_at(pairs, hook_ab=lambda f: line[0].hook(f))
    line.append(DelayLine(p.clock, p.sock_a.sock,
                          lambda f: queue_us * US * D if data_psn(f) is not None else None))
    p.loop.nics.append(line[0])
    src, dst = write(p, 256)
    t0 = p.clock.now_ns()
    assert done(p)
    assert p.cq[p.a][0].status == WcStatus.SUCCESS and dst.buf == src.buf
    assert (p.clock.now_ns() - t0) / D > queue_us * US       # the queue was there
    if timeouts == 0:
        assert recovery(p.qa) == (0, 0, 0) and p.a.stats.tx_retransmits == 0
    else:
        assert p.qa.timeouts >= 1 and p.qa.retransmits >= 1  # spurious: the test is sharp


@pytest.mark.parametrize("pause_us, drain_us", [
    (3 * RTO // US, 100),        # paused for three timeouts
    (RTO // US - 40, 150),       # a pause ending just before the timeout, its queue
])                               # draining past it
def test_a_local_pfc_pause_is_not_loss(pairs, pause_us, drain_us):
    """Our data class is paused (the switch's ingress queue from us is over
    XOFF: the frames we sent before wait there) for ``pause_us``, refreshed
    with 0xFFFF quanta and ended by an XON, as the embedded traffic manager
    does; the frames held in that queue arrive ``drain_us`` after the XON.
    The time paused does not count against the ACK timeout: nothing is
    resent, even when the pause ends just before the timeout would have
    fired and the ACKs come after it."""
    line = []
    p = pair_at(pairs, hook_ab=lambda f: line[0].hook(f))
    line.append(DelayLine(p.clock, p.sock_a.sock,
                          lambda f: 1 * US * D if data_psn(f) is not None else None))
    p.loop.nics.append(line[0])
    src, dst = write(p, 64)
    start = p.clock.now_ns()
    assert p.loop.wait(lambda: p.a.stats.tx_data_packets >= 16)
    t_pause = p.clock.now_ns()
    line[0].hold_until_ns = 1 << 62                  # the switch holds what we sent
    end = t_pause + pause_us * US * D
    while p.clock.now_ns() < end:                    # pause, refreshed every 100 us
        p.sock_b.sock.send(pfc_frame(0xFFFF))
        p.loop.run(min(end, p.clock.now_ns() + 100 * US * D))
    p.sock_b.sock.send(pfc_frame(0))                 # XON
    line[0].hold_until_ns = p.clock.now_ns() + drain_us * US * D
    assert done(p)
    assert p.cq[p.a][0].status == WcStatus.SUCCESS and dst.buf == src.buf
    assert recovery(p.qa) == (0, 0, 0) and p.a.stats.tx_retransmits == 0
    assert p.a.stats.pfc_rx > 0
    # the ACKs came later than a timeout after the first packet left
    assert (line[0].hold_until_ns - start) / D > RTO


def test_a_pause_does_not_hide_a_loss_for_ever(pairs):
    """A frame lost before a pause: the timeout fires one timeout of
    unpaused time after it was armed -- later by the time paused."""
    hook = LoseOnce(3)
    p = hook.pair = pair_at(pairs, hook_ab=hook)
    sent = hook.sent
    write(p, 4)
    assert p.loop.wait(lambda: len(sent) == 4)
    first = sent[3][0]                               # the tail asks for the ACK
    end = p.clock.now_ns() + 500 * US * D
    while p.clock.now_ns() < end:                    # paused 500 us, refreshed every 100 us
        p.sock_b.sock.send(pfc_frame(0xFFFF))
        p.loop.run(min(end, p.clock.now_ns() + 100 * US * D))
    p.sock_b.sock.send(pfc_frame(0))
    assert done(p)
    resent = [t for t, psn in sent if psn == 3][1]
    waited = (resent - first) / D
    assert RTO + 500 * US <= waited <= RTO + 500 * US + RTO / 8 + 100
    assert p.qa.timeouts == 1 and p.qa.naks == 0


# -- real losses: recovered and counted ---------------------------------------------------------
def test_a_lost_packet_is_recovered_by_nak_and_counted(pairs):
    lost = []

    def lose_psn_10_once(f):
        if data_psn(f) == 10 and not lost:
            lost.append(10)
            return None
        return f

    p = pair_at(pairs, hook_ab=lose_psn_10_once)
    src, dst = write(p, 64)
    assert done(p)
    assert p.cq[p.a][0].status == WcStatus.SUCCESS and dst.buf == src.buf
    retx, timeouts, naks = recovery(p.qa)
    assert (timeouts, naks) == (0, 1) and retx >= 1       # go-back-N from PSN 10
    assert retx == p.a.stats.tx_retransmits and p.a.stats.rx_naks == 1
    assert p.qa.tx_data_packets == 64 + retx


def test_host_agent_result_and_summary_count_recovery(tmp_path):
    """The host agent's result gives each flow its QP's retransmitted
    packets, timeouts and NAKs, and its NIC timers in fabric time;
    summary.json's flows and table carry the counters."""
    from rich.console import Console

    from emulator.agents.host import HostAgent
    from emulator.agents.run_logs import RunLogs
    from emulator.nic.nic import RoceNic
    from emulator.experiment.summary import render_summary
    from emulator.schema.agent import HostAgentConfig
    from tests.nic_sim import NicLoop, manual_clock

    lost = []

    def lose_psn_5_and_the_tail(f):
        psn = data_psn(f)
        if psn in (5, 31) and psn not in lost:
            lost.append(psn)
            return None
        return f

    clock = manual_clock()
    sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    ends = {"a": (MAC_A, IP_A, MAC_B, IP_B, QPN_A, QPN_B, ShimSock(sa, lose_psn_5_and_the_tail)),
            "b": (MAC_B, IP_B, MAC_A, IP_A, QPN_B, QPN_A, ShimSock(sb))}
    size = 32 * 1024
    agents = {}
    for h, (mac, ip, gw, rip, qpn, rqpn, sock) in ends.items():
        flow = [{"flow_id": 7, "qpn": qpn, "size_bytes": size}]
        cfg = HostAgentConfig(
            host=h, ifname="none", mac=mac, ip=ip, gateway_mac=gw, rate_bps=FABRIC_RATE,
            dilation=D, qps=[{"qpn": qpn, "remote_ip": rip, "remote_qpn": rqpn}],
            send=flow if h == "a" else [], expect=flow if h == "b" else [],
            result_path=str(tmp_path / f"{h}.result.json"),
            progress_path=str(tmp_path / f"{h}.progress.json"))
        logs = RunLogs(str(tmp_path), h)
        nic = RoceNic(cfg, sock=sock, logs=logs, clock=clock)
        agents[h] = HostAgent(cfg, nic=nic, logs=logs)
    a, b = agents["a"], agents["b"]
    # what HostAgent.run does at the flow's start
    s = a.cfg.send[0]
    mr = a.send_mr[0]
    qp = a.qps[s.qpn]
    a.nic.post_write(qp, 0, (mr, 0, mr.size_bytes), s.remote_addr or 0, s.rkey)
    a.active_sends[0] = (qp, qp.sq[-1])
    a.send_state[0]["post_unix_ns"] = clock.unix_ns()
    loop = NicLoop((a.nic, b.nic), clock)
    loop.after_pass.append(lambda: [ag._handle(c) for ag in (a, b) for c in ag.nic.poll_cq()])
    assert loop.wait(lambda: a.all_done() and b.all_done(), 100.0)
    res = a.result()
    assert res["config"]["dilation"] == D
    assert res["config"]["fabric"]["rto_ns"] == RTO and res["config"]["rto_ns"] == RTO * D
    assert res["config"]["fabric"]["min_rnr_timer_ns"] == 1_280_000     # code 14
    flow = res["send"][0]
    assert flow["complete"] and (flow["timeouts"], flow["naks"]) == (1, 1)
    assert flow["retransmitted_packets"] >= 2
    assert flow["tx_packets"] == 32 + flow["retransmitted_packets"]
    assert b.result()["expect"][0]["intact"]
    b.write_progress()
    import json
    prog = json.loads((tmp_path / "b.progress.json").read_text())
    assert prog == {"host": "b", "delivered_bytes": size, "done": True}
    for ag in agents.values():
        ag.nic.close()
        ag.logs.close()

    summary = {"experiment": "t", "target": "embedded", "wall_s": 1.0, "fabric_ns": 1,
               "dilation": D, "fell_behind": False, "ports": [],
               "flows": [{"bytes": size, "delivered_bytes": size, "complete": True,
                          "fct_ns": 1, "retransmitted_packets": flow["retransmitted_packets"],
                          "timeouts": 1, "naks": 1}]}
    con = Console(width=200, record=True)
    con.print(render_summary(summary))
    assert f"{flow['retransmitted_packets']} / 1 / 1" in con.export_text()


# -- a link that is down ---------------------------------------------------------------------------
class DarkLink:
    """A wire hook that refuses data frames as a socket on a veth set down
    does (``ENETDOWN``: BMv2's link faults, net/bmv2_faults.py) while
    ``dark``; set ``pair`` first: its clock stamps the refusals."""

    def __init__(self):
        self.dark, self.refused, self.pair = False, [], None

    def __call__(self, f):
        if self.dark and data_psn(f) is not None:
            self.refused.append(self.pair.clock.now_ns())
            raise OSError(errno.ENETDOWN, "Network is down")
        return f


def test_frames_refused_by_a_link_that_is_down_are_counted_lost_and_resent_once_it_is_up(pairs):
    """A veth set down refuses each frame with ENETDOWN: the NIC counts it
    (``tx_link_down``), goes on as an RNIC on a dead port does, and its ACK
    timeout resends the WRITE once the link is up again."""
    hook = DarkLink()
    p = hook.pair = pair_at(pairs, hook_ab=hook)
    hook.dark = True
    src, dst = write(p, 16)
    assert p.wait(lambda ca, cb: len(hook.refused) >= 16, timeout_s=100.0)
    hook.dark = False
    assert done(p)
    assert p.cq[p.a][0].status == WcStatus.SUCCESS and dst.buf == src.buf
    assert p.a.stats.tx_link_down == len(hook.refused) >= 16
    assert p.qa.timeouts >= 1 and p.a.stats.tx_retransmits >= 16


def test_a_link_down_for_good_ends_in_retry_exceeded(pairs):
    """Down for good: every resend is refused, and after ``retry_cnt``
    timeouts the WRITE completes with IB_WC_RETRY_EXC_ERR."""
    hook = DarkLink()
    p = hook.pair = pair_at(pairs, hook_ab=hook, retry_cnt=2)
    hook.dark = True
    write(p, 4)
    assert done(p)
    assert p.cq[p.a][0].status == WcStatus.RETRY_EXC_ERR
    assert p.a.stats.tx_link_down == len(hook.refused) == 4 * 3     # the first send and 2 retries
