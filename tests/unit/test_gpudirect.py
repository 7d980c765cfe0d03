"""GPUDirect RDMA off: a WRITE from GPU memory waits for the device-to-host
staging copy before it is posted, and the receiver's completion for GPU
memory waits for the host-to-device copy; on: no staging. Two NICs over an
AF_UNIX socketpair, real frames, one thread, one manual clock: every
difference between on and off is exactly the copies' time."""
from __future__ import annotations

import math
import random
import socket

from tests.nics import roce_nic
from emulator.agents.gpudirect import GpuNic, StagingCopies
from emulator.nic.nic import RoceNic, WcOpcode, WcStatus
from emulator.clock import ManualClock

from .test_nic_core import IP_A, IP_B, MAC_A, MAC_B, QPN_A, QPN_B

MS = 1_000_000
SIZE = 256 * 1024
RATE = 200_000_000
STAGE_RATE = 200_000_000           # 10.49 ms for SIZE
STAGE_LAT_NS = 20 * MS
COPY_NS = STAGE_LAT_NS + SIZE * 8 * 10**9 // STAGE_RATE    # a whole number of ns here
T_POST = 3 * MS


def run_write(gpudirect: bool) -> dict:
    clock = ManualClock()
    sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for s in (sa, sb):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    nics = [roce_nic(None, MAC_A, IP_A, MAC_B, rate_bps=RATE, sock=sa, rto_ns=300 * MS, clock=clock),
            roce_nic(None, MAC_B, IP_B, MAC_A, rate_bps=RATE, sock=sb, rto_ns=300 * MS, clock=clock)]
    try:
        qa = nics[0].create_qp(QPN_A, IP_B, QPN_B)
        nics[1].create_qp(QPN_B, IP_A, QPN_A)
        g = [GpuNic(n, gpudirect, STAGE_RATE, STAGE_LAT_NS) for n in nics]
        src = g[0].register_gpu_mr(SIZE, buf=bytearray(random.Random(2).randbytes(SIZE)))
        dst = g[1].register_gpu_mr(SIZE)
        fds = [fd for n in nics for fd in n.rx_fds]
        got = [[], []]
        posted = False
        while not (got[0] and got[1]):
            now = clock.now_ns()
            if not posted and now >= T_POST:
                g[0].post_write(qa, 1, (src, 0, SIZE), dst.addr, dst.rkey)
                posted = True
            for i in (0, 1):
                g[i].run_once(0)                    # what is due now; no wait
                got[i] += [(clock.now_ns(), c) for c in g[i].poll_cq()]
            now = clock.now_ns()
            assert now < T_POST + 10 * COPY_NS, "no completion"
            # sleep (on the manual clock) until the earliest thing due
            wake = min([n.next_wake_ns(now, now + 10 * MS) for n in nics]
                       + [math.ceil(t) for t in (x.next_event_ns() for x in g) if t is not None]
                       + ([T_POST] if not posted else []))
            clock.wait_readable(fds, max(wake, now))
        staged = g[0].staged_bytes + g[1].staged_bytes
    finally:
        for n in nics:
            n.close()
    (t_tx, ctx), (t_rx, crx) = got[0][0], got[1][0]
    assert ctx.opcode == WcOpcode.RDMA_WRITE and ctx.status == WcStatus.SUCCESS
    assert crx.opcode == WcOpcode.RECV_RDMA_WRITE and dst.buf == src.buf
    return {"post_ns": ctx.post_ns, "fct_ns": ctx.complete_ns - ctx.post_ns,
            "tx_polled_ns": t_tx, "tx_complete_ns": ctx.complete_ns,
            "rx_first_ns": crx.first_rx_ns, "rx_complete_ns": crx.complete_ns,
            "rx_unix_ns": crx.complete_unix_ns - clock.unix_epoch_ns, "rx_polled_ns": t_rx,
            "staged_bytes": staged}


def test_gpudirect_off_adds_exactly_the_staging_copies():
    on = run_write(True)
    off = run_write(False)
    wire_ns = SIZE * 8e9 / RATE
    assert on["staged_bytes"] == 0 and off["staged_bytes"] == 2 * SIZE
    # the FCT counts from the ask, before the D2H copy
    assert on["post_ns"] == off["post_ns"] == T_POST
    assert on["fct_ns"] >= wire_ns
    # the sender: the post waited for the D2H copy, and all else is unchanged
    assert off["rx_first_ns"] - on["rx_first_ns"] == COPY_NS
    assert off["fct_ns"] - on["fct_ns"] == COPY_NS
    # the receiver: completion = data placed (a copy later) + the H2D copy
    assert off["rx_complete_ns"] - on["rx_complete_ns"] == 2 * COPY_NS
    assert off["rx_complete_ns"] - off["rx_first_ns"] == \
        on["rx_complete_ns"] - on["rx_first_ns"] + COPY_NS
    assert off["rx_unix_ns"] == off["rx_complete_ns"]     # its Unix stamp moved with it
    # completions are handed out when they are usable, not a ns before or after
    for r in (on, off):
        assert r["rx_polled_ns"] == r["rx_complete_ns"]
        assert r["tx_polled_ns"] == r["tx_complete_ns"]


def test_staging_copies_queue_per_direction():
    cp = StagingCopies(False, staging_rate_bps=8e9, staging_latency_ns=100)   # 1 byte/ns
    assert cp.copy_ns(1000) == 1100
    assert cp.ready_ns(1000, "tx", 50) == 1150            # a question: books nothing
    assert cp.stage(1000, "tx", 50) == 1150
    assert cp.stage(10, "tx", 60) == 1150 + 110           # behind the first copy
    assert cp.stage(10, "rx", 60) == 60 + 110             # the other engine is free
    assert cp.stage(10, "tx", 5000) == 5110               # idle engine: starts at once
    assert cp.staged_bytes == 1030
    on = StagingCopies(True)
    assert on.stage(10**6, "tx", 7) == 7 and on.copy_ns(10**6) == 0 and on.staged_bytes == 0


def test_a_wait_reaches_a_copy_that_ends_inside_a_ns():
    """A copy's end is fractional: ``run_once`` with a timeout wakes at its
    ceiling, where the post is due -- not a ns early, where nothing is due
    and a timeout under 1 ns waits for nothing (the loop of an agent spun at
    that instant forever on a clock that moves only in waits)."""
    clock = ManualClock()
    sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    nics = [roce_nic(None, MAC_A, IP_A, MAC_B, rate_bps=RATE, sock=sa, clock=clock),
            roce_nic(None, MAC_B, IP_B, MAC_A, rate_bps=RATE, sock=sb, clock=clock)]
    try:
        qa = nics[0].create_qp(QPN_A, IP_B, QPN_B)
        g = GpuNic(nics[0], False, staging_rate_bps=3e9, staging_latency_ns=1000)
        src = g.register_gpu_mr(1000)
        g.post_write(qa, 1, (src, 0, 1000), 0x1000, 0x55)
        end = g.next_event_ns()
        assert end == 1000 + 1000 * 8e9 / 3e9 and end != int(end)     # 3666.66... ns
        for _ in range(5):
            if g.next_event_ns() is None:
                break
            g.run_once(0.01)
        assert g.next_event_ns() is None                  # posted to the NIC
        assert clock.now_ns() == math.ceil(end)
    finally:
        for n in nics:
            n.close()
