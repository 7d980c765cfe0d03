"""Send N copies of one RoCEv2-sized UDP frame at a target rate from a raw socket.

Runs inside a Mininet host (``bench/forwarding.py`` starts it). Prints one
JSON line: frames sent and the achieved rate. Varying the UDP source port per
frame (``--flows``) exercises ECMP and the switch's flow cache like many QPs.
"""
from __future__ import annotations

import argparse
import json
import socket
import time

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ifname", required=True)
    ap.add_argument("--src-mac", required=True)
    ap.add_argument("--dst-mac", required=True)
    ap.add_argument("--src-ip", required=True)
    ap.add_argument("--dst-ip", required=True)
    ap.add_argument("--frame-bytes", type=int, default=1000)
    ap.add_argument("--pps", type=float, default=0, help="0: as fast as possible")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--flows", type=int, default=16)
    a = ap.parse_args()

    frames = []
    for i in range(a.flows):
        pkt = (Ether(src=a.src_mac, dst=a.dst_mac) / IP(src=a.src_ip, dst=a.dst_ip, tos=0x02)
               / UDP(sport=0xC000 + i, dport=4791, chksum=0))
        pad = a.frame_bytes - len(pkt)
        frames.append(bytes(pkt / (b"\0" * max(0, pad))))
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.bind((a.ifname, 0))
    send = sock.send
    sent = errors = 0
    t0 = time.perf_counter()
    end = t0 + a.seconds
    batch = 32
    interval = batch / a.pps if a.pps else 0.0
    next_t = t0
    nflows = a.flows
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        if interval and now < next_t:
            time.sleep(min(next_t - now, 0.001))
            continue
        for _ in range(batch):
            try:
                send(frames[sent % nflows])
                sent += 1
            except OSError:
                errors += 1
        next_t += interval
    elapsed = time.perf_counter() - t0
    print(json.dumps({"sent": sent, "errors": errors, "seconds": elapsed, "pps": sent / elapsed}))


if __name__ == "__main__":
    main()
