"""Collective schedules: per-rank programs of sends, receives and local
copies, independent of the transport.

A schedule is, for every rank, a list of ``Op`` in *program order* plus the
sizes of its buffers (``in``, ``out``, and ``tmp`` where needed), its element
type and reduction op (``dtypes.py``). Offsets and lengths are in bytes
(multiples of the element's size). Matching is FIFO
per ordered rank pair and channel: the k-th ``send`` from a to b on channel c
is the k-th ``recv`` on b from a on c; both sides cut a chunk into the same
slices (``slices``). A channel (NCCL's) is a connection of its own between
the pair -- its own QP -- so channels of one pair do not wait for each other.

Execution need not follow program order: ``finalize`` derives each op's
dependencies from the buffer ranges it reads and writes (read-after-write,
write-after-read, write-after-write) plus FIFO order of sends and of receives
per peer. An executor may run any op whose dependencies are done, so sends
of step s+1 leave as soon as the slice they forward has been reduced (the
pipelining NCCL gets from its FIFO slots), not when step s is over.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from .dtypes import elem_bytes

ELEM_BYTES = 4            # float32, the default type

SEND, RECV, COPY = "send", "recv", "copy"
COMPUTE = "compute"         # a GPU busy for a while, touching no buffer (``ComputeOp``)
NVLINK, RDMA, LOCAL = "nvlink", "rdma", "local"
CHANNEL_STRIDE = 1 << 16    # ranks; a connection's key: peer + channel x this


def conn_key(peer: int, chan: int) -> int:
    """One number per (peer, channel): the peer itself on channel 0."""
    return peer + chan * CHANNEL_STRIDE


class Op:
    """One step. ``send``: read buf[off:off+nbytes], send it to ``peer``.
    ``recv``: receive from ``peer`` into buf[off:off+nbytes], summing into
    what is there if ``reduce`` else overwriting. ``copy``: local
    src_buf[src_off:+nbytes] -> buf[off:+nbytes]. ``chan``: the channel of a
    send or receive. ``deps``: indices of ops (same rank) that must be done
    first (set by ``finalize``)."""

    __slots__ = ("kind", "peer", "link", "buf", "off", "nbytes", "reduce", "src_buf", "src_off",
                 "chan", "deps")

    def __init__(self, kind, peer, link, buf, off, nbytes, reduce=False, src_buf=None,
                 src_off=0, chan=0):
        self.kind, self.peer, self.link, self.buf = kind, peer, link, buf
        self.off, self.nbytes, self.reduce = off, nbytes, reduce
        self.src_buf, self.src_off, self.chan = src_buf, src_off, chan
        self.deps: tuple[int, ...] = ()

    @property
    def key(self) -> int:
        """Its connection's key (``conn_key``)."""
        return conn_key(self.peer, self.chan)

    def __repr__(self):
        extra = (" reduce" if self.reduce else "") + (f" chan={self.chan}" if self.chan else "")
        src = f" from {self.src_buf}@{self.src_off}" if self.kind == COPY else ""
        return (f"Op({self.kind} peer={self.peer} {self.link} {self.buf}@{self.off}"
                f"+{self.nbytes}{extra}{src} deps={self.deps})")


@dataclass
class RankSchedule:
    rank: int
    buffers: dict[str, int]                       # name -> size in bytes
    ops: list[Op] = field(default_factory=list)
    dtype: str = "float32"                        # of its elements (``dtypes.DTYPES``)
    redop: str = "sum"                            # what a reducing receive applies
    marks: list[int] = field(default_factory=list)   # ops whose end a run records (``step.py``)

    @property
    def elem_bytes(self) -> int:
        return elem_bytes(self.dtype)

    def peers(self) -> set[tuple[int, str, int]]:
        """(peer rank, link kind, channel) of every connection this rank uses."""
        return {(o.peer, o.link, o.chan) for o in self.ops if o.kind in (SEND, RECV)}


def split_elems(count: int, parts: int) -> list[tuple[int, int]]:
    """``count`` elements in ``parts`` near-equal contiguous pieces:
    [(first element, number of elements)] (the first count % parts get one more)."""
    base, extra = divmod(count, parts)
    out, start = [], 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        out.append((start, n))
        start += n
    return out


