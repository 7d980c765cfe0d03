"""RDMA READ: byte-exact over a socketpair (with WRITEs on the same QP and
frame loss) and over veth (with and without loss); READ responses obey PFC;
the wire format is what IBTA (and p4src/fabric.p4's parser) expects."""
from __future__ import annotations

import random

import pytest
from scapy.layers.l2 import Ether

from emulator import wire
from emulator.nic import roce
from emulator.nic.nic import WcOpcode, WcStatus
from emulator.nic.roce import AETH, BTH, RETH, parse_roce

from .test_nic_core import IP_A, IP_B, MAC_A, MAC_B, QPN_A, pairs  # noqa: F401  (fixture)
from .test_nic_loopback import add_loss, needs_root, veth  # noqa: F401  (fixture)
from .test_nic_lossless import QPN_B, pfc_frame, solos  # noqa: F401  (fixture)
from .veth_nics import VethPair

MS = 1_000_000


def pattern(n, seed=1):
    return bytearray(random.Random(seed).randbytes(n))


def _ops(frames):
    return [parse_roce(f).opcode for _, f in frames]


def test_read_wire_format_and_psn_accounting(pairs):
    p = pairs().start()
    p.sock_a.logging = p.sock_b.logging = True
    src = p.b.register_mr(3000, buf=pattern(3000))
    dst = p.a.register_mr(3000)
    p.call(p.a, lambda: p.a.post_read(p.qa, 5, (dst, 0, 3000), src.addr + 0, src.rkey))
    assert p.wait(lambda ca, cb: any(c.opcode == WcOpcode.RDMA_READ for c in ca))
    c = p.cq[p.a][0]
    assert (c.wr_id, c.status, c.byte_len, c.remote_addr) == (5, WcStatus.SUCCESS, 3000, src.addr)
    assert dst.buf == src.buf
    req = Ether(p.sock_a.log[0][1])
    assert req[BTH].opcode == 0x0C and req[RETH].virtual_addr == src.addr and req[RETH].dma_length == 3000
    assert req[RETH].rkey == src.rkey and roce.verify_icrc(p.sock_a.log[0][1])
    resp = [f for _, f in p.sock_b.log if parse_roce(f).opcode != roce.RC_ACK]
    assert [parse_roce(f).opcode for f in resp] == [0x0D, 0x0E, 0x0F]
    assert [parse_roce(f).psn for f in resp] == [0, 1, 2]          # 3 PSNs for 3 responses
    assert AETH in Ether(resp[0]) and AETH in Ether(resp[2]) and AETH not in Ether(resp[1])
    assert all(roce.verify_icrc(f) for f in resp)
    # the next request continues after the READ's 3 PSNs; a 0-byte READ is one ONLY
    p.sock_a.log.clear()
    p.call(p.a, lambda: p.a.post_read(p.qa, 6, (dst, 0, 0), src.addr, src.rkey))
    assert p.wait(lambda ca, cb: len(ca) == 2)
    assert parse_roce(p.sock_a.log[0][1]).psn == 3
    assert p.cq[p.a][1].status == WcStatus.SUCCESS and p.qa.snd_una == 4 == p.qb.epsn


