"""Communicators: collectives over a group of ranks (a sub-list of all of
them), and the groups of a parallelism-shaped training step.

``layout`` is Megatron-LM's rank layout (megatron/core/parallel_state.py,
``initialize_model_parallel``'s default ``order="tp-cp-ep-dp-pp"`` with
context parallelism 1): tensor parallelism innermost, then data
parallelism, then pipeline parallelism,

    rank = t + TP x (d + DP x p),

and the expert-parallel dimension splits the data-parallel one with the
expert index inner (``RankGenerator``: d = e + EP x d'), so an expert group
is EP consecutive data-parallel ranks (stride TP) of one stage.

``group_schedules`` builds a collective over a group with the algorithms of
``algorithms.py`` unchanged: it builds them for ``len(group)`` ranks and maps
local rank i onto the group's i-th rank in ring order (``ring_order``),
each transfer's link (NVLink inside a server, RDMA between servers) from
the global ranks, and its channel moved by ``chan_base`` (a communicator of
its own: its own QPs, as NCCL's).
"""
from __future__ import annotations

from . import algorithms
from .schedule import RECV, SEND, RankSchedule

KINDS = ("tp", "dp", "pp", "ep")


def layout(tp: int, pp: int, dp: int, ep: int = 1) -> dict[str, list[list[int]]]:
    """Every group of each kind, its ranks in ascending order (``tp * pp * dp``
    ranks; ``ep`` divides ``dp``)."""
    if dp % ep:
        raise ValueError(f"ep {ep} does not divide dp {dp}")

    def rank(t, d, p):
        return t + tp * (d + dp * p)
    return {"tp": [[rank(t, d, p) for t in range(tp)] for p in range(pp) for d in range(dp)],
            "dp": [[rank(t, d, p) for d in range(dp)] for p in range(pp) for t in range(tp)],
            "pp": [[rank(t, d, p) for p in range(pp)] for d in range(dp) for t in range(tp)],
            "ep": [[rank(t, e + ep * o, p) for e in range(ep)]
                   for p in range(pp) for o in range(dp // ep) for t in range(tp)]}


def group_of(groups: list[list[int]], rank: int) -> list[int]:
    """The group of ``groups`` that holds ``rank``."""
    return next(g for g in groups if rank in g)


def ring_order(ranks: list[int], gpus_per_server: int) -> list[int]:
    """A group's ranks as its ring visits them: server by server, a server's
    ranks ascending on even-numbered visits and descending on odd ones (the
    snake of ``algorithms.ring_order``), so a hop between two servers joins
    GPUs of one local index -- one rail -- where the group allows it."""
    by_server: dict[int, list[int]] = {}
    for r in sorted(ranks):
        by_server.setdefault(r // gpus_per_server, []).append(r)
    out = []
    for i, server in enumerate(sorted(by_server)):
        out += by_server[server][::-1] if i % 2 else by_server[server]
    return out


def group_schedules(collective: str, ranks: list[int], gpus_per_server: int, size_bytes: int,
                    slice_bytes: int, params: algorithms.Params = algorithms.Params(),
                    chan_base: int = 0) -> dict[int, RankSchedule]:
    """The ring (pairwise for all_to_all) ``collective`` over ``ranks`` only,
    keyed by global rank. Its data is that of the collective over
    ``len(ranks)`` ranks with local rank i = ``ring_order(ranks)[i]``."""
    order = ring_order(ranks, gpus_per_server)
    if len(set(order)) != len(order):
        raise ValueError(f"a group names a rank twice: {ranks}")
    m = len(order)
    local = algorithms.build(collective, "ring", 1, m, size_bytes, slice_bytes, params)
    out = {}
    for i, s in local.items():
        me = order[i]
        s.rank = me
        for op in s.ops:
            if op.kind in (SEND, RECV):
                op.peer = order[op.peer]
                op.link = algorithms.link_kind(me, op.peer, gpus_per_server)
                op.chan += chan_base
        out[me] = s
    return out
