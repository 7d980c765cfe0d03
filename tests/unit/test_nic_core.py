"""RoceNic protocol behaviour, two NICs in one process over an AF_UNIX
datagram socketpair (no root, no network), on a ``ManualClock`` driven by
one loop (``tests.nic_sim``): deterministic, no sleeping, no threads. Frames
can be dropped, rewritten or logged in between."""
from __future__ import annotations

import socket

import pytest
from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from tests.nics import roce_nic
from emulator import wire
from emulator.nic import roce
from emulator.nic.nic import QpState, RoceNic, WcOpcode, WcStatus
from emulator.nic.roce import parse_roce
from tests.nic_sim import SimNicPair, manual_clock

MAC_A, MAC_B = "02:00:00:00:0a:01", "02:00:00:00:0b:01"
IP_A, IP_B = "10.0.1.1", "10.0.2.1"
QPN_A, QPN_B = 0x11, 0x22


class ShimSock:
    """Socket wrapper: ``hook(frame_bytes) -> bytes | None`` (None drops)."""

    def __init__(self, sock, hook=None, clock=None):
        self.sock, self.hook, self.clock = sock, hook, clock
        self.log: list[tuple[int, bytes]] = []   # (clock ns, frame) of what was sent
        self.logging = False

    def send(self, data):
        if self.hook is not None:
            data = self.hook(bytes(data))
            if data is None:
                return 0
        if self.logging:
            self.log.append((self.clock.now_ns(), bytes(data)))
        return self.sock.send(data)

    def recv_into(self, buf):
        return self.sock.recv_into(buf)

    def fileno(self):
        return self.sock.fileno()

    def setblocking(self, flag):
        self.sock.setblocking(flag)

    def close(self):
        self.sock.close()


class Pair(SimNicPair):
    def __init__(self, rate_bps=200_000_000, hook_ab=None, hook_ba=None, sq_psn_a=0, sq_psn_b=0,
                 **nic_kw):
        nic_kw.setdefault("rto_ns", 300_000_000)
        if nic_kw["rto_ns"] is None:          # the NIC config's default
            del nic_kw["rto_ns"]
        clock = nic_kw.setdefault("clock", manual_clock())
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        for s in (a, b):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock_a, self.sock_b = ShimSock(a, hook_ab, clock), ShimSock(b, hook_ba, clock)
        self.a = roce_nic(None, MAC_A, IP_A, MAC_B, rate_bps=rate_bps, sock=self.sock_a, **nic_kw)
        self.b = roce_nic(None, MAC_B, IP_B, MAC_A, rate_bps=rate_bps, sock=self.sock_b, **nic_kw)
        self.qa = self.a.create_qp(QPN_A, IP_B, QPN_B, sq_psn=sq_psn_a, rq_psn=sq_psn_b)
        self.qb = self.b.create_qp(QPN_B, IP_A, QPN_A, sq_psn=sq_psn_b, rq_psn=sq_psn_a)
        self._init_loop(clock)


@pytest.fixture
def pairs():
    made = []

    def make(**kw):
        p = Pair(**kw)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def pattern(n, seed=0):
    return bytearray((i * 7 + seed + (i >> 8)) & 0xFF for i in range(n))


def data_psn(frame):
    pk = parse_roce(frame)
    return None if pk is None or pk.opcode == roce.RC_ACK else pk.psn


