"""S servers x G GPUs' NICs for collective tests (no tests here): NIC g of
server 0 and NIC g of server 1 joined by a Unix socket pair, as one rail.
Global rank s*G + g has IP 10.9.g.(s+1) (and LID s*G + g + 1 on
InfiniBand). ``clock``: the NICs' (a ``ManualClock`` makes a test
deterministic and free of wall time)."""
from __future__ import annotations

import socket

from tests.nics import ib_nic, roce_nic
from emulator.nic.nic import RoceNic
from emulator.clock import MONOTONIC, Clock


def rail_nic_pairs(G: int, rate_bps: int, clock: Clock = MONOTONIC, ib: bool = False
                   ) -> tuple[dict[tuple[int, int], RoceNic], dict[int, str]]:
    """({(server, gpu): RoceNic} for 2 servers, {rank: ip}). ``ib``: IbNics,
    HCA to HCA (each one's flow control is the other's credit)."""
    S = 2
    macs = {(s, g): f"02:00:00:00:{s:02x}:{g:02x}" for s in range(S) for g in range(G)}
    ips = {s * G + g: f"10.9.{g}.{s + 1}" for s in range(S) for g in range(G)}
    lids = {ip: rank + 1 for rank, ip in ips.items()}
    make = ib_nic if ib else roce_nic

    def ib_kw(rank: int) -> dict:
        return {"lid": rank + 1, "lids": lids} if ib else {}

    nics = {}
    for g in range(G):
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        for s, sk in ((0, a), (1, b)):
            nics[(s, g)] = make(None, macs[(s, g)], ips[s * G + g], macs[(1 - s, g)],
                                rate_bps=rate_bps, sock=sk, clock=clock, **ib_kw(s * G + g))
    return nics, ips
