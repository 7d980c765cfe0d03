"""GPUDirect RDMA on/off: a thin wrapper over ``RoceNic`` for GPU memory.

With GPUDirect RDMA the NIC reads and writes GPU memory directly. Without
it, data from or to GPU memory is staged through host memory: a copy of
``staging_latency_ns + bytes x 8e9 / staging_rate_bps`` ns

* before a send from GPU memory (WRITE, SEND) goes to the wire: the post is
  held until the device-to-host copy is done;
* after data for GPU memory has arrived (incoming WRITE or SEND into a GPU
  buffer, our READ into one): the completion is held until the host-to-
  device copy is done.

Each direction has one copy engine (GPUs have separate D2H and H2D DMA
engines) serving copies in order, so back-to-back transfers queue.

Use it where a collective engine would use the NIC::

    g = GpuNic(nic, gpudirect=False, staging_rate_bps=..., staging_latency_ns=...)
    buf = g.register_gpu_mr(n)               # GPU memory (host memory: nic.register_mr)
    g.post_write(qp, wr_id, (buf, 0, n), raddr, rkey)
    g.run_once(timeout_s) / g.run_until(pred, timeout_s)   # instead of nic.run_*
    for c in g.poll_cq(): ...                # completions, staging included
    g.ready_ns(n, "tx")                      # when a copy of n bytes asked now ends

Completion times and units: ``docs/nic.md``, "gpudirect: completion times and units".
"""
from __future__ import annotations

import dataclasses
from itertools import islice

from emulator.clock import TimerHeap, ceil_ns

from emulator.nic.qp import Completion, MemoryRegion, QueuePair, WcOpcode


class StagingCopies:
    """The staging model alone: one GPU's two copy engines (D2H "tx" before
    a send, H2D "rx" after a receive), each serving copies in order, a copy
    taking ``staging_latency_ns + bytes x 8e9 / staging_rate_bps``. With
    ``gpudirect`` every copy takes no time. ``GpuNic`` uses it around verbs;
    the collective engine (``collectives/transport.py``) around its own
    protocol, whose doorbells need the WRITE and its doorbell held together.
    Pure: the caller says when each copy is asked for."""

    def __init__(self, gpudirect: bool = True, staging_rate_bps: float = 100e9,
                 staging_latency_ns: float = 10_000):
        if staging_rate_bps <= 0 or staging_latency_ns < 0:
            raise ValueError("staging_rate_bps must be > 0 and staging_latency_ns >= 0")
        self.gpudirect = bool(gpudirect)
        self.staging_rate_bps = float(staging_rate_bps)
        self.staging_latency_ns = float(staging_latency_ns)
        self._free = {"tx": 0.0, "rx": 0.0}        # copy engines: busy until
        self.staged_bytes = 0

    def copy_ns(self, nbytes: int) -> float:
        """Duration of one staging copy of ``nbytes`` (0 with GPUDirect)."""
        if self.gpudirect:
            return 0.0
        return self.staging_latency_ns + nbytes * 8e9 / self.staging_rate_bps

    def ready_ns(self, nbytes: int, direction: str, t_ns: float) -> float:
        """When a staging copy of ``nbytes`` asked for at ``t_ns`` would end,
        behind the copies already queued on that engine ("tx": GPU -> host
        before sending, "rx": host -> GPU after receiving)."""
        if self.gpudirect:
            return t_ns
        return max(t_ns, self._free[direction]) + self.copy_ns(nbytes)

    def stage(self, nbytes: int, direction: str, t_ns: float) -> float:
        """Book a copy of ``nbytes`` asked for at ``t_ns`` on that engine;
        returns when it ends (``t_ns`` itself with GPUDirect)."""
        done = self.ready_ns(nbytes, direction, t_ns)
        if not self.gpudirect:
            self._free[direction] = done
            self.staged_bytes += nbytes
        return done

    def report(self) -> dict:
        return {"enabled": self.gpudirect, "staging_rate_bps": self.staging_rate_bps,
                "staging_latency_ns": self.staging_latency_ns, "staged_bytes": self.staged_bytes}


