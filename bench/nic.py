"""Throughput of the software RoCEv2 NIC's hot paths (pacer, transmit,
receive, responder placement, ACKs) without a network: two ``RoceNic``s
joined by an ``AF_UNIX`` datagram socket pair, on the real clock, at a link
rate far above what Python reaches (so the pacer never waits), driven by one
loop that runs each NIC in turn. One RDMA WRITE of ``--mib`` MiB.

Prints one line per run and the median: data packets/s and payload MB/s.
Compare medians before and after a change to the NIC (the machine is shared:
single runs are noisy).

    .venv/bin/python bench/nic.py [--mib 64] [--mtu 1024] [--runs 3]
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.nic.nic import RoceNic, WcStatus  # noqa: E402
from emulator.schema.nic import NicConfig  # noqa: E402

MAC_A, MAC_B = "02:00:00:00:0a:01", "02:00:00:00:0b:01"
IP_A, IP_B = "10.0.1.1", "10.0.2.1"


def one_run(size_bytes: int, mtu_bytes: int) -> tuple[float, int]:
    """Seconds for one WRITE of ``size_bytes``, and its data packets."""
    sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for s in (sa, sb):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    kw = dict(rate_bps=10**13, mtu_bytes=mtu_bytes, rto_ns=10**10, timer_slack_ns=None)
    a = RoceNic(NicConfig(mac=MAC_A, ip=IP_A, gateway_mac=MAC_B, **kw), sock=sa)
    b = RoceNic(NicConfig(mac=MAC_B, ip=IP_B, gateway_mac=MAC_A, **kw), sock=sb)
    try:
        qa = a.create_qp(0x11, IP_B, 0x22)
        b.create_qp(0x22, IP_A, 0x11)
        src = a.register_mr(size_bytes)
        b.register_mr(size_bytes, addr=0, rkey=9)
        t0 = time.perf_counter()
        a.post_write(qa, 1, (src, 0, size_bytes), 0, 9)
        done = []
        while not done:
            a.run_once(0)
            b.run_once(0)
            done = a.poll_cq()
        el = time.perf_counter() - t0
        assert done[0].status == WcStatus.SUCCESS, done
        return el, a.stats.tx_data_packets
    finally:
        a.close()
        b.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--mtu", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    size = args.mib << 20
    pps, mbps = [], []
    for i in range(args.runs):
        el, n = one_run(size, args.mtu)
        pps.append(n / el)
        mbps.append(size / el / 1e6)
        print(f"run {i}: {el:.2f} s  {n / el:,.0f} pkt/s  {size / el / 1e6:.1f} MB/s", flush=True)
    print(f"median: {statistics.median(pps):,.0f} pkt/s  {statistics.median(mbps):.1f} MB/s "
          f"({args.mib} MiB WRITE, MTU {args.mtu})")


if __name__ == "__main__":
    main()
