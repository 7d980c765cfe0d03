"""The per-server collective engine: G ranks (GPU i <-> NIC i) in one
single-threaded process, driven by one event loop over the server's NICs
and its NVLink switch (the ``RoceNic.run_once`` style of ``agents/host.py``,
but for several NICs at once).

Each rank executes its schedule dataflow-style: an op runs when its
dependencies are done (``schedule.finalize``); a send also needs a credit on
its connection, a receive needs the next message of its connection. A rank
may run several iterations back to back (nccl-tests' timed loop); messages
of a peer that is already in the next iteration wait in their slots.

GPUDirect RDMA off (``staging``, per GPU): RDMA messages wait for the
staging copies through host memory (``staging.py``); the loop runs the
held posts and arrivals from the engine's ``TimerHeap`` when the copies end.

Times are ns of the engine's clock (``emulator.clock``), the same clock as
its NICs': wall ns (``MONOTONIC``, shared by every process of the host) in
a dilated run, whose reports divide by the dilation (``report.py``); fabric
ns in virtual time (``emulator.vtime``: D = 1), where the loop's waits
return at the exact time of the next event and the run can be ended from
outside (``CollectiveEngine.stop_flag``).
"""
from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from emulator.nic.qp import WcOpcode
from emulator.clock import MONOTONIC, Clock, TimerHeap, ceil_ns
from emulator.wire import roce_sport

from .nvlink import NvlinkSwitch
from .arith import combiner, storage
from .schedule import COMPUTE, COPY, NVLINK, SEND, RankSchedule, conn_key
from .transport import NvlinkConn, RdmaConn

QPN_BASE = 0x800              # QP of rank r towards peer p (channel 0) is QPN_BASE + p on r's NIC
# the loop runs a piece of background work (``CollectiveEngine.background``)
# instead of waiting when nothing is due for at least this long (clock ns;
# a piece takes 20-40 us of CPU here). In virtual time the choice depends on
# fabric times only and a piece costs no fabric time (the clock moves in
# waits alone): reruns run the same pieces at the same fabric times.
BACKGROUND_MIN_IDLE_NS = 100_000


