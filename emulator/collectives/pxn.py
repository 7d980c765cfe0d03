"""NCCL's PXN (``pxn: true``): inter-server traffic leaves by the NIC on
the receiver's rail.

Without it, GPU g of server A sends to GPU h of server B from its own NIC
g: when h != g the message crosses rails (rail g's leaf, a spine, rail h's
leaf). With PXN (NCCL >= 2.12, NCCL_PXN_DISABLE=0; NVIDIA's "Doubling
all2all Performance with NCCL 2.12") g hands the message over NVLink to GPU
h of its own server, a proxy, which sends it on NIC h: rail h from end to
end, no spine. ``reroute`` rewrites built schedules that way:

* the sender's RDMA send to B.h becomes an NVLink send to A.h;
* A.h receives it into a relay buffer (``RELAY_BUF``, ``RELAY_SLOTS``
  regions per relay connection, reused in turn as NCCL's FIFO steps) and
  sends it on to B.h;
* B.h's receive from A.g becomes a receive from A.h.

Each relayed (origin GPU, channel) pair has a channel of its own
(``relay_channel``), so its messages match FIFO by connection as every
other transfer (``schedule.py``) and never mix with A.h's own ones.
"""
from __future__ import annotations

from .schedule import CHANNEL_STRIDE, NVLINK, RDMA, RECV, SEND, Op

RELAY_BUF = "pxn"
RELAY_SLOTS = 8                 # regions per relay connection (NCCL_STEPS)
# a QP of rank r towards p on channel c is 0x800 + p + c x CHANNEL_STRIDE
# (``engine.QPN_BASE``, ``schedule.conn_key``): a QPN has 24 bits
MAX_CHANNEL = ((1 << 24) - 0x800) // CHANNEL_STRIDE - 1


def relay_channel(chan: int, origin_gpu: int, chans: int) -> int:
    """The channel that relays ``chan``'s messages of a server's GPU
    ``origin_gpu`` (``chans``: the channels the schedule may use, 0..chans-1)."""
    return chans * (1 + origin_gpu) + chan


def check_fits(gpus_per_server: int, chans: int) -> None:
    top = relay_channel(chans - 1, gpus_per_server - 1, chans)
    if top > MAX_CHANNEL:
        raise ValueError(f"pxn with {chans} channels x {gpus_per_server} GPUs needs channel "
                         f"{top}: more QPs than a NIC numbers (at most channel {MAX_CHANNEL})")


def _rerouted(me: int, op: Op, G: int) -> bool:
    return op.kind in (SEND, RECV) and op.link == RDMA and op.peer % G != me % G


def reroute(sch: dict, G: int, chans: int) -> None:
    """Rewrite ``sch`` (every rank's schedule, not yet finalized) for PXN:
    ``chans`` bounds the channels its ops use."""
    check_fits(G, chans)
    relays: dict[int, list[tuple[int, int, int, int]]] = {}   # proxy -> (origin, dest, chan, bytes)
    for r in sorted(sch):
        for i, op in enumerate(sch[r].ops):
            if not _rerouted(r, op, G):
                continue
            proxy_gpu = op.peer % G if op.kind == SEND else r % G
            origin = r if op.kind == SEND else op.peer
            rc = relay_channel(op.chan, origin % G, chans)
            if op.kind == SEND:
                proxy = r - r % G + proxy_gpu
                sch[r].ops[i] = Op(SEND, proxy, NVLINK, op.buf, op.off, op.nbytes, chan=rc)
                relays.setdefault(proxy, []).append((r, op.peer, rc, op.nbytes))
            else:
                proxy = op.peer - op.peer % G + proxy_gpu
                sch[r].ops[i] = Op(RECV, proxy, RDMA, op.buf, op.off, op.nbytes,
                                   reduce=op.reduce, chan=rc)
    for proxy, msgs in relays.items():
        _relay(sch[proxy], msgs)


def _relay(s, msgs) -> None:
    """The proxy's ops: each message received from its origin into a region
    of ``RELAY_BUF`` and sent on to its destination, in the origin's order."""
    conns: dict[tuple[int, int], list[int]] = {}           # (origin, chan) -> [bytes, count]
    for origin, _dest, rc, nb in msgs:
        c = conns.setdefault((origin, rc), [0, 0])
        c[0] = max(c[0], nb)
    base, at = {}, 0
    for key, (nb, _) in conns.items():
        base[key] = at
        at += RELAY_SLOTS * nb
    for origin, dest, rc, nb in msgs:
        c = conns[(origin, rc)]
        off = base[(origin, rc)] + (c[1] % RELAY_SLOTS) * c[0]
        c[1] += 1
        s.ops.append(Op(RECV, origin, NVLINK, RELAY_BUF, off, nb, chan=rc))
        s.ops.append(Op(SEND, dest, RDMA, RELAY_BUF, off, nb, chan=rc))
    s.buffers[RELAY_BUF] = at