def chunk_bytes(count: int, parts: int, base_byte: int = 0, elem: int = ELEM_BYTES
                ) -> list[tuple[int, int]]:
    """``split_elems`` as (byte offset, byte length) from ``base_byte``."""
    return [(base_byte + s * elem, n * elem) for s, n in split_elems(count, parts)]


def slices(off: int, nbytes: int, slice_bytes: int) -> list[tuple[int, int]]:
    """A chunk cut into transfer units of at most ``slice_bytes`` (a zero-length
    chunk is no transfer at all, so both sides agree to skip it)."""
    return [(o, min(slice_bytes, off + nbytes - o)) for o in range(off, off + nbytes, slice_bytes)]


class _Ranges:
    """Per buffer, for each byte range: the last op that wrote it and the ops
    that read it since. Ranges split at op boundaries (few distinct ones:
    chunks and slices), so tracking costs O(ranges touched) per op."""

    def __init__(self, size: int):
        self.bounds = [0, size]
        self.writer: list[int] = [-1]
        self.readers: list[list[int]] = [[]]

    def _split(self, x: int) -> None:
        i = bisect.bisect_left(self.bounds, x)
        if i < len(self.bounds) and self.bounds[i] == x:
            return
        self.bounds.insert(i, x)
        self.writer.insert(i, self.writer[i - 1])
        self.readers.insert(i, list(self.readers[i - 1]))

    def access(self, op: int, a: int, b: int, write: bool, deps: set[int]) -> None:
        if a >= b:
            return
        self._split(a)
        self._split(b)
        i, j = bisect.bisect_left(self.bounds, a), bisect.bisect_left(self.bounds, b)
        for k in range(i, j):
            if self.writer[k] >= 0:
                deps.add(self.writer[k])
            if write:
                deps.update(self.readers[k])
                self.writer[k] = op
                self.readers[k] = []
            else:
                self.readers[k].append(op)


def finalize(s: RankSchedule) -> RankSchedule:
    """Set every op's ``deps`` (see the module docstring)."""
    ranges = {name: _Ranges(size) for name, size in s.buffers.items()}
    last_send: dict[int, int] = {}
    last_recv: dict[int, int] = {}
    for i, op in enumerate(s.ops):
        deps: set[int] = set()
        end = op.off + op.nbytes
        if op.kind != COMPUTE and (op.off < 0 or end > s.buffers[op.buf]):
            raise ValueError(f"rank {s.rank} op {i} outside buffer {op.buf}: {op!r}")
        if op.kind == SEND:
            ranges[op.buf].access(i, op.off, end, False, deps)
            if op.key in last_send:
                deps.add(last_send[op.key])
            last_send[op.key] = i
        elif op.kind == RECV:
            ranges[op.buf].access(i, op.off, end, True, deps)   # reduce reads too: same deps
            if op.key in last_recv:
                deps.add(last_recv[op.key])
            last_recv[op.key] = i
        elif op.kind == COPY:
            ranges[op.src_buf].access(i, op.src_off, op.src_off + op.nbytes, False, deps)
            ranges[op.buf].access(i, op.off, end, True, deps)
        else:
            deps.update(op.after)
        deps.discard(i)
        op.deps = tuple(sorted(deps))
    return s


class ComputeOp(Op):
    """``compute_ns`` of the rank's GPU (0: a join, done once its ``after``
    ops are). It touches no buffer: its dependencies are the ops listed in
    ``after`` (indices in the same schedule), which ``finalize`` makes its
    ``deps`` (a parallelism-shaped step orders its phases with them:
    ``step.py``)."""

    __slots__ = ("compute_ns", "after")

    def __init__(self, compute_ns: int = 0, after: tuple[int, ...] = ()):
        super().__init__(COMPUTE, -1, LOCAL, "", 0, 0)
        self.compute_ns, self.after = int(compute_ns), tuple(after)

    def __repr__(self):
        return f"ComputeOp({self.compute_ns} ns after={self.after} deps={self.deps})"
