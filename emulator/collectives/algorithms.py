"""Collective algorithms as schedules (``schedule.RankSchedule`` per rank).

Ranks are global: rank = server * gpus_per_server + local GPU index. A
transfer between two GPUs of the same server goes over NVLink, otherwise
over RDMA between GPU i's NIC and the peer GPU's NIC (rail-aligned when the
local indices are equal).

* ``ring``: one ring over all ranks, in "snake" order (server 0's GPUs
  0..G-1, server 1's G-1..0, ...) so that every server-to-server hop joins
  GPUs of the same local index -- the same rail -- when the server count is
  even (NCCL picks rings the same way to keep traffic on rails).
  all_reduce = reduce-scatter then all-gather, n-1 steps each;
  all_gather / reduce_scatter: one of the halves.
* ``pairwise`` all_to_all: in step s = 1..n-1 rank r sends block r+s to rank
  r+s and receives block r-s from rank r-s.
* ``hierarchical`` all_reduce (S servers x G GPUs): reduce-scatter inside each
  server over NVLink (a ring of the G GPUs; GPU g ends with chunk g summed
  over its server), a ring all-reduce of chunk g among the S GPUs with local
  index g (one ring per rail, RDMA), then an all-gather inside each server.
* ``broadcast`` / ``reduce``: the ring less one hop, a chain from (to) the
  root, each rank forwarding (adding to) each slice as it arrives.
* ``send_recv``: nccl-tests' sendrecv_perf, rank r sends to r + shift (a
  pipeline stage's peer: shift G); ``all_to_allv``: ``pairwise`` with
  nccl-tests' alltoallv_perf sizes (``alltoallv_bytes``).
* ``channels``: ring c on part c of the data (``ring_order``).
* ``tree`` all_reduce: NCCL's double binary tree (``tree.py``); ``pxn``:
  cross-rail sends relayed on the receiver's rail (``pxn.py``).

Each chunk transfer is cut into slices of at most ``slice_bytes``.
"""
from __future__ import annotations

from dataclasses import dataclass

from emulator.schema.workload import MAX_CHANNELS

from . import pxn, tree
from .dtypes import elem_bytes
from .schedule import (
    COPY, ELEM_BYTES, LOCAL, NVLINK, RDMA, RECV, SEND, Op, RankSchedule, chunk_bytes, finalize,
    slices,
)

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
               "send_recv", "all_to_allv")
ALGORITHMS = ("ring", "hierarchical", "tree")
# the algorithms that run all_reduce only (NCCL runs its trees for all_reduce alone)
ALL_REDUCE_ONLY = ("hierarchical", "tree")
ROOTED = ("broadcast", "reduce")
# ring collectives that split their data over ``channels`` rings (NCCL's channels)
CHANNELED = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
# an in-place run keeps their schedule and checks nothing, as nccl-tests
# (whose in-place run sends and receives in one buffer: the data is clobbered)
OWN_BUFFERS = ("all_to_all", "send_recv", "all_to_allv")


@dataclass(frozen=True)
class Params:
    """What a collective takes besides its size: ``root`` (broadcast,
    reduce), ``shift`` (send_recv), ``spread`` (all_to_allv: nccl-tests'
    NCCL_TESTS_ALLTOALLV_SPREAD, 0 uniform .. 1 distance-weighted), the
    element type and the reduction op (nccl-tests' -d, -o; ``dtypes.py``),
    ``channels``: rings (trees) run side by side (``CHANNELED`` collectives,
    tree all_reduce), ``pxn``: NCCL's PXN (``pxn.py``)."""
    root: int = 0
    shift: int = 1
    spread: float = 1.0
    dtype: str = "float32"
    op: str = "sum"
    channels: int = 1
    pxn: bool = False