# ---------------------------------------------------------------------------
def test_write_send_and_psn_wraparound(pairs):
    p = pairs(sq_psn_a=0xFFFFF0)
    size = 200 * 1024 + 100
    src = p.a.register_mr(size, buf=pattern(size))
    dst = p.b.register_mr(size + 8192, addr=0x10000, rkey=0x1234)
    p.b.post_recv(p.qb, 77, 5000)
    p.b.post_recv(p.qb, 78, 16)
    p.a.post_write(p.qa, 1, (src, 0, size), 0x10000 + 4096, 0x1234)
    p.a.post_send(p.qa, 2, bytes(pattern(3001, 5)))
    p.a.post_write(p.qa, 3, (src, 0, 0), 0x10000, 0x1234)
    p.a.post_send(p.qa, 4, b"")
    p.start()
    assert p.wait(lambda ca, cb: len(ca) == 4 and len(cb) == 4)
    ca, cb = p.cq[p.a], p.cq[p.b]
    assert [c.wr_id for c in ca] == [1, 2, 3, 4]
    assert all(c.status == WcStatus.SUCCESS for c in ca + cb)
    assert [c.opcode for c in ca] == [WcOpcode.RDMA_WRITE, WcOpcode.SEND] * 2
    assert [c.byte_len for c in ca] == [size, 3001, 0, 0]
    assert all(c.complete_ns > c.post_ns and c.complete_unix_ns > c.post_unix_ns for c in ca)
    assert dst.buf[4096:4096 + size] == src.buf
    assert dst.buf[:4096] == bytes(4096) and dst.buf[4096 + size:] == bytes(8192 - 4096)
    w, r, w0, r0 = cb
    assert (w.opcode, w.remote_addr, w.rkey, w.byte_len) == (WcOpcode.RECV_RDMA_WRITE, 0x11000,
                                                             0x1234, size)
    assert (r.opcode, r.wr_id, r.byte_len) == (WcOpcode.RECV, 77, 3001)
    assert bytes(r.data) == bytes(pattern(3001, 5))
    assert r.first_rx_ns <= r.complete_ns
    assert (w0.opcode, w0.byte_len, r0.wr_id, r0.byte_len) == (WcOpcode.RECV_RDMA_WRITE, 0, 78, 0)
    npkts = 201 + 3 + 1 + 1
    assert p.qa.snd_una == 0xFFFFF0 + npkts                 # unwrapped internally
    assert p.qb.epsn & roce.PSN_MASK == (0xFFFFF0 + npkts) & roce.PSN_MASK
    assert p.qb.msn == 4
    assert p.a.stats.tx_data_packets == npkts and p.a.stats.tx_retransmits == 0
    assert p.b.stats.rx_out_of_order == 0 and p.a.stats.timeouts == 0
    # AckReq every 16 PSNs + last of each message -> coalesced ACKs, far fewer than packets
    assert 4 <= p.b.stats.tx_acks <= npkts // 16 + 4 + 2


def test_go_back_n_recovers_from_data_and_ack_loss(pairs):
    n = 100                                   # packets in the message, PSN 0..99
    dropped = set()

    def drop_data(f):
        psn = data_psn(f)
        if psn in (3, 50, 51, n - 1) and psn not in dropped:
            dropped.add(psn)
            return None
        return f

    acks_dropped = []

    def drop_acks(f):
        pk = parse_roce(f)
        if pk.opcode == roce.RC_ACK and pk.aeth_syndrome == roce.AETH_ACK_SYNDROME \
                and len(acks_dropped) < 2:
            acks_dropped.append(pk.psn)
            return None
        return f

    p = pairs(hook_ab=drop_data, hook_ba=drop_acks, rto_ns=30_000_000)
    size = n * 1024
    src = p.a.register_mr(size, buf=pattern(size, 3))
    dst = p.b.register_mr(size, addr=0, rkey=9)
    p.a.post_write(p.qa, 1, (src, 0, size), 0, 9)
    p.start()
    assert p.wait(lambda ca, cb: ca and cb)
    assert p.cq[p.a][0].status == WcStatus.SUCCESS
    assert dst.buf == src.buf
    sa, sb = p.a.stats, p.b.stats
    assert dropped == {3, 50, 51, n - 1} and len(acks_dropped) == 2
    # gaps at 3 and 50 (one NAK if the resend of 3.. already refilled 50)
    assert sb.tx_naks >= 1 and sa.rx_naks == sb.tx_naks
    assert sa.nak_rewinds >= 1
    # The lost last packet has nobody after it to reveal it: a timeout finds
    # it, unless (on a slow machine) a NAK's rewind resent it first.
    assert sa.timeouts >= 1 or sa.nak_rewinds >= 2
    assert sb.rx_out_of_order > 0
    assert sa.tx_retransmits >= 4
    assert sb.rx_data_payload_bytes == size  # each PSN placed exactly once


