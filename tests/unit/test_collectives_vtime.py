"""The collective engine's loop on clocks that move only when a wait asks:
a manual clock (exact wake-ups, a run ended from outside) and virtual time
(``emulator.vtime``: two servers' engines in threads, each on its own
``VirtualClock``, their NICs joined by datagram socket pairs standing for
the rails' veths, one coordinator) -- a rerun is the same run, ns for ns."""
from __future__ import annotations

import socket
import threading
from types import SimpleNamespace

import pytest

from tests.rail_nics import rail_nic_pairs
from tests.nics import ib_nic, roce_nic
from emulator.nic.nic import RoceNic
from emulator.clock import ManualClock
from emulator.collectives import bench, report
from emulator.collectives.engine import CollectiveEngine, RankRun, drive, quiescent
from emulator.collectives.schedule import NVLINK, SEND, Op, RankSchedule, finalize
from emulator.vtime.coordinator import IB_MIN_WIRE_BYTES, Coordinator, lookahead_ns
from emulator.vtime.member import VirtualClock, join_virtual_time

T0 = 5_000


def _exchange(rate_bps: float, delay_ns: int):
    """Ranks 0 and 1 of one server swap 4 bytes over NVLink; the ranks' end times."""
    clock = ManualClock(T0)
    nics, ips = rail_nic_pairs(2, 400_000_000, clock)
    try:
        eng = CollectiveEngine(server=0, servers=1, nics=[nics[(0, 0)], nics[(0, 1)]],
                               rank_ips={0: ips[0], 1: ips[1]}, nvlink_rate_bps=rate_bps,
                               nvlink_delay_ns=delay_ns, slice_bytes=4, slots=2, clock=clock)
        eng.connect({(0, 1, NVLINK)})
        runs = []
        for r in (0, 1):
            s = RankSchedule(r, {"in": 8, "out": 8})
            s.ops = [Op("copy", -1, "local", "out", 0, 8, src_buf="in"),
                     Op(SEND, 1 - r, NVLINK, "out", 0, 4), Op("recv", 1 - r, NVLINK, "out", 0, 4)]
            s = finalize(s)
            runs.append(RankRun(r, eng.prepare(s), eng.new_buffers(s), eng.conns[r], [0],
                                clock=clock))
        drive([eng], runs, 1.0)
        return [run.records[0][3] for run in runs]
    finally:
        for n in nics.values():
            n.close()


def test_an_nvlink_arrival_is_taken_at_its_exact_ns():
    """The loop wakes at an event's ceiling: at a whole arrival time itself
    (4 B at 1 B/ns + 100 ns), not a ns after; at a fractional one (4 B at
    3 Gbps: 10.67 ns + 100) at the next whole ns, never before."""
    assert _exchange(8e9, 100) == [T0 + 104, T0 + 104]
    assert _exchange(3e9, 100) == [T0 + 111, T0 + 111]


def test_drive_gives_up_once_the_run_was_ended_from_outside():
    """Virtual time's END stops the clock: a phase whose peer never answers
    ends with the stuck connections at once, not at a deadline that would
    never come."""
    clock = ManualClock()
    nics, ips = rail_nic_pairs(2, 400_000_000, clock)
    try:
        engines = [CollectiveEngine(server=s, servers=2, nics=[nics[(s, 0)], nics[(s, 1)]],
                                    rank_ips=ips, nvlink_rate_bps=1.6e9, nvlink_delay_ns=2000,
                                    slice_bytes=16384, slots=2, clock=clock) for s in (0, 1)]
        for e in engines:
            e.connect(bench.connections_for(2, 2, [("all_reduce", "ring")]))
        sch = bench.schedules(engines, "all_reduce", "ring", 64 << 10)
        e0 = engines[0]
        runs = [RankRun(r, e0.prepare(sch[r]), e0.new_buffers(sch[r]), e0.conns[r], [0],
                        clock=clock) for r in e0.ranks]
        e0.stop_flag[0] = True                  # server 1 is not driven: nothing comes back
        with pytest.raises(TimeoutError, match=r"the run was ended first; .*rank 0 iter 0/1"):
            drive([e0], runs, timeout_s=10.0)
        assert clock.now_ns() < 1_000_000_000     # not the 10 s deadline
    finally:
        for n in nics.values():
            n.close()


