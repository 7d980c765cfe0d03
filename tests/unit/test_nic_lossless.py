"""RoceNic lossless-class behaviour: CNP generation (notification point),
DCQCN on received CNPs (reaction point), PFC honouring, per-QP pacing.

Same AF_UNIX socketpair style as test_nic_core: either two NICs (``Pair``)
or one NIC whose peer is the test itself (``Solo``)."""
from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from scapy.compat import raw
from scapy.contrib.roce import BTH, CNPPadding
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from tests.nics import roce_nic
from emulator import wire
from emulator.nic import roce
from emulator.nic.nic import RoceNic, WcStatus
from emulator.nic.roce import parse_roce, verify_icrc
from tests.nic_sim import NicLoop, manual_clock

from .test_nic_core import (  # noqa: F401 (pairs: a fixture)
    IP_A, IP_B, MAC_A, MAC_B, QPN_A, QPN_B, ShimSock, pairs, pattern,
)

QPN_A2, QPN_B2 = 0x33, 0x44
MS = 1_000_000
# DCQCN's rates as the paper's fractions of a 40 Gbit/s line, for a 100 Mbit/s one
SLOW_RATES_100M = {"rate_ai_gbps": 0.0001, "rate_hai_gbps": 0.0005, "min_rate_gbps": 0.00025}


class MemLogs:
    """``logs`` for the NIC: rows kept in lists."""

    def __init__(self):
        self.qp_rows, self.cnp_rows, self.pfc_rows = [], [], []

    def qp(self, *row):
        self.qp_rows.append(row)

    def cnp(self, *row):
        self.cnp_rows.append(row)

    def pfc(self, *row):
        self.pfc_rows.append(row)


def pfc_frame(timers: dict[int, int]) -> bytes:
    """802.1Qbb PFC frame enabling the classes in ``timers`` (prio -> quanta)."""
    enable = sum(1 << p for p in timers)
    t = [timers.get(p, 0) for p in range(8)]
    return (bytes.fromhex("0180c2000001") + bytes.fromhex(MAC_B.replace(":", ""))
            + struct.pack("!HHH8H", 0x8808, 0x0101, enable, *t) + bytes(26))


class Solo:
    """NIC "A" on one end of a socketpair; the test plays its peer "B". On
    a ``ManualClock`` (``tests.nic_sim``): what the NIC sends is logged
    with the clock time it left."""

    def __init__(self, rate_bps=20_000_000, qps=((QPN_A, QPN_B),), **kw):
        kw.setdefault("rto_ns", 2_000_000_000)
        self.clock = kw.setdefault("clock", manual_clock())
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        for s in (a, b):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.shim = ShimSock(a, clock=self.clock)
        self.shim.logging = True
        self.peer = b
        b.setblocking(False)
        self.logs = MemLogs()
        self.nic = roce_nic(None, MAC_A, IP_A, MAC_B, rate_bps=rate_bps, sock=self.shim,
                           logs=self.logs, **kw)
        self.qps = [self.nic.create_qp(l, IP_B, r) for l, r in qps]
        self.mr = self.nic.register_mr(1 << 16, addr=0, rkey=9)
        self.tpl = {r: roce.FrameTemplate(MAC_B, MAC_A, IP_B, IP_A, 1000 + r, l, ecn=roce.ECN_CE)
                    for l, r in qps}
        self.psn = {r: 0 for _, r in qps}
        self.got: list[tuple[int, bytes]] = []
        self.loop = NicLoop((self.nic,), self.clock, peers=(b,),
                            on_peer_frame=lambda t, f: self.got.append((t, f)))

    def call(self, fn):
        fn()

    def start(self):
        return self

    def send_ce_write(self, remote_qpn, ce=True):
        """One CE-marked 4-byte WRITE from the peer's QP ``remote_qpn``."""
        psn = self.psn[remote_qpn]
        self.psn[remote_qpn] += 1
        f = bytearray(self.tpl[remote_qpn].build(roce.RC_WRITE_ONLY, psn, b"abcd",
                                                 reth=(psn * 4, 9, 4), ack_req=True))
        if not ce:
            f[15] &= ~3
        self.peer.send(bytes(f))

    def sent(self, kind=None):
        """(t_ns, frame) the NIC sent; kind: 'data', 'ack', 'cnp' or None."""
        out = []
        for t, f in list(self.shim.log):
            op = parse_roce(f).opcode
            k = "cnp" if op == roce.CNP_OPCODE else "ack" if op == roce.RC_ACK else "data"
            if kind is None or k == kind:
                out.append((t, f))
        return out

    def wait(self, pred, timeout_s=5.0):
        return self.loop.wait(pred, timeout_s)

    def run_for(self, seconds):
        self.loop.run_for(seconds)

    def close(self):
        self.nic.close()
        self.peer.close()