def test_read_mixed_with_writes_and_loss_is_byte_exact(pairs):
    rng = random.Random(7)

    def lossy(frame):                      # ~3% of every kind of frame, both ways
        return None if rng.random() < 0.03 else frame

    p = pairs(rate_bps=100_000_000, hook_ab=lossy, hook_ba=lossy, rto_ns=40 * MS).start()
    sizes = [1, 1024, 1025, 70_000, 200_000]
    remote = p.b.register_mr(1 << 20, buf=pattern(1 << 20, 3))
    local = p.a.register_mr(1 << 20)
    wsrc = p.a.register_mr(50_000, buf=pattern(50_000, 4))
    wdst = p.b.register_mr(50_000)

    def post():
        off = 0
        for i, n in enumerate(sizes):
            p.a.post_read(p.qa, i, (local, off, n), remote.addr + off, remote.rkey)
            if i == 2:                     # a WRITE between READs on the same QP
                p.a.post_write(p.qa, 100, (wsrc, 0, 50_000), wdst.addr, wdst.rkey)
            off += n
    p.call(p.a, post)
    done = lambda ca, cb: sum(c.opcode != WcOpcode.RECV_RDMA_WRITE for c in ca) == 6  # noqa
    assert p.wait(done, 30), (p.a.stats, p.b.stats)
    cs = [c for c in p.cq[p.a]]
    assert [c.wr_id for c in cs] == [0, 1, 2, 100, 3, 4]          # completions in order
    assert all(c.status == WcStatus.SUCCESS for c in cs)
    total = sum(sizes)
    assert local.buf[:total] == remote.buf[:total] and wdst.buf == wsrc.buf
    assert p.a.stats.read_rewinds + p.a.stats.timeouts > 0        # loss was recovered
    assert p.a.stats.rx_read_responses >= sum(-(-n // 1024) for n in sizes)


@needs_root
@pytest.mark.parametrize("lossy", [False, True], ids=["clean", "2pct_loss"])
def test_read_over_veth(veth, lossy):  # noqa: F811
    size = 1 << 20
    rate = 50_000_000
    if lossy:
        add_loss(veth, "a", one_in=50)     # READ requests (and WRITE data) lost
        add_loss(veth, "b", one_in=50)     # READ responses and ACKs lost
    p = VethPair(veth, rate, rto_ns=40 * MS if lossy else 300 * MS)
    try:
        src = p.b.register_mr(size, buf=pattern(size, 9))
        dst = p.a.register_mr(size)
        p.start()
        p.call(p.a, lambda: p.a.post_read(p.qa, 1, (dst, 0, size), src.addr, src.rkey))
        assert p.wait(lambda ca, cb: ca, 30), (p.a.stats, p.b.stats)
        c = p.cq[p.a][0]
        assert c.opcode == WcOpcode.RDMA_READ and c.status == WcStatus.SUCCESS
        assert dst.buf == src.buf
        # the responses went at the link rate, no faster (holds at any load)
        ideal = (size // 1024) * (wire.ROCE_HDR_BYTES + 1024 + wire.ICRC_BYTES + wire.WIRE_OVERHEAD_BYTES) * 8e9 / rate
        assert c.complete_ns - c.post_ns >= 0.95 * ideal
        if lossy:
            assert p.b.stats.tx_retransmits > 0
            assert p.a.stats.read_rewinds > 0 or p.a.stats.timeouts > 0
        else:
            assert p.b.stats.tx_read_responses == size // 1024
            assert p.a.stats.rx_data_payload_bytes == size       # each byte placed once
    finally:
        p.close()


def test_read_responses_obey_pfc(solos):  # noqa: F811
    rate = 20_000_000
    s = solos(rate_bps=rate, dcqcn={"cnp_interval_us": None})
    size = 512 * 1024                      # 512 responses, ~220 ms at 20 Mbit/s
    disk = s.nic.register_mr(size, addr=1 << 20, rkey=10, buf=pattern(size, 5))
    tpl = roce.FrameTemplate(MAC_B, MAC_A, IP_B, IP_A, 1000 + QPN_B, QPN_A)
    s.start()
    s.peer.send(bytes(tpl.build(roce.RC_READ_REQUEST, 0, reth=(disk.addr, 10, size))))
    resp = lambda: s.sent("data")          # noqa: E731  (READ responses)
    assert s.wait(lambda: len(resp()) >= 5)
    quanta = 4000                          # 102.4 ms at 20 Mbit/s
    pause_ns = quanta * 512 * 1e9 / rate
    s.peer.send(pfc_frame({3: quanta}))
    assert s.wait(lambda: s.nic.stats.pfc_rx == 1)
    t_p = s.logs.pfc_rows[-1][0]
    # start times: a response serialized before the pause still leaves
    ft = s.nic.frame_time_ns
    starts = lambda: [t - ft(len(f)) for t, f in resp()]   # noqa: E731
    assert s.wait(lambda: any(t > t_p + pause_ns for t in starts()), 1.0)
    assert [t for t in starts() if t_p < t < t_p + pause_ns] == []
    after = min(t for t in starts() if t > t_p)
    assert 0 <= after - (t_p + pause_ns) <= 10
    assert s.wait(lambda: len(resp()) == 512, 2.0)
    got = b"".join(bytes(parse_roce(f).payload) for _, f in resp())
    assert got == disk.buf
    assert _ops(resp()[:1]) == [0x0D] and _ops(resp()[-1:]) == [0x0F]
    assert [parse_roce(f).psn for _, f in resp()] == list(range(512))
