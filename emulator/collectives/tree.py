"""NCCL's double binary tree all_reduce (``algorithm: tree``).

Shape, as NCCL builds it (github.com/NVIDIA/nccl):

* Between servers (NCCL's nodes), two binary trees over the S servers,
  ``src/graph/trees.cc``: ``ncclGetBtree`` (``btree`` here: rooted at 0,
  leaves and inner nodes alternate) and ``ncclGetDtree`` (``dtree``: the
  second tree is the first mirrored, n-1-x, when S is even, shifted by one
  when S is odd), so a server that is an inner node of one tree is a leaf of
  the other.
* Inside a server, a chain over NVLink: ``src/graph/connect.cc``
  (``ncclTopoPreset``: tree.up = intra[i-1], tree.down[0] = intra[i+1]) with
  NCCL_TOPO_PATTERN_TREE, "all NIC traffic going to/from the same GPU": the
  chain's head GPU talks to the parent server's head and to the child
  servers' heads (``connectTrees``: setTreeUp / setTreeDown on
  treeToParent / treeToChild, the head for this pattern). Channel c's chain
  starts at GPU c mod G, on every server the same: the inter-server hops join
  NICs of one rail.
* Channel c runs tree 0 and tree 1 on two channels of their own (NCCL's c and
  c + nChannels): the data is cut in 2 x ``channels`` parts, one per tree.
* Each slice is reduced up (a rank adds its children's slices into its own,
  then sends it to its parent) and broadcast down (it receives the total
  from its parent and forwards it to its children), as NCCL's tree
  up/down kernels; slices pipeline, the root turning each around as soon as
  it is reduced.

bus bandwidth stays nccl-tests' all_reduce factor 2(n-1)/n whatever the
algorithm (doc/PERFORMANCE.md).
"""
from __future__ import annotations

from .schedule import NVLINK, RDMA, RECV, SEND, Op, chunk_bytes, slices


def btree(nranks: int, rank: int) -> tuple[int, list[int]]:
    """(parent or -1, children) of ``rank`` in NCCL's binary tree of
    ``nranks`` (``ncclGetBtree``): the parent of xx01[0] is xx10[0] (or xx00[0]
    when that is out of range), of xx11[0] xx10[0]; the children of xx10[0]
    are xx01[0] and xx11[0] (or the next lower bit's, while out of range)."""
    if not 0 <= rank < nranks:
        raise ValueError(f"rank {rank} is not one of {nranks}")
    bit = 1
    while bit < nranks and not bit & rank:
        bit <<= 1
    if rank == 0:
        return -1, ([bit >> 1] if nranks > 1 else [])
    up = (rank ^ bit) | (bit << 1)
    if up >= nranks:
        up = rank ^ bit
    low = bit >> 1
    children = []
    if low:
        children.append(rank - low)
        while low and rank + low >= nranks:
            low >>= 1
        if low:
            children.append(rank + low)
    return up, children


def dtree(nranks: int, rank: int) -> tuple[tuple[int, list[int]], tuple[int, list[int]]]:
    """``rank``'s (parent, children) in NCCL's two trees (``ncclGetDtree``):
    the binary tree, and it mirrored (even ``nranks``) or shifted by one (odd)."""
    first = btree(nranks, rank)
    if nranks % 2:
        up, down = btree(nranks, (rank - 1) % nranks)
        return first, (-1 if up < 0 else (up + 1) % nranks, [(d + 1) % nranks for d in down])
    up, down = btree(nranks, nranks - 1 - rank)
    return first, (-1 if up < 0 else nranks - 1 - up, [nranks - 1 - d for d in down])


def chain(gpus_per_server: int, chan: int) -> list[int]:
    """Channel ``chan``'s order of a server's GPUs: from GPU chan mod G on."""
    return [(chan + i) % gpus_per_server for i in range(gpus_per_server)]


def neighbours(servers: int, G: int, rank: int, tree: int, chan: int) -> tuple[int, list[int]]:
    """(parent rank or -1, child ranks) of global ``rank`` in ``tree`` (0, 1)
    of channel ``chan``: its server's chain, plus the inter-server tree at the
    chain's head (the head's NVLink child first, as NCCL's down[0])."""
    s, g = divmod(rank, G)
    order = chain(G, chan)
    i = order.index(g)
    children = [s * G + order[i + 1]] if i + 1 < G else []
    if i > 0:
        return s * G + order[i - 1], children
    up, down = dtree(servers, s)[tree]
    head = order[0]
    return (-1 if up < 0 else up * G + head), children + [d * G + head for d in down]


def all_reduce(sch: dict, servers: int, G: int, count: int, elem: int, slice_bytes: int,
               channels: int) -> None:
    """Append the tree all_reduce of ``out`` (already holding each rank's
    input) to every rank's ops in ``sch``. Tree t of channel c is channel
    c + t x ``channels`` and carries data part c + t x ``channels``."""
    parts = chunk_bytes(count, 2 * channels, 0, elem)
    for r, s in sch.items():
        for t in (0, 1):
            for c in range(channels):
                ch = c + t * channels
                parent, children = neighbours(servers, G, r, t, c)
                _up_down(s.ops, r, parent, children, parts[ch], slice_bytes, G, ch)


def _kind(a: int, b: int, G: int) -> str:
    return NVLINK if a // G == b // G else RDMA


def _up_down(ops, me, parent, children, part, slice_bytes, G, chan):
    """Per slice: add the children's, send to the parent, receive the total
    back, pass it to the children (a valid sequential order, slice by slice)."""
    for off, nb in slices(*part, slice_bytes):
        for ch in children:
            ops.append(Op(RECV, ch, _kind(me, ch, G), "out", off, nb, reduce=True, chan=chan))
        if parent >= 0:
            ops.append(Op(SEND, parent, _kind(me, parent, G), "out", off, nb, chan=chan))
            ops.append(Op(RECV, parent, _kind(me, parent, G), "out", off, nb, chan=chan))
        for ch in children:
            ops.append(Op(SEND, ch, _kind(me, ch, G), "out", off, nb, chan=chan))