class _SpinGuard(ManualClock):
    """A manual clock that fails a loop asking the time too often without
    a wait (a loop that spins: the clock never moves, nothing ends it)."""

    __slots__ = ("reads",)
    MAX_READS = 100_000

    def now_ns(self) -> int:
        self.reads = getattr(self, "reads", 0) + 1
        if self.reads > self.MAX_READS:
            raise AssertionError(f"the loop spins at {self._now_ns} ns without waiting")
        return super().now_ns()

    def wait_readable(self, fds, deadline_ns):
        self.reads = 0
        return super().wait_readable(fds, deadline_ns)


def test_drive_times_out_at_its_deadline_on_a_clock_that_moves_only_in_waits():
    """A wait returns at the deadline itself (nothing else due): the loop
    then gives up, rather than wait for nothing until a later that never comes."""
    clock = _SpinGuard(T0)
    nics, ips = rail_nic_pairs(1, 400_000_000, clock)
    try:
        eng = CollectiveEngine(server=0, servers=1, nics=[nics[(0, 0)]], rank_ips={0: ips[0]},
                               nvlink_rate_bps=1e9, nvlink_delay_ns=100, clock=clock)
        with pytest.raises(TimeoutError, match="collective engine timed out"):
            drive([eng], [], timeout_s=0.001, until=lambda: False)
        assert clock.now_ns() == T0 + 1_000_000
    finally:
        for n in nics.values():
            n.close()


def test_infiniband_credit_updates_leave_the_loop_idle_time_for_the_result_checks():
    """A server agent checks its results in its loop's idle time and ends
    once none is left (``agent.run``). An InfiniBand NIC's periodic credit
    update (every 16 us) is no work: a loop that counted it would never be
    idle, and the server never done (allreduce-rail-ib in virtual time)."""
    clock = _SpinGuard(T0)
    nics, ips = rail_nic_pairs(2, 10_000_000_000, clock, ib=True)
    try:
        engines = [CollectiveEngine(server=s, servers=2, nics=[nics[(s, g)] for g in range(2)],
                                    rank_ips=ips, nvlink_rate_bps=4e10, nvlink_delay_ns=500,
                                    slice_bytes=16384, slots=2, clock=clock) for s in (0, 1)]
        for e in engines:
            e.connect(bench.connections_for(2, 2, [("all_reduce", "ring")]))
        recs = bench.measure(engines, "all_reduce", "ring", 64 << 10, iters=1, warmup_iters=0,
                             background_check=True)
        assert all(r["wrong"] is None for r in recs)            # left to the idle time
        assert sum(len(e.background) for e in engines) == 4
        t0 = clock.now_ns()
        drive(engines, [], 0.01,
              until=lambda: quiescent(engines) and not any(e.background for e in engines))
        assert all(r["wrong"] == 0 for r in recs)
        assert clock.now_ns() - t0 < 1_000_000                 # the last ACKs, not the deadline
    finally:
        for n in nics.values():
            n.close()


RATE = 10_000_000_000
DELAY_NS = 1000
G = 2