def test_duplicates_are_reacked(pairs):
    """All ACKs of the first round are lost: the sender times out and resends
    everything; the receiver sees duplicates and ACKs them."""
    state = {"drop": True}

    def drop_acks(f):
        return None if state["drop"] and parse_roce(f).opcode == roce.RC_ACK else f

    p = pairs(hook_ba=drop_acks, rto_ns=20_000_000)
    src = p.a.register_mr(8 * 1024, buf=pattern(8 * 1024))
    p.b.register_mr(8 * 1024, addr=0, rkey=9)
    p.a.post_write(p.qa, 1, (src, 0, 8 * 1024), 0, 9)
    p.start()
    assert p.wait(lambda ca, cb: len(cb) == 1)
    p.run_for(0.005)
    state["drop"] = False
    assert p.wait(lambda ca, cb: len(ca) == 1)
    assert p.a.stats.timeouts >= 1
    assert p.b.stats.rx_duplicates >= 1
    assert p.cq[p.a][0].status == WcStatus.SUCCESS
    assert len(p.cq[p.b]) == 1               # the duplicate did not complete twice


def test_rnr_nak_until_a_receive_is_posted(pairs):
    p = pairs()
    p.a.post_send(p.qa, 5, b"hello" * 500)
    p.start()
    p.run_for(0.05)
    assert p.cq[p.a] == [] and p.b.stats.tx_rnr_naks >= 1 and p.a.stats.rx_rnr_naks >= 1
    p.call(p.b, lambda: p.b.post_recv(p.qb, 9, 4096))
    assert p.wait(lambda ca, cb: ca and cb)
    assert p.cq[p.a][0].status == WcStatus.SUCCESS
    assert bytes(p.cq[p.b][0].data) == b"hello" * 500


def test_bad_rkey_is_a_remote_access_error(pairs):
    p = pairs()
    src = p.a.register_mr(4096)
    p.b.register_mr(4096, addr=0, rkey=9)
    p.a.post_write(p.qa, 1, (src, 0, 4096), 0, 10)      # wrong rkey
    p.a.post_write(p.qa, 2, (src, 0, 4096), 0, 9)
    p.start()
    assert p.wait(lambda ca, cb: len(ca) == 2)
    assert [(c.wr_id, c.status) for c in p.cq[p.a]] == [(1, WcStatus.REM_ACCESS_ERR),
                                                        (2, WcStatus.WR_FLUSH_ERR)]
    assert p.qa.state == QpState.ERROR
    with pytest.raises(RuntimeError):
        p.a.post_send(p.qa, 3, b"x")


def test_write_past_the_region_is_rejected(pairs):
    p = pairs()
    src = p.a.register_mr(8192)
    dst = p.b.register_mr(4096, addr=0, rkey=9)
    p.a.post_write(p.qa, 1, (src, 0, 8192), 0, 9)
    p.start()
    assert p.wait(lambda ca, cb: ca)
    assert p.cq[p.a][0].status == WcStatus.REM_ACCESS_ERR
    assert dst.buf == bytes(4096) and p.cq[p.b] == []


def _frame_times(log, rate):
    return [(len(f) + wire.WIRE_OVERHEAD_BYTES) * 8e9 / rate for _, f in log]


def test_pacing_counts_whole_frames_on_an_exact_schedule(pairs):
    rate = 40_000_000
    p = pairs(rate_bps=rate)
    size = 256 * 1024
    src = p.a.register_mr(size, buf=pattern(size))
    p.b.register_mr(size, addr=0, rkey=9)
    p.sock_a.logging = True
    t0 = p.clock.now_ns()
    p.a.post_write(p.qa, 1, (src, 0, size), 0, 9)
    p.start()
    assert p.wait(lambda ca, cb: ca)
    log = [(t, f) for t, f in p.sock_a.log if parse_roce(f).opcode != roce.RC_ACK]
    ft = _frame_times(log, rate)
    ideal = sum(ft)                          # 256 frames of 1024+54(+16) bytes + 24
    assert 0.050 < ideal / 1e9 < 0.060
    # back to back from the post: frame k leaves when its serialization ends
    # (the loop wakes at that ns, or the next whole ns after a fractional end)
    end = float(t0)
    for (t, _), f in zip(log, ft):
        end += f
        assert 0 <= t - end < 1
    c = p.cq[p.a][0]
    assert c.complete_ns - c.post_ns >= ideal


