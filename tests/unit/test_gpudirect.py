"""GPUDirect RDMA off: a WRITE from GPU memory waits for the device-to-host
staging copy before it is posted, and the receiver's completion for GPU
memory waits for the host-to-device copy; on: no staging. Two NICs over an
AF_UNIX socketpair, real frames."""
from __future__ import annotations

import random
import socket
import threading
import time

from emulator.agents.gpudirect import GpuNic
from emulator.agents.nic import RoceNic, WcOpcode, WcStatus

from .test_nic_core import IP_A, IP_B, MAC_A, MAC_B, QPN_A, QPN_B

MS = 1_000_000
SIZE = 256 * 1024
RATE = 200_000_000
STAGE_RATE = 200_000_000           # 10.5 ms for SIZE
STAGE_LAT_NS = 20 * MS
COPY_NS = STAGE_LAT_NS + SIZE * 8e9 / STAGE_RATE


def run_write(gpudirect: bool):
    sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for s in (sa, sb):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    nics = [RoceNic(None, MAC_A, IP_A, MAC_B, rate_bps=RATE, sock=sa, rto_ns=300 * MS),
            RoceNic(None, MAC_B, IP_B, MAC_A, rate_bps=RATE, sock=sb, rto_ns=300 * MS)]
    qa = nics[0].create_qp(QPN_A, IP_B, QPN_B)
    nics[1].create_qp(QPN_B, IP_A, QPN_A)
    g = [GpuNic(n, gpudirect, STAGE_RATE, STAGE_LAT_NS) for n in nics]
    src = g[0].register_gpu_mr(SIZE, buf=bytearray(random.Random(2).randbytes(SIZE)))
    dst = g[1].register_gpu_mr(SIZE)
    got = [[], []]
    stop = [False]
    todo = []
    t_post = [0]

    def loop(i):
        while not stop[0]:
            if i == 0 and todo:           # post from the NIC's own thread
                t_post[0] = time.monotonic_ns()
                todo.pop()()
            g[i].run_once(0.002)
            for c in g[i].poll_cq():
                got[i].append((time.monotonic_ns(), c))
    ts = [threading.Thread(target=loop, args=(i,), daemon=True) for i in (0, 1)]
    try:
        for t in ts:
            t.start()
        time.sleep(0.05)                  # both loops running before the post
        todo.append(lambda: g[0].post_write(qa, 1, (src, 0, SIZE), dst.addr, dst.rkey))
        end = time.monotonic() + 10
        while time.monotonic() < end and not (got[0] and got[1]):
            time.sleep(0.002)
    finally:
        stop[0] = True
        for t in ts:
            t.join(2)
        for n in nics:
            n.close()
    t_post = t_post[0]
    assert got[0] and got[1], "no completion"
    (t_tx, ctx), (t_rx, crx) = got[0][0], got[1][0]
    assert ctx.opcode == WcOpcode.RDMA_WRITE and ctx.status == WcStatus.SUCCESS
    assert crx.opcode == WcOpcode.RECV_RDMA_WRITE and dst.buf == src.buf
    return {"fct_ns": ctx.complete_ns - ctx.post_ns, "post_ns": ctx.post_ns, "t_post": t_post,
            "rx_first_ns": crx.first_rx_ns, "rx_complete_ns": crx.complete_ns,
            "rx_polled_ns": t_rx, "tx_first_ns": None}


def test_gpudirect_off_adds_the_staging_copies():
    on = run_write(True)
    off = run_write(False)
    # the sender: the post waited for the D2H copy; the FCT counts from the ask
    assert abs(off["post_ns"] - off["t_post"]) < 2 * MS
    # nothing reached the receiver before the D2H copy could have finished
    assert off["rx_first_ns"] - off["t_post"] >= COPY_NS
    assert on["rx_first_ns"] - on["t_post"] < 0.3 * COPY_NS
    wire_ns = SIZE * 8e9 / RATE
    assert off["fct_ns"] >= COPY_NS + 0.9 * wire_ns
    extra_tx = off["fct_ns"] - on["fct_ns"]       # noisy: both FCTs carry loop lag
    assert 0.7 * COPY_NS <= extra_tx <= COPY_NS + 25 * MS, (extra_tx, COPY_NS)
    # the receiver: completion = data placed + H2D copy, not handed out earlier
    rx_span_on = on["rx_complete_ns"] - on["rx_first_ns"]
    rx_span_off = off["rx_complete_ns"] - off["rx_first_ns"]
    assert rx_span_on >= 0.9 * wire_ns
    assert rx_span_off >= COPY_NS + 0.9 * wire_ns
    assert rx_span_off - rx_span_on >= 0.7 * COPY_NS
    assert off["rx_polled_ns"] >= off["rx_complete_ns"]