@pytest.fixture
def solos():
    made = []

    def make(**kw):
        s = Solo(**kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def check_cnp(frame: bytes, dst_qpn: int, cnp_dscp=48):
    p = Ether(frame)
    assert BTH in p and CNPPadding in p
    assert p[BTH].opcode == 0x81 and p[BTH].dqpn == dst_qpn and p[BTH].becn == 1
    assert p[BTH].psn == 0 and p[BTH].pkey == 0xFFFF
    assert p[IP].tos == cnp_dscp << 2                       # DSCP, ECN not-ECT
    assert (p[IP].src, p[IP].dst, p[UDP].dport) == (IP_A, IP_B, 4791)
    assert raw(p[CNPPadding])[:16] == bytes(16)
    assert len(frame) == 14 + 20 + 8 + 12 + 16 + 4
    assert verify_icrc(frame)
    again = p.copy()
    again[BTH].icrc = None                                  # scapy recomputes the ICRC
    assert raw(again) == frame


# ---------------------------------------------------------------------------
# notification point
# ---------------------------------------------------------------------------
def test_ce_marked_data_sends_one_cnp_per_interval_per_qp(solos):
    s = solos(qps=((QPN_A, QPN_B), (QPN_A2, QPN_B2)), dcqcn={"cnp_interval_us": 150_000.0}).start()
    s.send_ce_write(QPN_B, ce=False)                        # not marked: no CNP
    assert s.wait(lambda: s.nic.stats.rx_data_packets == 1)
    s.run_for(0.02)
    assert s.sent("cnp") == []
    for _ in range(5):
        s.send_ce_write(QPN_B)
        s.send_ce_write(QPN_B2)
    assert s.wait(lambda: s.nic.stats.rx_data_packets == 11 and len(s.sent("cnp")) == 2)
    s.run_for(0.03)                                        # within the interval: no more
    first = s.sent("cnp")
    assert len(first) == 2
    check_cnp(first[0][1], QPN_B)
    check_cnp(first[1][1], QPN_B2)
    s.run_for(0.16)                                        # the interval has passed
    s.send_ce_write(QPN_B)
    s.send_ce_write(QPN_B)
    assert s.wait(lambda: len(s.sent("cnp")) == 3)
    s.run_for(0.03)
    cnps = s.sent("cnp")
    assert len(cnps) == 3 and parse_roce(cnps[2][1]).dst_qp == QPN_B
    assert cnps[2][0] - cnps[0][0] >= 150 * MS
    st = s.nic.stats
    assert st.cnp_tx == 3 and st.ecn_ce_rx == 12 and st.rx_data_packets == 13
    assert [r[1:] for r in s.logs.cnp_rows] == [(QPN_A, QPN_B, "tx"), (QPN_A2, QPN_B2, "tx"),
                                                (QPN_A, QPN_B, "tx")]


# ---------------------------------------------------------------------------
# reaction point
# ---------------------------------------------------------------------------
def inject_cnp(p, dst_qpn, src_ip=IP_B):
    f = raw(Ether(src=MAC_B, dst=MAC_A) / IP(src=src_ip, dst=IP_A, tos=48 << 2)
            / UDP(sport=1234, dport=4791, chksum=0) / roce.cnp(dst_qpn))
    p.sock_b.sock.send(f)


def test_cnp_lowers_that_qps_rate_and_the_pacer_follows(pairs):
    rate = 100_000_000
    logs = MemLogs()
    frozen = {"rate_increase_timer_us": 1e9, "byte_counter_bytes": 10**12,   # no recovery
              **SLOW_RATES_100M}
    p = pairs(rate_bps=rate, dcqcn=frozen, logs=logs)
    q2a = p.a.create_qp(QPN_A2, IP_B, QPN_B2)
    p.b.create_qp(QPN_B2, IP_A, QPN_A2)
    p.start()
    inject_cnp(p, QPN_A)
    assert p.wait(lambda ca, cb: p.a.stats.cnp_rx == 1)
    p.run_for(0.01)
    assert p.qa.rate_bps == pytest.approx(rate / 2)          # alpha 1 before the first CNP
    assert q2a.rate_bps is None and p.qb.rate_bps is None
    init = [r for r in logs.qp_rows if r[4] == "init"]
    assert sorted((r[1], r[2], r[4]) for r in init) == sorted(
        [(QPN_A, rate, "init"), (QPN_B, rate, "init"), (QPN_A2, rate, "init"),
         (QPN_B2, rate, "init")])
    cut = [r for r in logs.qp_rows if r[4] == "cnp"]
    assert len(cut) == 1 and cut[0][1:] == (QPN_A, pytest.approx(rate / 2), pytest.approx(1.0),
                                             "cnp")
    assert [r[1:] for r in logs.cnp_rows] == [(QPN_A, QPN_B, "rx")]
    # the pacer sends QP A at half the line rate
    size = 64 * 1024
    src = p.a.register_mr(size, buf=pattern(size))
    p.b.register_mr(size, addr=0, rkey=9)
    p.sock_a.logging = True
    p.call(p.a, lambda: p.a.post_write(p.qa, 1, (src, 0, size), 0, 9))
    assert p.wait(lambda ca, cb: ca)
    c = p.cq[p.a][0]
    assert c.status == WcStatus.SUCCESS
    ideal_half = sum((len(f) + wire.WIRE_OVERHEAD_BYTES) * 8e9 / (rate / 2)
                     for _, f in p.sock_a.log if parse_roce(f).opcode != roce.RC_ACK)
    assert c.complete_ns - c.post_ns >= ideal_half * 0.98


def test_dcqcn_disabled_counts_cnps_but_keeps_line_rate(pairs):
    logs = MemLogs()
    p = pairs(dcqcn={"enabled": False}, logs=logs)
    p.start()
    inject_cnp(p, QPN_A)
    inject_cnp(p, QPN_A, src_ip="10.7.7.7")                  # not the QP's peer: ignored
    assert p.wait(lambda ca, cb: p.a.stats.cnp_rx == 1)
    p.run_for(0.02)
    assert p.a.stats.cnp_rx == 1 and p.qa.rate_bps is None and p.qa.cc is None
    assert [r[4] for r in logs.qp_rows] == ["init", "init"]


def test_marking_and_loss_recover_under_dcqcn(pairs):
    """Every data frame marked CE and a few lost: DCQCN cuts and recovers,
    go-back-N and the RTO still deliver everything once."""
    n = 200
    lost = set()

    def mark_and_drop(f):
        f = bytearray(f)
        pk = parse_roce(f)
        if pk.opcode == roce.RC_ACK:
            return bytes(f)
        if pk.psn in (20, 21, n - 1) and pk.psn not in lost:
            lost.add(pk.psn)
            return None
        f[15] |= roce.ECN_CE
        return bytes(f)

    dc = {"rate_increase_timer_us": 2000.0, "alpha_update_us": 2000.0,
          "byte_counter_bytes": 32 * 1024, "rate_ai_gbps": 0.005, "rate_hai_gbps": 0.01,
          "min_rate_gbps": 0.00025, "cnp_interval_us": 3000.0}
    p = pairs(rate_bps=100_000_000, hook_ab=mark_and_drop, dcqcn=dc, rto_ns=40_000_000)
    size = n * 1024
    src = p.a.register_mr(size, buf=pattern(size, 9))
    dst = p.b.register_mr(size, addr=0, rkey=9)
    p.a.post_write(p.qa, 1, (src, 0, size), 0, 9)
    p.start()
    assert p.wait(lambda ca, cb: ca and cb)
    assert p.cq[p.a][0].status == WcStatus.SUCCESS and dst.buf == src.buf
    sa, sb = p.a.stats, p.b.stats
    assert lost == {20, 21, n - 1}
    assert sb.cnp_tx >= 2 and sa.cnp_rx == sb.cnp_tx and sa.rate_changes >= sa.cnp_rx
    assert sa.nak_rewinds >= 1 and sa.timeouts >= 1
    assert sb.rx_data_payload_bytes == size
    assert p.qa.cc.cnps == sa.cnp_rx


# ---------------------------------------------------------------------------
# PFC
# ---------------------------------------------------------------------------
def test_pfc_pauses_data_not_cnps_for_the_quanta_time(solos):
    rate = 20_000_000
    s = solos(rate_bps=rate, dcqcn={"cnp_interval_us": 0.0})
    size = 1 << 20                                          # ~450 ms at 20 Mbit/s
    src = s.nic.register_mr(size, buf=pattern(size))
    qp = s.qps[0]
    s.nic.post_write(qp, 1, (src, 0, size), 0, 9)
    s.start()
    assert s.wait(lambda: len(s.sent("data")) >= 5)
    # another class's pause does not stop data
    s.peer.send(pfc_frame({4: 0xFFFF}))
    assert s.wait(lambda: s.nic.stats.pfc_rx == 1)
    n = len(s.sent("data"))
    assert s.wait(lambda: len(s.sent("data")) >= n + 5, 0.5)
    # pause priority 3 for 4000 quanta = 102.4 ms at 20 Mbit/s
    quanta = 4000
    pause_ns = quanta * 512 * 1e9 / rate
    s.peer.send(pfc_frame({3: quanta}))
    assert s.wait(lambda: s.nic.stats.pfc_rx == 2)
    t_p = s.logs.pfc_rows[-1][0]
    assert s.logs.pfc_rows[-1][1:] == (3, quanta)
    s.run_for(0.03)
    s.send_ce_write(QPN_B)                                  # a CNP is owed, and an ACK
    assert s.wait(lambda: len(s.sent("cnp")) == 1, 0.05)    # CNP (priority 6) goes now
    t_cnp = s.sent("cnp")[0][0]
    assert t_p < t_cnp < t_p + pause_ns
    ft = s.nic.frame_time_ns
    assert s.wait(lambda: any(t - ft(len(f)) > t_p for t, f in s.sent("data")), 0.5)
    # nothing of priority 3 started during the pause (a frame serialized
    # before it is on the wire and still leaves); data resumed right after it
    prio3 = [t - ft(len(f)) for t, f in s.sent("data") + s.sent("ack") if t - ft(len(f)) > t_p]
    assert min(prio3) >= t_p + pause_ns
    assert min(prio3) <= t_p + pause_ns + 10
    ack_t = [t - ft(len(f)) for t, f in s.sent("ack")]
    assert ack_t and min(ack_t) >= t_p + pause_ns            # the ACK waited for the pause
    # a long pause, ended early by timer 0: data resumes at once
    s.peer.send(pfc_frame({3: 0xFFFF}))
    assert s.wait(lambda: s.nic.stats.pfc_rx == 3)
    t_long = s.logs.pfc_rows[-1][0]
    s.run_for(0.05)
    s.peer.send(pfc_frame({3: 0}))
    assert s.wait(lambda: s.nic.stats.pfc_rx == 4)
    t_resume = s.logs.pfc_rows[-1][0]
    assert s.wait(lambda: any(t - ft(len(f)) > t_resume for t, f in s.sent("data")), 0.5)
    after = [t - ft(len(f)) for t, f in s.sent("data") if t - ft(len(f)) > t_long]
    assert min(after) >= t_resume and min(after) - t_resume <= 10
    s.call(lambda: s.nic.update_pause_stats())
    s.run_for(0.01)
    paused = s.nic.stats.paused_ns                          # priority 3 only (4 is not ours)
    assert pause_ns + (t_resume - t_long) <= paused <= pause_ns + (t_resume - t_long) + 1000
    assert s.nic.stats.pfc_rx == 4 and qp.state.name == "RTS"


# ---------------------------------------------------------------------------
# pacing with several QPs
# ---------------------------------------------------------------------------
def test_each_qp_at_most_its_rate_and_the_nic_at_most_its_link(pairs):
    rate = 80_000_000
    p = pairs(rate_bps=rate)
    caps = {QPN_B: None, QPN_B2: rate // 4, 0x66: rate // 8}
    qps = [p.qa, p.a.create_qp(QPN_A2, IP_B, QPN_B2, rate_bps=rate // 4),
           p.a.create_qp(0x55, IP_B, 0x66, rate_bps=rate // 8)]
    p.b.create_qp(QPN_B2, IP_A, QPN_A2)
    p.b.create_qp(0x66, IP_A, 0x55)
    size = 96 * 1024
    src = p.a.register_mr(size, buf=pattern(size))
    p.b.register_mr(3 * size, addr=0, rkey=9)
    p.sock_a.logging = True
    for i, q in enumerate(qps):
        p.a.post_write(q, i, (src, 0, size), i * size, 9)
    p.start()
    assert p.wait(lambda ca, cb: len(ca) == 3)
    data = [(t, f) for t, f in p.sock_a.log if parse_roce(f).opcode != roce.RC_ACK]
    lag = p.a.max_lag_ns
    ft = lambda f, r: (len(f) + wire.WIRE_OVERHEAD_BYTES) * 8e9 / r   # noqa: E731
    # the NIC never runs ahead of its link rate ...
    t0, budget = data[0][0], 0.0
    for t, f in data:
        assert t - t0 >= budget - lag
        budget += ft(f, rate)
    # ... nor a capped QP ahead of its cap
    for dqpn, cap in caps.items():
        mine = [(t, f) for t, f in data if parse_roce(f).dst_qp == dqpn]
        assert len(mine) == size // 1024
        if cap is None:
            continue
        t0, budget = mine[0][0], 0.0
        for t, f in mine:
            assert t - t0 >= budget - lag
            budget += ft(f, cap)
    # work conserving: while all three were busy the uncapped QP got the rest
    end = min(max(t for t, f in data if parse_roce(f).dst_qp == q) for q in (QPN_B2, QPN_B))
    first = [f for t, f in data if t <= end]
    share = sum(len(f) for f in first if parse_roce(f).dst_qp == QPN_B) / sum(map(len, first))
    assert share > 0.5                                       # 5/8 ideally


# ---------------------------------------------------------------------------
# the agent: raw logs and result counters
# ---------------------------------------------------------------------------
def test_agent_writes_raw_logs_and_counters(tmp_path):
    import csv
    import json

    from emulator.agents.host import HostAgent
    from emulator.agents.run_logs import RunLogs
    from emulator.schema.agent import HostAgentConfig

    def mark_ce(f):
        f = bytearray(f)
        if parse_roce(f).opcode != roce.RC_ACK:
            f[15] |= roce.ECN_CE
        return bytes(f)

    rate, size = 50_000_000, 200 * 1024
    sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for s_ in (sa, sb):
        s_.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        s_.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    start = time.time_ns() + 300 * MS
    side = {"a": (MAC_A, IP_A, MAC_B, IP_B, QPN_A, QPN_B, ShimSock(sa, mark_ce)),
            "b": (MAC_B, IP_B, MAC_A, IP_A, QPN_B, QPN_A, ShimSock(sb))}
    agents = {}
    for h, (mac, ip, gw, rip, qpn, rqpn, sock) in side.items():
        cfg = {"host": h, "ifname": "none", "mac": mac, "ip": ip, "gateway_mac": gw,
               "rate_bps": rate, "start_at_unix_ns": start, "deadline_s": 10, "linger_s": 0.1,
               "sample_interval_ns": 5 * MS,
               "dcqcn": {"rate_increase_timer_us": 1000.0, "alpha_update_us": 1000.0,
                         "cnp_interval_us": 2000.0, **SLOW_RATES_100M},
               "qps": [{"qpn": qpn, "remote_ip": rip, "remote_qpn": rqpn}],
               "send": [{"flow_id": 7, "qpn": qpn, "size_bytes": size}] if h == "a" else [],
               "expect": [{"flow_id": 7, "qpn": qpn, "size_bytes": size}] if h == "b" else [],
               "result_path": str(tmp_path / f"{h}.result.json")}
        (tmp_path / f"{h}.json").write_text(json.dumps(cfg))
        cfg = HostAgentConfig.load(tmp_path / f"{h}.json")
        logs = RunLogs(str(tmp_path), h)
        nic = RoceNic(cfg, sock=sock, logs=logs)
        agents[h] = HostAgent(cfg, nic=nic, logs=logs)
    ok = {}
    threads = [threading.Thread(target=lambda h=h: ok.__setitem__(h, agents[h].run()))
               for h in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    for ag in agents.values():
        ag.write_result()
        ag.nic.close()
        ag.finish_logs()
    assert ok == {"a": True, "b": True}

    def rows(name):
        with open(tmp_path / name) as f:
            return list(csv.reader(f))

    ra = json.loads((tmp_path / "a.result.json").read_text())
    rb = json.loads((tmp_path / "b.result.json").read_text())
    assert rb["nic"]["cnp_tx"] >= 2 and ra["nic"]["cnp_rx"] == rb["nic"]["cnp_tx"]
    assert rb["nic"]["ecn_ce_rx"] >= size // 1024 and ra["nic"]["pfc_rx"] == 0
    assert ra["nic"]["paused_ns"] == 0 and ra["config"]["dcqcn"]["rate_timer_ns"] == 1 * MS
    qa = rows("a.qp.csv")
    assert qa[0] == ["t_ns", "qpn", "rate_bps", "alpha", "event"]
    assert qa[1][1:] == [str(QPN_A), str(rate), "1", "init"]
    events = [r[4] for r in qa[2:]]
    assert events.count("cnp") == ra["nic"]["cnp_rx"] and "rate_timer" in events
    assert all(int(r[2]) <= rate for r in qa[1:])
    assert rows("b.qp.csv")[1:] == [[rows("b.qp.csv")[1][0], str(QPN_B), str(rate), "1", "init"]]
    ca, cb = rows("a.cnp.csv"), rows("b.cnp.csv")
    assert ca[0] == ["t_ns", "local_qpn", "remote_qpn", "direction"]
    assert [r[1:] for r in cb[1:]] == [[str(QPN_B), str(QPN_A), "tx"]] * rb["nic"]["cnp_tx"]
    assert [r[1:] for r in ca[1:]] == [[str(QPN_A), str(QPN_B), "rx"]] * ra["nic"]["cnp_rx"]
    fl = rows("a.flows.csv")
    assert fl[0] == ["t_ns", "flow_id", "acked_bytes"] and rows("b.flows.csv")[1:] == []
    t = [int(r[0]) for r in fl[1:]]
    acked = [int(r[2]) for r in fl[1:]]
    assert len(fl) >= 5 and t == sorted(t) and acked == sorted(acked)
    assert acked[0] == 0 and acked[-1] == size and {r[1] for r in fl[1:]} == {"7"}
    assert rows("a.pfc.csv") == [["t_ns", "priority", "quanta"]]