def _virtual_run(ib: bool = False) -> dict:
    """Two servers x 2 GPUs as a server agent runs them in virtual time:
    in the run once its work is done, answering until the run ends.
    ``ib``: InfiniBand NICs, HCA to HCA (a link packet takes no serializer
    time: the window is the delay alone)."""
    peers = {f"s0g{g}": f"s1g{g}" for g in range(G)}
    peers.update({b: a for a, b in peers.items()})
    links = [SimpleNamespace(delay_ns=DELAY_NS, rate_bps=RATE)]
    coord = Coordinator(peers, lookahead_ns(links, IB_MIN_WIRE_BYTES) if ib else lookahead_ns(links))
    out, errors, nics = {}, [], []
    try:
        ips = {s * G + g: f"10.9.{g}.{s + 1}" for s in (0, 1) for g in range(G)}
        lids = {ip: rank + 1 for rank, ip in ips.items()}
        macs = {(s, g): f"02:00:00:00:{s:02x}:{g:02x}" for s in (0, 1) for g in range(G)}
        clocks = [VirtualClock(coord.path, f"server{s}", agent=True) for s in (0, 1)]
        per_server = {0: [], 1: []}
        for g in range(G):
            pair = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            for s in (0, 1):
                port = clocks[s].attach_port(pair[s], f"s{s}g{g}")
                kw = {"lid": s * G + g + 1, "lids": lids} if ib else {}
                nic = (ib_nic if ib else roce_nic)(None, macs[(s, g)], ips[s * G + g],
                                                 macs[(1 - s, g)], rate_bps=RATE,
                                                 tx_delay_ns=DELAY_NS, sock=port,
                                                 clock=clocks[s], **kw)
                per_server[s].append(nic)
                nics.append(nic)

        def server(s: int) -> None:
            clock = clocks[s]
            eng = CollectiveEngine(server=s, servers=2, nics=per_server[s], rank_ips=ips,
                                   nvlink_rate_bps=4 * RATE, nvlink_delay_ns=500,
                                   slice_bytes=16384, slots=2, clock=clock)
            eng.connect(bench.connections_for(2, G, [("all_reduce", "ring")]))
            stop, finished = [False], [False]
            eng.stop_flag = stop
            leave = join_virtual_time(clock, lambda: finished[0], stop)
            try:
                clock.sleep_until_ns(0)
                recs = bench.measure([eng], "all_reduce", "ring", 64 << 10, iters=2,
                                     warmup_iters=1, background_check=True)
                tr = bench.train([eng], "all_reduce", "ring", 32 << 10, steps=2, warmup_steps=0,
                                 compute_ns=20_000, background_check=True)
                drive([eng], [], 1.0, until=lambda: quiescent([eng]) and not eng.background)
                bench.finish_checks([eng])
                finished[0] = True
                done_ns = clock.now_ns()
                drive([eng], [], 1.0, until=lambda: stop[0])
                out[s] = {"records": recs, "training": tr, "done_ns": done_ns,
                          "nics": [n.stats.as_dict() for n in per_server[s]]}
            except BaseException as e:      # pragma: no cover - reported below
                errors.append(e)
            finally:
                leave()

        threads = [threading.Thread(target=server, args=(s,), daemon=True) for s in (0, 1)]
        for t in threads:
            t.start()
        coord.start(register_timeout_s=30)
        assert coord.ended.wait(60), "the coordinator never ended"
        for t in threads:
            t.join(30)
        assert not errors, errors
        assert coord.error is None
        return {**out, "fabric_ns": coord.now_ns, "windows": coord.windows}
    finally:
        coord.close()
        for n in nics:
            n.close()


@pytest.mark.parametrize("ib", [False, True], ids=["roce", "infiniband"])
def test_two_servers_in_virtual_time_rerun_identically(ib):
    first, second = _virtual_run(ib), _virtual_run(ib)
    assert first == second
    recs = first[0]["records"] + first[1]["records"]
    rows = report.collective_rows(recs, 1.0)
    assert rows and all(r["wrong"] == 0 and r["inplace_wrong"] is None for r in rows)
    # a 64 KiB ring all-reduce on 4 ranks over 10 Gbps rails: at most the link's busbw
    assert 0 < rows[0]["busbw_GBps"] <= RATE / 8e9
    tr = report.training_summary(first[0]["training"] + first[1]["training"], 1.0)
    assert tr["wrong"] == 0 and tr["step_time_us"]["max"] >= 20
    # the run ended in the window where the later server's work was done, not after a linger
    done_ns = max(first[s]["done_ns"] for s in (0, 1))
    links = [SimpleNamespace(delay_ns=DELAY_NS, rate_bps=RATE)]
    L = lookahead_ns(links, IB_MIN_WIRE_BYTES) if ib else lookahead_ns(links)
    assert done_ns - L < first["fabric_ns"] <= done_ns