class _Prepared:
    """A schedule's static execution data, shared by every iteration."""

    def __init__(self, s: RankSchedule):
        self.ops = s.ops
        self.buffers = s.buffers
        self.init_cnt = [len(o.deps) for o in s.ops]
        self.dependents: list[list[int]] = [[] for _ in s.ops]
        for i, o in enumerate(s.ops):
            for d in o.deps:
                self.dependents[d].append(i)
        self.roots = [i for i, c in enumerate(self.init_cnt) if c == 0]
        e = s.elem_bytes
        self.rng = [(o.off // e, (o.off + o.nbytes) // e, o.src_off // e) for o in s.ops]
        self.storage = storage(s.dtype)         # an RDMA message arrives as bytes: viewed as this
        self.marks = {i: k for k, i in enumerate(s.marks)}    # op -> its place among the marks
        self.combine = combiner(s.redop, s.dtype)


class RankRun:
    """One rank running one schedule for ``iterations`` iterations. Records
    per iteration (iteration, start_ns, collective_start_ns, end_ns): start
    is when its compute phase began (= collective start without compute);
    ``mark_records``: per iteration, the end of each of the schedule's
    ``marks`` (clock ns). A ``ComputeOp`` keeps the rank busy for its
    ``compute_ns`` (``busy``: (end ns, op) due)."""

    def __init__(self, rank, prep: _Prepared, bufs, conns, iterations, compute_ns=0, fill=None,
                 clock: Clock = MONOTONIC):
        self.rank, self.prep, self.bufs, self.conns = rank, prep, bufs, conns
        self.clock = clock
        self.iterations, self.compute_ns, self.fill = list(iterations), int(compute_ns), fill
        self.records: list[tuple[int, int, int, int]] = []
        self.finished = not self.iterations
        self.idx = 0
        self.cnt: list[int] = []
        self.ndone = 0
        self.t_start = self.t_coll = 0
        self.wake_ns = 0            # computing until then (0: not computing)
        self.busy: list[tuple[int, int]] = []
        self.mark_records: list[list[int]] = []
        self.marks_ns: list[int] = []
        if not self.finished:
            self._begin(clock.now_ns())

    def _begin(self, now):
        self.t_start = now
        if self.fill is not None:           # e.g. the step's gradients: produced by compute
            self.fill(self, self.iterations[self.idx])
        if self.compute_ns:
            self.wake_ns = now + self.compute_ns
        else:
            self._start_collective(now)

    def _start_collective(self, now):
        self.wake_ns = 0
        self.t_coll = now
        self.cnt = list(self.prep.init_cnt)
        self.ndone = 0
        self.marks_ns = [0] * len(self.prep.marks)
        for i in self.prep.roots:
            self._ready(i)

    def _ready(self, i):
        op = self.prep.ops[i]
        if op.kind == COPY:
            a, b, sa = self.prep.rng[i]
            self.bufs[op.buf][a:b] = self.bufs[op.src_buf][sa:sa + b - a]
            self._done(i)
        elif op.kind == COMPUTE:
            if op.compute_ns:
                heapq.heappush(self.busy, (self.clock.now_ns() + op.compute_ns, i))
            else:
                self._done(i)
        elif op.kind == SEND:
            self.conns[op.key].pend_send.append(i)
        else:
            self.conns[op.key].pend_recv.append(i)

    def _done(self, i):
        self.ndone += 1
        k = self.prep.marks.get(i)
        if k is not None:
            self.marks_ns[k] = self.clock.now_ns()
        cnt = self.cnt
        for j in self.prep.dependents[i]:
            cnt[j] -= 1
            if cnt[j] == 0:
                self._ready(j)

    def step(self, now) -> bool:
        """Do what can be done now; True if anything happened."""
        if self.finished:
            return False
        if self.wake_ns:
            if now < self.wake_ns:
                return False
            self._start_collective(now)
        moved = changed = False
        while self.busy and self.busy[0][0] <= now:
            self._done(heapq.heappop(self.busy)[1])
            moved = True
        changed = True
        ops, rng, bufs = self.prep.ops, self.prep.rng, self.bufs
        dtype, combine = self.prep.storage, self.prep.combine
        while changed:
            changed = False
            for c in self.conns.values():
                while c.pend_send and c.can_send():
                    i = c.pend_send.popleft()
                    a, b, _ = rng[i]
                    c.send(bufs[ops[i].buf][a:b])
                    self._done(i)
                    changed = True
                while c.pend_recv and c.arrived:
                    i = c.pend_recv.popleft()
                    a, b, _ = rng[i]
                    x = c.arrived[0]
                    if x.dtype != dtype:
                        x = x.view(dtype)
                    if x.size != b - a:
                        raise RuntimeError(f"rank {self.rank}: message from {c.peer} has "
                                           f"{x.size} elements, op {i} expects {b - a}")
                    if ops[i].reduce:
                        combine(bufs[ops[i].buf][a:b], x)
                    else:
                        bufs[ops[i].buf][a:b] = x
                    c.release()
                    self._done(i)
                    changed = True
            moved |= changed
        if self.ndone == len(ops):
            now = self.clock.now_ns()
            self.records.append((self.iterations[self.idx], self.t_start, self.t_coll, now))
            self.mark_records.append(self.marks_ns)
            self.idx += 1
            if self.idx == len(self.iterations):
                self.finished = True
            else:
                self._begin(now)
            return True
        return moved


class CollectiveEngine:
    """G ranks of server ``server`` (of ``servers``), GPU g <-> ``nics[g]``.
    ``rank_ips``: every global rank's NIC IP (rank = server * G + g).
    ``nvlink_rate_bps``/``nvlink_delay_ns``: already dilated. ``staging``:
    per GPU g, its ``StagingCopies`` when GPUDirect RDMA is off on NIC g
    (None entries, or no list: GPUDirect on). ``clock``: the NICs' clock."""

    def __init__(self, *, server: int, servers: int, nics: list, rank_ips: dict[int, str],
                 nvlink_rate_bps: float, nvlink_delay_ns: float, slice_bytes: int = 65536,
                 slots: int = 8, qpn_base: int = QPN_BASE, staging: list | None = None,
                 clock: Clock = MONOTONIC):
        self.server, self.servers, self.G = server, servers, len(nics)
        self.clock = clock
        self.staging = list(staging) if staging is not None else [None] * len(nics)
        if len(self.staging) != len(nics):
            raise ValueError(f"staging for {len(self.staging)} GPUs, {len(nics)} NICs")
        self.timers = TimerHeap()           # (fn, args): staged posts and arrivals
        self.nics, self.rank_ips = list(nics), dict(rank_ips)
        self.slice_bytes, self.slots, self.qpn_base = slice_bytes, slots, qpn_base
        self.ranks = [server * self.G + g for g in range(self.G)]
        self.switch = NvlinkSwitch(self.G, nvlink_rate_bps, nvlink_delay_ns, clock)
        self.conns: dict[int, dict[int, object]] = {r: {} for r in self.ranks}
        self._by_qpn: list[dict[int, RdmaConn]] = [{} for _ in self.nics]
        self._prepared: dict[int, _Prepared] = {}
        # every rank's schedules by (collective, algorithm, size_bytes, slice_bytes,
        # in_place), built once (``bench.schedules``), before the start where known
        self.schedules: dict[tuple, dict[int, RankSchedule]] = {}
        # generators run a piece per ``next`` in the loop's idle time (``drive``):
        # work between a phase and the next (a result's check) stalled the NICs
        self.background: deque = deque()
        self.background_min_idle_ns = BACKGROUND_MIN_IDLE_NS
        # [True] once the run was ended from outside: in virtual time the
        # coordinator's END (the wall limit, another process failed), after
        # which the clock stands still -- ``drive`` gives up instead of waiting
        self.stop_flag: list[bool] = [False]

    def connect(self, pairs) -> None:
        """Open the connections of ``pairs`` = {(a, b, link[, channel])} (a <
        b, global ranks; ``algorithms.channel_connections``) that involve our
        ranks: one per channel, keyed ``schedule.conn_key(peer, channel)``
        (the QP of rank r towards p on channel c: QPN_BASE + that key)."""
        G = self.G
        for a, b, link, *chan in sorted(pairs):
            c = chan[0] if chan else 0
            for me, peer in ((a, b), (b, a)):
                key, back = conn_key(peer, c), conn_key(me, c)
                if me not in self.conns or key in self.conns[me]:
                    continue
                if link == NVLINK:
                    if peer not in self.conns:
                        raise ValueError(f"NVLink between ranks {me} and {peer} of two servers")
                    x = NvlinkConn(me, peer, self.slots, self.slice_bytes, self.switch, me % G, peer % G)
                    y = NvlinkConn(peer, me, self.slots, self.slice_bytes, self.switch, peer % G, me % G)
                    NvlinkConn.pair(x, y)
                    self.conns[me][key], self.conns[peer][back] = x, y
                else:
                    nic = self.nics[me % G]
                    qpn = self.qpn_base + key
                    qp = nic.create_qp(qpn, self.rank_ips[peer], self.qpn_base + back,
                                       roce_sport(qpn))
                    conn = RdmaConn(me, peer, self.slots, self.slice_bytes, nic, qp,
                                    self.staging[me % G], self.timers, self.clock, chan=c)
                    self.conns[me][key] = conn
                    self._by_qpn[me % G][qpn] = conn

    def attach(self, nic, qpn: int, handler) -> None:
        """Hand ``nic``'s completions of QP ``qpn`` to ``handler.on_completion``
        in the same event loop (e.g. storage READs during training); a NIC
        that serves no rank (a storage NIC) joins the loop."""
        if all(n is not nic for n in self.nics):
            self.nics.append(nic)           # ranks use nics[:G] only
            self._by_qpn.append({})
        i = next(i for i, n in enumerate(self.nics) if n is nic)
        if qpn in self._by_qpn[i]:
            raise ValueError(f"QP {qpn:#x} of {nic.ifname} already in use")
        self._by_qpn[i][qpn] = handler

    def prepare(self, s: RankSchedule) -> _Prepared:
        p = self._prepared.get(id(s))
        if p is None or p.ops is not s.ops:
            p = self._prepared[id(s)] = _Prepared(s)
        return p

    def new_buffers(self, s: RankSchedule) -> dict[str, np.ndarray]:
        return {k: np.zeros(v // s.elem_bytes, storage(s.dtype)) for k, v in s.buffers.items()}

    def run(self, runs: list[RankRun], timeout_s: float = 60.0) -> None:
        """Drive NICs, NVLink and ``runs`` until every run finished."""
        drive([self], runs, timeout_s)

    def describe(self, runs) -> str:
        out = []
        for r in runs:
            if r.finished:
                continue
            cs = ", ".join(f"{p}: sent {c.sent} freed {c.freed} got {c.consumed}+{len(c.arrived)}"
                           f" wait_send {len(c.pend_send)} wait_recv {len(c.pend_recv)}"
                           for p, c in r.conns.items())
            out.append(f"rank {r.rank} iter {r.idx}/{len(r.iterations)} ops "
                       f"{r.ndone}/{len(r.prep.ops)} [{cs}]")
        return "collective engine timed out: " + "; ".join(out)


def quiescent(engines: list[CollectiveEngine]) -> bool:
    """Every message sent has been consumed and credited, nothing in flight."""
    return (all(c.sent == c.freed and not c.arrived
                for e in engines for conns in e.conns.values() for c in conns.values())
            and all(e.switch.idle() and not e.timers and all(n.idle() for n in e.nics)
                    for e in engines))


def drive(engines: list[CollectiveEngine], runs: list[RankRun], timeout_s: float = 60.0,
          until=None) -> None:
    """One event loop for the NICs and NVLink switches of ``engines`` (one
    per server process; several in one process only in tests) until every
    run finished (and ``until()`` is true, if given). Raises TimeoutError (with the stuck connections) or
    transport.TransportError (a QP failed); TimeoutError too once an engine's
    ``stop_flag`` is set with runs unfinished. Time is the first engine's clock."""
    clock = engines[0].clock
    deadline = clock.now_ns() + int(timeout_s * 1e9)
    nics = [nic for e in engines for nic in e.nics]
    by_qpn = [m for e in engines for m in e._by_qpn]
    switches = [e.switch for e in engines]
    fds = [fd for nic in nics for fd in nic.rx_fds]
    nic_of = {fd: i for i, nic in enumerate(nics) for fd in nic.rx_fds}
    ready: dict[int, list[int]] | None = None   # NIC -> its fds with frames; None: not waited
    idle_ns = engines[0].background_min_idle_ns
    while True:
        for i, nic in enumerate(nics):
            # receive (after a wait: only where frames are), timers, transmit what is due
            nic.run_once(0, None if ready is None else ready.get(i, ()))
        ready = None
        for nic, conns in zip(nics, by_qpn):
            for c in nic.poll_cq(1024):
                conn = conns.get(c.qpn)
                if conn is not None and c.opcode != WcOpcode.RECV_RDMA_WRITE:
                    conn.on_completion(c)
        now = clock.now_ns()
        for sw in switches:
            sw.poll(now)
        moved = False
        for e in engines:               # staging copies ended: post to the NIC / hand over
            moved |= e.timers.run_due(now) > 0
        for r in runs:
            moved |= r.step(now)
        if all(r.finished for r in runs) and (until is None or until()):
            return
        if moved:
            # new WQEs: each NIC sends what they made due before the next pass
            # reads frames (a credit of the 4th NIC waited for the 3 before)
            now = clock.now_ns()
            for nic in nics:
                nic.doorbell(now)
            continue
        now = clock.now_ns()
        if now >= deadline:         # (a clock that moves only in waits stays at it)
            raise TimeoutError(engines[0].describe(runs))
        if any(e.stop_flag[0] for e in engines):
            raise TimeoutError("the run was ended first; " + engines[0].describe(runs))
        limit = min(deadline, now + 50_000_000)
        # Wait on every NIC (and the NVLink switches, staging timers) at once, until the
        # earliest of their next deadlines.
        wake = _next_event_ns(engines, nics, runs, now, limit, True)
        if wake > now:
            # idle time: no work due for a while -- a link layer's upkeep is no
            # work (InfiniBand's credit updates, every 16 us, would leave none)
            if (any(e.background for e in engines)
                    and _next_event_ns(engines, nics, runs, now, limit, False) - now >= idle_ns):
                run_background(engines, 1)
                continue
            ready = {}
            for fd in clock.wait_readable(fds, wake):
                ready.setdefault(nic_of[fd], []).append(fd)


def _next_event_ns(engines, nics, runs, now: int, limit: int, upkeep: bool) -> int:
    """When ``drive``'s loop has something to do next, at most ``limit``:
    the NICs' deadlines (``upkeep``: with their link layer's periodic
    packets, else only their work, ``next_work_ns``), NVLink arrivals,
    staging copies and compute phases that end."""
    nic_ns = [(nic.next_wake_ns if upkeep else nic.next_work_ns)(now, limit) for nic in nics]
    wake = min(nic_ns + [limit])
    events = [e.switch.next_event_ns() for e in engines] + [e.timers.next_due_ns() for e in engines]
    for ev in events:
        if ev is not None:
            wake = min(wake, ceil_ns(ev))
    for r in runs:
        if r.wake_ns and not r.finished:
            wake = min(wake, r.wake_ns)
        if r.busy and not r.finished:
            wake = min(wake, r.busy[0][0])
    return wake


def run_background(engines: list[CollectiveEngine], pieces: int | None = None) -> bool:
    """Run ``pieces`` pieces (None: all) of the engines' background work, in
    order; False if there was none."""
    ran = False
    for e in engines:
        bg = e.background
        while bg and (pieces is None or pieces > 0):
            try:
                next(bg[0])
            except StopIteration:
                bg.popleft()
            ran = True
            if pieces is not None:
                pieces -= 1
        if pieces == 0:
            break
    return ran