def test_per_qp_rate_and_round_robin(pairs):
    rate = 100_000_000
    p = pairs(rate_bps=rate)
    q2a = p.a.create_qp(0x33, IP_B, 0x44)
    q2b = p.b.create_qp(0x44, IP_A, 0x33)
    assert q2b
    size = 64 * 1024
    src = p.a.register_mr(size, buf=pattern(size))
    p.b.register_mr(2 * size, addr=0, rkey=9)
    p.sock_a.logging = True
    p.a.post_write(p.qa, 1, (src, 0, size), 0, 9)
    p.a.post_write(q2a, 2, (src, 0, size), size, 9)
    p.start()
    assert p.wait(lambda ca, cb: len(ca) == 2)
    qps = [parse_roce(f).dst_qp for _, f in p.sock_a.log]
    # round robin: one frame from each in turn
    assert qps[:64 * 2] == [QPN_B, 0x44] * 64
    done = {c.wr_id: c.complete_ns - c.post_ns for c in p.cq[p.a]}
    assert abs(done[1] - done[2]) < 0.02 * max(done.values())

    # per-QP rate cap (the DCQCN hook): a quarter of the line rate
    p.sock_a.log.clear()
    p.call(p.a, lambda: (setattr(p.qa, "rate_bps", rate // 4),
                         p.a.post_write(p.qa, 3, (src, 0, size), 0, 9)))
    assert p.wait(lambda ca, cb: len(ca) == 3)
    c = p.cq[p.a][2]
    data = [(t, f) for t, f in p.sock_a.log if parse_roce(f).opcode != roce.RC_ACK]
    # at a quarter of the line rate: frame k+1 starts one capped frame time
    # of frame k after frame k and leaves when its serialization (at line
    # rate) ends (+1 ns: the loop wakes at the next whole ns)
    capped, line = _frame_times(data, rate // 4), _frame_times(data, rate)
    for k, ((t, _), (t1, _)) in enumerate(zip(data, data[1:])):
        assert abs((t1 - t) - (capped[k] + line[k + 1] - line[k])) <= 1
    assert c.complete_ns - c.post_ns >= sum(capped[:-1])


def test_tx_delay_shifts_every_frame(pairs):
    p = pairs(tx_delay_ns=30_000_000)
    src = p.a.register_mr(100)
    p.b.register_mr(100, addr=0, rkey=9)
    p.a.post_write(p.qa, 1, (src, 0, 100), 0, 9)
    p.start()
    assert p.wait(lambda ca, cb: ca)
    c = p.cq[p.a][0]
    cb = p.cq[p.b][0]
    ft_data = p.a.frame_time_ns(14 + 20 + 8 + 12 + 16 + 100 + 4)
    ft_ack = p.a.frame_time_ns(14 + 20 + 8 + 12 + 4 + 4)
    # the data leaves 30 ms after its serialization ends, and so does the ACK
    assert abs(cb.first_rx_ns - c.post_ns - (30_000_000 + ft_data)) <= 1
    assert abs(c.complete_ns - c.post_ns - (60_000_000 + ft_data + ft_ack)) <= 2


def test_ecn_ce_hook_and_cnp_hook(pairs):
    def mark_ce(f):
        f = bytearray(f)
        if parse_roce(f).opcode != roce.RC_ACK:
            f[15] |= roce.ECN_CE        # the switch marks CE: masked in the ICRC
        return bytes(f)

    p = pairs(hook_ab=mark_ce)
    seen, cnps = [], []
    p.b.on_ecn_ce = lambda qp, pk: seen.append((qp.qpn, pk.psn))
    p.b.on_cnp = lambda qp, pk: cnps.append((qp.qpn, pk.becn))
    src = p.a.register_mr(10 * 1024, buf=pattern(10 * 1024))
    dst = p.b.register_mr(10 * 1024, addr=0, rkey=9)
    p.a.post_write(p.qa, 1, (src, 0, 10 * 1024), 0, 9)
    p.start()
    assert p.wait(lambda ca, cb: ca)
    assert dst.buf == src.buf and p.b.stats.rx_icrc_errors == 0
    assert seen == [(QPN_B, i) for i in range(10)] and p.b.stats.ecn_ce_rx == 10
    cnp = raw(Ether(src=MAC_A, dst=MAC_B) / IP(src=IP_A, dst=IP_B, tos=0xC2)
              / UDP(sport=1234, dport=4791, chksum=0) / roce.cnp(QPN_B))
    p.sock_a.sock.send(cnp)
    p.run_for(0.05)
    assert cnps == [(QPN_B, True)] and p.b.stats.cnp_rx == 1


def test_bad_icrc_and_foreign_frames_are_dropped(pairs):
    p = pairs()
    p.b.register_mr(4096, addr=0, rkey=9)
    p.start()
    tpl = roce.FrameTemplate(MAC_A, MAC_B, IP_A, IP_B, 1, QPN_B)
    good = bytes(tpl.build(roce.RC_WRITE_ONLY, 0, b"abcd", reth=(0, 9, 4), ack_req=True))
    bad = bytearray(good)
    bad[-6] ^= 1
    other_ip = bytes(roce.FrameTemplate(MAC_A, MAC_B, IP_A, "10.9.9.9", 1, QPN_B)
                     .build(roce.RC_WRITE_ONLY, 0, b"abcd", reth=(0, 9, 4)))
    other_qp = bytes(roce.FrameTemplate(MAC_A, MAC_B, IP_A, IP_B, 1, 0x999)
                     .build(roce.RC_WRITE_ONLY, 0, b"abcd", reth=(0, 9, 4)))
    wrong_src = bytes(roce.FrameTemplate(MAC_A, MAC_B, "10.7.7.7", IP_B, 1, QPN_B)
                      .build(roce.RC_WRITE_ONLY, 0, b"abcd", reth=(0, 9, 4)))
    for f in (bytes(bad), other_ip, other_qp, wrong_src, b"\x00" * 60):
        p.sock_a.sock.send(f)
    p.run_for(0.05)
    assert p.b.stats.rx_icrc_errors == 1 and p.b.stats.rx_ignored == 4
    assert p.b.stats.rx_data_packets == 0 and p.cq[p.b] == []
    p.sock_a.sock.send(good)
    assert p.wait(lambda ca, cb: cb)
    p.run_for(0.001)                          # the ACK leaves when serialized
    assert p.cq[p.b][0].byte_len == 4 and p.b.stats.tx_acks == 1


def test_enobufs_is_retried(pairs):
    count = {"n": 0}

    def flaky(f):
        count["n"] += 1
        if count["n"] % 7 == 0:
            raise BlockingIOError(11, "no room")
        return f

    p = pairs(hook_ab=flaky)
    size = 64 * 1024
    src = p.a.register_mr(size, buf=pattern(size))
    dst = p.b.register_mr(size, addr=0, rkey=9)
    p.a.post_write(p.qa, 1, (src, 0, size), 0, 9)
    p.start()
    assert p.wait(lambda ca, cb: ca)
    assert p.cq[p.a][0].status == WcStatus.SUCCESS and dst.buf == src.buf
    assert p.a.stats.tx_enobufs >= 5 and p.a.stats.tx_retransmits == 0


def test_retry_exceeded_fails_the_qp(pairs):
    p = pairs(hook_ab=lambda f: None, rto_ns=5_000_000, retry_cnt=3)
    p.a.post_send(p.qa, 1, b"lost")
    p.a.post_send(p.qa, 2, b"lost too")
    t0 = p.clock.now_ns()
    p.start()
    assert p.wait(lambda ca, cb: len(ca) == 2, timeout_s=2)
    assert [c.status for c in p.cq[p.a]] == [WcStatus.RETRY_EXC_ERR, WcStatus.WR_FLUSH_ERR]
    assert p.a.stats.timeouts == 4
    # timeouts back off: 5, 10, 20, 40 ms, each from when the frame (re)sent
    # before it left: 75 ms and four frame times after the post
    ft = p.a.frame_time_ns(14 + 20 + 8 + 12 + 4 + 4)
    assert abs(p.cq[p.a][0].complete_ns - t0 - (75_000_000 + 4 * ft)) <= 10   # +1 ns per wake
    # the QP is in the error state, counted once per cause; the second WQE was flushed
    st = p.a.stats
    assert p.qa.state == QpState.ERROR and not p.qa.has_tx_data()
    assert (st.qp_errors, st.retry_exc_errors, st.rnr_retry_exc_errors, st.wr_flush_errors) \
        == (1, 1, 0, 1)
    assert {k: v for k, v in st.as_dict().items() if k.endswith("_errors") and "rx" not in k} \
        == {"qp_errors": 1, "retry_exc_errors": 1, "rnr_retry_exc_errors": 0, "wr_flush_errors": 1}
    with pytest.raises(RuntimeError, match="ERROR"):
        p.a.post_send(p.qa, 3, b"refused")