def alltoallv_bytes(n: int, size_bytes: int, spread: float, elem: int = ELEM_BYTES
                    ) -> list[list[int]]:
    """Bytes rank i sends rank j, [i][j], as nccl-tests' alltoallv_perf
    generates them (src/alltoallv.cu, AlltoAllvGetCollByteCount and
    AlltoAllvGetPeerBytesDistanceWeighted): ``size_bytes`` / n per peer on
    average, weighted by the distance (j - i) mod n, each rounded down to 16 B."""
    per_peer = (size_bytes // elem // n) & ~(16 // elem - 1)
    total = per_peer * n * elem
    if n == 1:
        return [[total & ~15]]
    sum_distances = n * (n - 1) // 2
    return [[int((1.0 - spread) * (total / n) + spread * (((j - i) % n) * total / sum_distances))
             & ~15 for j in range(n)] for i in range(n)]


def algbw_bytes(collective: str, n: int, size_bytes: int, params: Params = Params()) -> int:
    """What nccl-tests divides by the time for algbw: the size, except for
    all_to_allv the most bytes a rank sends or receives (AlltoAllvGetBw)."""
    if collective != "all_to_allv":
        return size_bytes
    m = alltoallv_bytes(n, size_bytes, params.spread, elem_bytes(params.dtype))
    return max(max(sum(row) for row in m), max(sum(col) for col in zip(*m)))


def link_kind(a: int, b: int, gpus_per_server: int) -> str:
    return NVLINK if a // gpus_per_server == b // gpus_per_server else RDMA


def ring_order(servers: int, gpus_per_server: int, chan: int = 0) -> list[int]:
    """The snake order with every server's GPUs rotated by ``chan``: ring c
    leaves an even server and enters the next on rail c-1, and goes back on
    rail c, so G channels spread the server-to-server hops over every rail."""
    out = []
    for s in range(servers):
        locs = [(chan + i) % gpus_per_server for i in range(gpus_per_server)]
        if s % 2:
            locs.reverse()
        out += [s * gpus_per_server + g for g in locs]
    return out


def snake_order(servers: int, gpus_per_server: int) -> list[int]:
    return ring_order(servers, gpus_per_server, 0)


def _ring_phase(scheds, order, chunks, buf, reduce, first, G, slice_bytes, chan=0):
    """n-1 ring steps over ranks ``order`` on ``chunks`` (indexed by ring
    position). Step s: position p sends chunk p+first-s to p+1 and receives
    chunk p+first-s-1 from p-1 (summing if ``reduce``). A reduce phase with
    ``first`` = f leaves position p owning chunk p+f+1; a copy phase
    distributes from position p owning chunk p+first."""
    n = len(order)
    for p, rank in enumerate(order):
        nxt, prv = order[(p + 1) % n], order[(p - 1) % n]
        ops = scheds[rank].ops
        for s in range(n - 1):
            so, sn = chunks[(p + first - s) % n]
            ro, rn = chunks[(p + first - s - 1) % n]
            # program order send-slice, recv-slice: a valid sequential order
            snd, rcv = slices(so, sn, slice_bytes), slices(ro, rn, slice_bytes)
            for k in range(max(len(snd), len(rcv))):
                if k < len(snd):
                    ops.append(Op(SEND, nxt, link_kind(rank, nxt, G), buf, *snd[k], chan=chan))
                if k < len(rcv):
                    ops.append(Op(RECV, prv, link_kind(rank, prv, G), buf, *rcv[k], reduce=reduce,
                                  chan=chan))


def _new(n, buffers):
    return {r: RankSchedule(r, dict(buffers(r))) for r in range(n)}


def build(collective: str, algorithm: str, servers: int, gpus_per_server: int, size_bytes: int,
          slice_bytes: int = 65536, params: Params = Params()) -> dict[int, RankSchedule]:
    """Schedules of every rank. ``size_bytes`` follows nccl-tests: the whole
    buffer of a rank for all_reduce, broadcast, reduce and send_recv, the
    gathered/unscattered total for all_gather / reduce_scatter, a rank's
    send buffer for all_to_all (all_to_allv: its average, ``alltoallv_bytes``)."""
    G, n = gpus_per_server, servers * gpus_per_server
    if collective not in COLLECTIVES or algorithm not in ALGORITHMS:
        raise ValueError(f"unknown collective/algorithm {collective}/{algorithm}")
    elem = elem_bytes(params.dtype)
    if size_bytes % elem or slice_bytes % elem or slice_bytes <= 0:
        raise ValueError(f"size_bytes and slice_bytes must be multiples of {elem} ({params.dtype})")
    count = size_bytes // elem
    if collective in ("all_gather", "reduce_scatter", "all_to_all") and count % n:
        raise ValueError(f"{collective}: {size_bytes} B is not a multiple of {elem} B x {n} ranks")
    if algorithm in ALL_REDUCE_ONLY and collective != "all_reduce":
        raise ValueError(f"{algorithm} is implemented for all_reduce only")
    if collective in ROOTED and not 0 <= params.root < n:
        raise ValueError(f"{collective}: root {params.root} is not one of the {n} ranks")
    if params.channels != 1 and not channeled(collective, algorithm):
        raise ValueError(f"channels: {collective} ({algorithm}) runs one channel")
    if not 1 <= params.channels <= MAX_CHANNELS:
        raise ValueError(f"channels: {params.channels} is not 1..{MAX_CHANNELS}")
    orders = [ring_order(servers, G, c) for c in range(params.channels)]
    if collective in _BUILDERS:
        sch = _BUILDERS[collective](orders, G, size_bytes, slice_bytes, params)
    else:
        sch = _build_symmetric(collective, algorithm, servers, G, size_bytes, slice_bytes, orders,
                               elem)
    if params.pxn:
        pxn.reroute(sch, G, 2 * params.channels)
    for s in sch.values():
        s.dtype, s.redop = params.dtype, params.op
        finalize(s)
    return sch


def channeled(collective: str, algorithm: str) -> bool:
    """Whether ``channels`` splits the collective's data: over rings
    (``CHANNELED``) or trees (all_reduce)."""
    return ((algorithm == "ring" and collective in CHANNELED)
            or (algorithm == "tree" and collective == "all_reduce"))


def _build_symmetric(collective, algorithm, servers, G, size_bytes, slice_bytes, orders, elem):
    """all_reduce, all_gather, reduce_scatter, all_to_all (``build``); ring
    channel c runs over ``orders[c]`` on part c of the data (of every rank's
    block, for all_gather / reduce_scatter)."""
    n = servers * G
    count = size_bytes // elem
    per_rank = chunk_bytes(count, n, 0, elem)  # nccl-tests: rank r's share is block r

    def part(block, c):                         # channel c's part of a block
        return chunk_bytes(block[1] // elem, len(orders), block[0], elem)[c]
    if collective == "all_reduce":
        sch = _new(n, lambda r: {"in": size_bytes, "out": size_bytes})
        for r in range(n):
            sch[r].ops.append(Op(COPY, -1, LOCAL, "out", 0, size_bytes, src_buf="in"))
        if algorithm == "ring":
            for c, order in enumerate(orders):
                po, pn = part((0, size_bytes), c)
                chunks = chunk_bytes(pn // elem, n, po, elem)
                _ring_phase(sch, order, chunks, "out", True, 0, G, slice_bytes, c)
                _ring_phase(sch, order, chunks, "out", False, 1, G, slice_bytes, c)
        elif algorithm == "tree":
            tree.all_reduce(sch, servers, G, count, elem, slice_bytes, len(orders))
        else:
            _hierarchical(sch, servers, G, count, slice_bytes, elem)
    elif collective == "all_gather":
        share = size_bytes // n
        sch = _new(n, lambda r: {"in": share, "out": size_bytes})
        for r in range(n):
            sch[r].ops.append(Op(COPY, -1, LOCAL, "out", per_rank[r][0], share, src_buf="in"))
        for c, order in enumerate(orders):
            _ring_phase(sch, order, [part(per_rank[r], c) for r in order], "out", False, 0, G,
                        slice_bytes, c)
    elif collective == "reduce_scatter":
        share = size_bytes // n
        sch = _new(n, lambda r: {"in": size_bytes, "tmp": size_bytes, "out": share})
        for r in range(n):
            sch[r].ops.append(Op(COPY, -1, LOCAL, "tmp", 0, size_bytes, src_buf="in"))
        # first = -1: position p ends owning chunk p, which is its own rank's block
        for c, order in enumerate(orders):
            _ring_phase(sch, order, [part(per_rank[r], c) for r in order], "tmp", True, -1, G,
                        slice_bytes, c)
        for r in range(n):
            sch[r].ops.append(Op(COPY, -1, LOCAL, "out", 0, share, src_buf="tmp",
                                 src_off=per_rank[r][0]))
    else:
        sch = _new(n, lambda r: {"in": size_bytes, "out": size_bytes})
        _pairwise(sch, G, [[size_bytes // n] * n] * n, slice_bytes)
    return sch


def _exchange(ops, me, to, frm, snd, rcv, G, send_buf, recv_buf):
    """Interleaved slices: ``snd`` [(off, nbytes)] of ``send_buf`` to ``to``,
    ``rcv`` of ``recv_buf`` from ``frm`` (program order send, recv: a valid
    sequential order)."""
    for k in range(max(len(snd), len(rcv))):
        if k < len(snd):
            ops.append(Op(SEND, to, link_kind(me, to, G), send_buf, *snd[k]))
        if k < len(rcv):
            ops.append(Op(RECV, frm, link_kind(me, frm, G), recv_buf, *rcv[k]))


def _displacements(sizes: list[int]) -> list[int]:
    out, at = [], 0
    for b in sizes:
        out.append(at)
        at += b
    return out


def _pairwise(sch, G, m, slice_bytes):
    """all_to_all(v): rank r sends m[r][j] bytes to every j (its ``in`` in
    rank order), receives m[i][r] from every i (into ``out`` in rank order);
    in step s = 1..n-1 it sends to r+s and receives from r-s."""
    n = len(m)
    for r in range(n):
        send_at = _displacements(m[r])
        recv_at = _displacements([m[i][r] for i in range(n)])
        ops = sch[r].ops
        if m[r][r]:
            ops.append(Op(COPY, -1, LOCAL, "out", recv_at[r], m[r][r], src_buf="in",
                          src_off=send_at[r]))
        for s in range(1, n):
            to, frm = (r + s) % n, (r - s) % n
            _exchange(ops, r, to, frm, slices(send_at[to], m[r][to], slice_bytes),
                      slices(recv_at[frm], m[frm][r], slice_bytes), G, "in", "out")


def _all_to_allv(orders, G, size_bytes, slice_bytes, params):
    n = len(orders[0])
    m = alltoallv_bytes(n, size_bytes, params.spread, elem_bytes(params.dtype))
    sch = _new(n, lambda r: {"in": sum(m[r]), "out": sum(m[i][r] for i in range(n))})
    _pairwise(sch, G, m, slice_bytes)
    return sch


def _send_recv(orders, G, size_bytes, slice_bytes, params):
    n = len(orders[0])
    sch = _new(n, lambda r: {"in": size_bytes, "out": size_bytes})
    for r in range(n):
        to, frm = (r + params.shift) % n, (r - params.shift) % n
        if to == r:                         # one rank (or shift n): to itself, a copy
            sch[r].ops.append(Op(COPY, -1, LOCAL, "out", 0, size_bytes, src_buf="in"))
            continue
        cut = slices(0, size_bytes, slice_bytes)
        _exchange(sch[r].ops, r, to, frm, cut, cut, G, "in", "out")
    return sch


def _chain(order, root, towards_root):
    """The ring from the root (broadcast) or to it (reduce), one hop left out."""
    p = order.index(root)
    return order[p + 1:] + order[:p + 1] if towards_root else order[p:] + order[:p]


def _channel_parts(size_bytes, params):
    """Part c of the buffer, channel c's: (byte offset, bytes)."""
    elem = elem_bytes(params.dtype)
    return chunk_bytes(size_bytes // elem, params.channels, 0, elem)


def _broadcast(orders, G, size_bytes, slice_bytes, params):
    """The root copies its input to its output and sends the input (NCCL
    reads the root's send buffer); every other rank receives each slice into
    its output and forwards it from there. Channel c: part c along ring c."""
    n = len(orders[0])
    sch = _new(n, lambda r: {"in": size_bytes, "out": size_bytes})
    sch[params.root].ops.append(Op(COPY, -1, LOCAL, "out", 0, size_bytes, src_buf="in"))
    for c, (order, (po, pn)) in enumerate(zip(orders, _channel_parts(size_bytes, params))):
        chain = _chain(order, params.root, False)
        for p, rank in enumerate(chain):
            ops = sch[rank].ops
            for off, nb in slices(po, pn, slice_bytes):
                if p > 0:
                    ops.append(Op(RECV, chain[p - 1], link_kind(rank, chain[p - 1], G), "out",
                                  off, nb, chan=c))
                if p < n - 1:
                    ops.append(Op(SEND, chain[p + 1], link_kind(rank, chain[p + 1], G),
                                  "in" if p == 0 else "out", off, nb, chan=c))
    return sch


def _reduce(orders, G, size_bytes, slice_bytes, params):
    """The chain's first rank sends its input; each next one adds what
    arrives to its own input (in ``tmp``: NCCL leaves a non-root's receive
    buffer alone) and sends it on; the root adds into its output. Channel
    c: part c along ring c (the chains start at other ranks: with several,
    every non-root copies its input to ``tmp``)."""
    n = len(orders[0])
    sch = _new(n, lambda r: {"in": size_bytes, "out": size_bytes, "tmp": size_bytes})
    first = _chain(orders[0], params.root, True)[0]
    for r in range(n):
        if r == params.root or r != first or params.channels > 1:
            sch[r].ops.append(Op(COPY, -1, LOCAL, "out" if r == params.root else "tmp", 0,
                                 size_bytes, src_buf="in"))
    for c, (order, (po, pn)) in enumerate(zip(orders, _channel_parts(size_bytes, params))):
        chain = _chain(order, params.root, True)
        for p, rank in enumerate(chain):
            ops = sch[rank].ops
            acc = "out" if p == n - 1 else "tmp"
            for off, nb in slices(po, pn, slice_bytes):
                if p > 0:
                    ops.append(Op(RECV, chain[p - 1], link_kind(rank, chain[p - 1], G), acc,
                                  off, nb, reduce=True, chan=c))
                if p < n - 1:
                    ops.append(Op(SEND, chain[p + 1], link_kind(rank, chain[p + 1], G),
                                  "in" if p == 0 else acc, off, nb, chan=c))
    return sch


_BUILDERS = {"broadcast": _broadcast, "reduce": _reduce, "send_recv": _send_recv,
             "all_to_allv": _all_to_allv}


def in_place(schedules: dict[int, RankSchedule], collective: str, n: int,
             size_bytes: int) -> dict[int, RankSchedule]:
    """nccl-tests' in-place variant of ``build``'s schedules (changed in place
    and returned): the send and receive buffers are one, as NCCL allows --
    all_reduce recvbuff == sendbuff, all_gather sendbuff = recvbuff + rank's
    share, reduce_scatter recvbuff = sendbuff + rank's share. Ops on the
    aliased buffer move onto the other at that offset, the copy that
    becomes a no-op is dropped (NCCL skips it too), and ``finalize`` derives
    the dependencies anew: an op waits for whatever it now overwrites to be
    read. broadcast and reduce alias as all_reduce. all_to_all(v) and
    send_recv keep their schedule: nccl-tests times their in-place run on
    one buffer but checks nothing (its data is clobbered), and the
    transfers are the same."""
    if collective in OWN_BUFFERS:
        return schedules
    elem = schedules[0].elem_bytes
    per_rank = chunk_bytes(size_bytes // elem, n, 0, elem)
    for r, sched in schedules.items():
        if collective in ("all_reduce", *ROOTED):
            alias, onto, base = "in", "out", 0
        elif collective == "all_gather":
            alias, onto, base = "in", "out", per_rank[r][0]
        elif collective == "reduce_scatter":
            alias, onto, base = "out", "in", per_rank[r][0]
        else:
            raise ValueError(f"unknown collective {collective}")
        ops = []
        for op in sched.ops:
            if op.buf == alias:
                op.buf, op.off = onto, op.off + base
            if op.kind == COPY and op.src_buf == alias:
                op.src_buf, op.src_off = onto, op.src_off + base
            if op.kind == COPY and op.buf == op.src_buf and op.off == op.src_off:
                continue
            ops.append(op)
        sched.ops = ops
        del sched.buffers[alias]
        finalize(sched)
    return schedules


def in_place_views(collective: str, n: int, rank: int, size_bytes: int,
                   elem: int = ELEM_BYTES) -> tuple:
    """Where an in-place rank's input and output live: ((buffer, first
    element, elements) of the input, (...) of the output)."""
    count = size_bytes // elem
    share = count // n
    if collective == "all_gather":
        return ("out", rank * share, share), ("out", 0, count)
    if collective == "reduce_scatter":
        return ("in", 0, count), ("in", rank * share, share)
    if collective in ("all_reduce", *ROOTED):
        return ("out", 0, count), ("out", 0, count)
    if collective in OWN_BUFFERS:
        raise ValueError(f"{collective} has no in-place views: its in-place run keeps both buffers")
    raise ValueError(f"unknown collective {collective}")


def _hierarchical(sch, S, G, count, slice_bytes, elem):
    local = chunk_bytes(count, G, 0, elem)             # chunk g: reduced on GPU g of each server
    for s in range(S):
        ranks = [s * G + g for g in range(G)]
        _ring_phase(sch, ranks, local, "out", True, -1, G, slice_bytes)
    for g in range(G):
        rail = [s * G + g for s in range(S)]
        sub = chunk_bytes(local[g][1] // elem, S, local[g][0], elem)
        _ring_phase(sch, rail, sub, "out", True, 0, G, slice_bytes)
        _ring_phase(sch, rail, sub, "out", False, 1, G, slice_bytes)
    for s in range(S):
        ranks = [s * G + g for g in range(G)]
        _ring_phase(sch, ranks, local, "out", False, 0, G, slice_bytes)


def connections(schedules: dict[int, RankSchedule]) -> set[tuple[int, int, str]]:
    """Unordered rank pairs (a < b) with their link kind that the schedules use."""
    return {(a, b, link) for a, b, link, _ in channel_connections(schedules)}


def channel_connections(schedules: dict[int, RankSchedule]) -> set[tuple[int, int, str, int]]:
    """``connections`` with their channel: one connection (QP) each."""
    out = set()
    for r, s in schedules.items():
        for peer, link, chan in s.peers():
            out.add((min(r, peer), max(r, peer), link, chan))
    return out