class GpuNic:
    """``nic`` with staging copies around its verbs, on the NIC's clock."""

    def __init__(self, nic, gpudirect: bool = True, staging_rate_bps: float = 100e9,
                 staging_latency_ns: float = 10_000):
        self.nic = nic
        self.clock = nic.clock          # completions are stamped by it
        self.copies = StagingCopies(gpudirect, staging_rate_bps, staging_latency_ns)
        self.gpudirect = self.copies.gpudirect
        self.staging_rate_bps = self.copies.staging_rate_bps
        self.staging_latency_ns = self.copies.staging_latency_ns
        self._gpu_rkeys: set[int] = set()
        self._posts = TimerHeap()                  # posts held for their D2H copy
        self._held = TimerHeap()                   # completions, until usable (H2D copy)
        self._post_ns: dict[tuple[int, int], int] = {}   # (qpn, wr_id) -> asked at
        self._gpu_wr: set[tuple[int, int]] = set()       # READs / RECVs into GPU memory

    # -- memory ------------------------------------------------------------------
    def register_gpu_mr(self, size_bytes: int, **kw) -> MemoryRegion:
        mr = self.nic.register_mr(size_bytes, **kw)
        self._gpu_rkeys.add(mr.rkey)
        return mr

    def is_gpu(self, mr: MemoryRegion) -> bool:
        return mr.rkey in self._gpu_rkeys

    # -- the staging model (``StagingCopies``) ---------------------------------------
    @property
    def staged_bytes(self) -> int:
        return self.copies.staged_bytes

    def copy_ns(self, nbytes: int) -> float:
        return self.copies.copy_ns(nbytes)

    def ready_ns(self, nbytes: int, direction: str = "tx", t_ns: float | None = None) -> float:
        """When a copy of ``nbytes`` asked for at ``t_ns`` (default: now) would end."""
        return self.copies.ready_ns(nbytes, direction,
                                    self.clock.now_ns() if t_ns is None else t_ns)

    def _stage(self, nbytes: int, direction: str, t_ns: float) -> float:
        return self.copies.stage(nbytes, direction, t_ns)

    # -- verbs ---------------------------------------------------------------------
    def _post_staged(self, qp: QueuePair, wr_id: int, mr: MemoryRegion, nbytes: int, fn):
        if self.gpudirect or not self.is_gpu(mr):
            fn()
            return
        now = self.clock.now_ns()
        self._posts.push(self._stage(nbytes, "tx", now), fn)
        self._post_ns[(qp.qpn, wr_id)] = now

    def post_write(self, qp, wr_id, local, remote_addr, rkey, **kw) -> None:
        mr, off, n = local
        self._post_staged(qp, wr_id, mr, n,
                          lambda: self.nic.post_write(qp, wr_id, local, remote_addr, rkey, **kw))

    def post_send(self, qp, wr_id, data, **kw) -> None:
        mr = data[0] if isinstance(data, tuple) else None
        if mr is None:                               # bytes: host memory
            self.nic.post_send(qp, wr_id, data, **kw)
            return
        self._post_staged(qp, wr_id, mr, data[2],
                          lambda: self.nic.post_send(qp, wr_id, data, **kw))

    def post_read(self, qp, wr_id, local, remote_addr, rkey, **kw) -> None:
        """READ into ``local``; into GPU memory without GPUDirect, the
        completion waits for the host-to-device copy."""
        if not self.gpudirect and self.is_gpu(local[0]):
            self._gpu_wr.add((qp.qpn, wr_id))
        self.nic.post_read(qp, wr_id, local, remote_addr, rkey, **kw)

    def post_recv(self, qp, wr_id, size, buf=None, *, gpu: bool = False) -> None:
        """A receive buffer; ``gpu``: it is GPU memory (staged without GPUDirect)."""
        if gpu and not self.gpudirect:
            self._gpu_wr.add((qp.qpn, wr_id))
        self.nic.post_recv(qp, wr_id, size, buf)

    # -- completions -----------------------------------------------------------------
    def poll_cq(self, max_n: int = 64) -> list[Completion]:
        now = self.clock.now_ns()
        self._run_posts(now)
        held = self._held
        for c in self.nic.poll_cq(max_n):
            key = (c.qpn, c.wr_id)
            t = self._post_ns.pop(key, None) \
                if c.opcode in (WcOpcode.SEND, WcOpcode.RDMA_WRITE) else None
            if t is not None:                        # staged send: FCT from the ask
                c = dataclasses.replace(c, post_ns=t)
            into_gpu = (key in self._gpu_wr and c.opcode in (WcOpcode.RECV, WcOpcode.RDMA_READ)) \
                or (c.opcode == WcOpcode.RECV_RDMA_WRITE and c.rkey in self._gpu_rkeys
                    and not self.gpudirect)
            if into_gpu:
                self._gpu_wr.discard(key)
                ready = self._stage(c.byte_len, "rx", c.complete_ns)
                c = dataclasses.replace(c, complete_ns=int(ready),
                                        complete_unix_ns=c.complete_unix_ns
                                        + int(ready - c.complete_ns))
                held.push(ready, c)
            else:
                held.push(c.complete_ns, c)
        return list(islice(held.pop_due(now), max_n))

    # -- event loop ------------------------------------------------------------------
    def _run_posts(self, now: int) -> None:
        for fn in self._posts.pop_due(now):
            fn()

    def next_event_ns(self) -> float | None:
        t = [d for d in (self._posts.next_due_ns(), self._held.next_due_ns()) if d is not None]
        return min(t) if t else None

    def run_once(self, timeout_s: float = 0.0, readable=None) -> None:
        """``RoceNic.run_once`` (``readable`` as there), the staging's posts around it."""
        now = self.clock.now_ns()
        self._run_posts(now)
        t = self.next_event_ns()
        if t is not None:       # a copy's end is fractional: a wait shorter than 1 ns is none
            timeout_s = max(0.0, min(timeout_s, (ceil_ns(t) - now) / 1e9))
        self.nic.run_once(timeout_s, readable)
        self._run_posts(self.clock.now_ns())

    def run_until(self, predicate, timeout_s: float, poll_s: float = 0.05) -> bool:
        end = self.clock.now_ns() + int(timeout_s * 1e9)
        while not predicate():
            left = end - self.clock.now_ns()
            if left <= 0:
                return False
            self.run_once(min(poll_s, left / 1e9))
        return True

    def idle(self) -> bool:
        return not self._posts and not self._held and self.nic.idle()
