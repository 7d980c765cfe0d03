"""Virtual time's window protocol (emulator/vtime), members in threads.

Real parts: the coordinator's Unix socket, each member's ``VirtualClock``
and ``VirtualPort``s over datagram socket pairs standing for veths (a
frame, its trailer, the kernel's queue). What a fabric adds -- packet
sockets on veths in namespaces -- is the integration test's
(tests/integration/test_virtual_time.py)."""
from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace

import pytest

from emulator.link import CommitWire
from emulator.vtime import protocol
from emulator.vtime.coordinator import IB_MIN_WIRE_BYTES, Coordinator, lookahead_ns
from emulator.vtime.member import VIRTUAL_UNIX_EPOCH_NS, VirtualClock
from emulator.vtime.trailer import TRAILER_BYTES, arrival_of, trailer

FOREVER = 1 << 61


def link(a: str, b: str) -> tuple[socket.socket, socket.socket]:
    """Two ends of a "veth": datagrams keep frame boundaries, as a packet socket does."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)


def run_members(coord: Coordinator, bodies: dict, timeout_s: float = 20.0) -> dict:
    """Each body(clock) in a thread of its own; the coordinator started; results by name."""
    out, errors = {}, []

    def wrap(name, body):
        try:
            out[name] = body()
        except BaseException as e:      # pragma: no cover - reported below
            errors.append((name, e))

    threads = [threading.Thread(target=wrap, args=(n, b), daemon=True) for n, b in bodies.items()]
    for t in threads:
        t.start()
    coord.start(register_timeout_s=timeout_s)
    assert coord.ended.wait(timeout_s), "the coordinator never ended"
    for t in threads:
        t.join(timeout_s)
    assert not errors, errors
    return out


@pytest.fixture
def coord_factory():
    made = []

    def make(peers: dict[str, str], lookahead: int) -> Coordinator:
        c = Coordinator(peers, lookahead)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def pair(coord_factory, lookahead: int, b_agent: bool = True):
    """Two members "a" (an agent) and "b" joined by one link: (coordinator, a, b, a's port, b's port)."""
    coord = coord_factory({"a-eth0": "b-eth0", "b-eth0": "a-eth0"}, lookahead=lookahead)
    a_sock, b_sock = link("a-eth0", "b-eth0")
    a = VirtualClock(coord.path, "a", agent=True)
    b = VirtualClock(coord.path, "b", agent=b_agent)
    return coord, a, b, a.attach_port(a_sock, "a-eth0"), b.attach_port(b_sock, "b-eth0")


def sender(clock: VirtualClock, port, sends, stamps: list):
    """An agent: sends ``(at_ns, arrival_ns, payload)`` at their times, then waits for the end."""
    sent = [0]
    clock.done = lambda: sent[0] == len(sends)
    for at_ns, arrival_ns, payload in sends:
        clock.sleep_until_ns(at_ns)
        stamps.append(clock.now_ns())
        port.send_at(payload, arrival_ns)
        sent[0] += 1
    while not clock.ended:
        clock.wait_readable((), FOREVER)
    return clock.stats()


def receiver(clock: VirtualClock, ports, expect: int | None = None):
    """Every frame taken at its arrival, in the loop's port order; an agent
    done once it has ``expect`` frames (None: a switch, whose end does not matter)."""
    got = []
    if expect is not None:
        clock.done = lambda: len(got) >= expect
    fds = [p.fileno() for p in ports]
    by_fd = {p.fileno(): p for p in ports}
    while not clock.ended:
        for fd in clock.wait_readable(fds, FOREVER):
            while True:
                try:
                    got.append((clock.now_ns(), by_fd[fd].ifname, by_fd[fd].recv()))
                except BlockingIOError:
                    break
    return got, clock.stats()


def test_frames_are_seen_at_their_arrival_and_idle_stretches_are_skipped(coord_factory):
    coord, a, b, pa, pb = pair(coord_factory, 50)
    sends = [(0, 50, b"one"), (100, 170, b"two"), (10_000_000, 10_000_060, b"three")]
    stamps = []
    out = run_members(coord, {"a": lambda: sender(a, pa, sends, stamps),
                              "b": lambda: receiver(b, [pb], 3)})
    got, b_stats = out["b"]
    assert [(t, f) for t, _, f in got] == [(50, b"one"), (170, b"two"), (10_000_060, b"three")]
    assert stamps == [0, 100, 10_000_000]
    # 10 ms of nothing is not 200,000 windows of 50 ns: about one per event
    assert coord.windows <= 8
    assert b_stats["early_frames"] == 0 and b_stats["foreign_frames"] == 0
    assert a.unix_ns() == VIRTUAL_UNIX_EPOCH_NS + a.now_ns()


def test_next_frame_is_none_until_a_frame_is_due_then_each_in_arrival_order(coord_factory):
    """``next_frame`` (how the switch and the NIC read a port): None, not an
    exception, once nothing more is due; the frames due in arrival order,
    same-time ones as sent; ``recv`` still raises when nothing is due."""
    coord, a, b, pa, pb = pair(coord_factory, 50)
    sends = [(0, 900, b"late"), (0, 60, b"one"), (0, 60, b"two")]

    def reader():
        got, batches, empty_recv_raised = [], [], 0
        b.done = lambda: len(got) >= 3
        assert pb.next_frame() is None                 # nothing has arrived yet
        while not b.ended:
            if b.wait_readable([pb.fileno()], FOREVER):
                n = len(got)
                while (frame := pb.next_frame()) is not None:
                    got.append((b.now_ns(), frame))
                batches.append(len(got) - n)
                try:
                    pb.recv()
                except BlockingIOError:
                    empty_recv_raised += 1
        return got, batches, empty_recv_raised

    out = run_members(coord, {"a": lambda: sender(a, pa, sends, []), "b": reader})
    got, batches, raised = out["b"]
    assert got == [(60, b"one"), (60, b"two"), (900, b"late")]
    assert batches == [2, 1] and raised == 2


def test_frames_sent_at_time_zero_before_the_first_wait_are_waited_for(coord_factory):
    """An agent's first frames go out when it starts, before its loop first
    waits: its first report carries them, and they wake their receiver."""
    coord, a, b, pa, pb = pair(coord_factory, 50)

    def eager():
        pa.send_at(b"first", 60)          # before any wait: fabric time 0
        return sender(a, pa, [(1000, 1070, b"second")], [])

    out = run_members(coord, {"a": eager, "b": lambda: receiver(b, [pb], 2)})
    assert coord.error is None
    got, _ = out["b"]
    assert [(t, f) for t, _, f in got] == [(60, b"first"), (1070, b"second")]


def test_same_time_arrivals_follow_the_loops_port_order_not_the_socket_reads(coord_factory):
    peers = {"a-eth0": "s-eth1", "s-eth1": "a-eth0", "c-eth0": "s-eth2", "s-eth2": "c-eth0"}
    coord = coord_factory(peers, lookahead=10)
    a_sock, s1 = link("a-eth0", "s-eth1")
    c_sock, s2 = link("c-eth0", "s-eth2")
    a = VirtualClock(coord.path, "a", agent=True)
    c = VirtualClock(coord.path, "c", agent=True)
    s = VirtualClock(coord.path, "s", agent=True)
    pa, pc = a.attach_port(a_sock, "a-eth0"), c.attach_port(c_sock, "c-eth0")
    ps1, ps2 = s.attach_port(s1, "s-eth1"), s.attach_port(s2, "s-eth2")
    # c sends first in wall time (a waits for it), both arrive at 500
    c_sent = threading.Event()

    def late_a():
        a.sleep_until_ns(100)
        c_sent.wait(5)                   # same window as c's, later in wall time
        pa.send_at(b"from-a", 500)
        while not a.ended:
            a.wait_readable((), FOREVER)

    def early_c():
        c.sleep_until_ns(100)
        pc.send_at(b"from-c", 500)
        c_sent.set()
        while not c.ended:
            c.wait_readable((), FOREVER)

    out = run_members(coord, {"a": late_a, "c": early_c, "s": lambda: receiver(s, [ps1, ps2], 2)})
    got, _ = out["s"]
    assert [(t, i, f) for t, i, f in got] == [(500, "s-eth1", b"from-a"), (500, "s-eth2", b"from-c")]


def slow_link(delay_s: float) -> tuple[socket.socket, socket.socket]:
    """A "veth" whose frames take ``delay_s`` of wall time to cross, in
    order: a cluster's ssh-carried tap between two servers."""
    a_end, relay_in = link("a", "r")
    relay_out, b_end = link("r", "b")

    def relay():
        while frame := relay_in.recv(65536):
            time.sleep(delay_s)
            relay_out.send(frame)
    threading.Thread(target=relay, daemon=True).start()
    return a_end, b_end


def test_a_frame_late_in_wall_time_is_waited_for_on_its_own_link(coord_factory):
    """A frame sent in one window over a slow link (a cluster's tunnel) is
    still on its way when a fast link's frame of the next window arrives:
    the receiver waits for each link's own frames, never counts the fast
    one in place of the slow one."""
    peers = {"a-eth0": "c-eth1", "c-eth1": "a-eth0", "b-eth0": "c-eth2", "c-eth2": "b-eth0"}
    coord = coord_factory(peers, lookahead=50)
    a_sock, c1 = slow_link(0.3)
    b_sock, c2 = link("b-eth0", "c-eth2")
    a = VirtualClock(coord.path, "a", agent=True)
    b = VirtualClock(coord.path, "b", agent=True)
    c = VirtualClock(coord.path, "c", agent=True)
    pa, pb = a.attach_port(a_sock, "a-eth0"), b.attach_port(b_sock, "b-eth0")
    pc1, pc2 = c.attach_port(c1, "c-eth1"), c.attach_port(c2, "c-eth2")
    fast = [(100 * k + 10, 100 * k + 70, b"b%d" % k) for k in range(1, 11)]
    out = run_members(coord, {"a": lambda: sender(a, pa, [(0, 500, b"slow")], []),
                              "b": lambda: sender(b, pb, fast, []),
                              "c": lambda: receiver(c, [pc1, pc2], 11)})
    assert coord.error is None, coord.error
    got, stats = out["c"]
    assert [(t, f) for t, _, f in got] == sorted([(500, b"slow")] + [(t, f) for _, t, f in fast])
    assert stats["early_frames"] == 0


def test_a_frame_stamped_inside_its_window_ends_the_run_saying_so(coord_factory):
    coord, a, b, pa, pb = pair(coord_factory, 1000)
    # arrival 10 ns after it was sent: shorter than the lookahead, a broken link model
    run_members(coord, {"a": lambda: sender(a, pa, [(0, 10, b"x"), (5000, 6000, b"y")], []),
                        "b": lambda: receiver(b, [pb], 2)})
    assert coord.error is not None
    assert "a sent a frame on a-eth0 arriving at 10 ns, inside the window" in coord.error


def test_a_frame_without_the_trailer_is_dropped_and_counted(coord_factory):
    coord, a, b, pa, pb = pair(coord_factory, 50)
    pa.sock.send(b"kernel chatter, no trailer")
    out = run_members(coord, {"a": lambda: sender(a, pa, [(0, 100, b"ours")], []),
                              "b": lambda: receiver(b, [pb], 1)})
    got, stats = out["b"]
    assert [f for _, _, f in got] == [b"ours"]
    assert stats["foreign_frames"] == 1


def test_a_member_that_dies_mid_run_ends_the_run_with_its_name(coord_factory):
    coord = coord_factory({"a-eth0": "b-eth0", "b-eth0": "a-eth0"}, lookahead=50)
    a_sock, b_sock = link("a-eth0", "b-eth0")
    a = VirtualClock(coord.path, "a", agent=True)
    b = VirtualClock(coord.path, "b")
    a.attach_port(a_sock, "a-eth0")
    pb = b.attach_port(b_sock, "b-eth0")

    def dies():
        a.done = lambda: False
        a.sleep_until_ns(100)        # one window, then its connection closes mid-run
        a._conn.close()

    run_members(coord, {"a": dies, "b": lambda: receiver(b, [pb])})
    assert coord.error is not None and "a went away" in coord.error


def test_the_run_ends_when_every_agent_is_done_not_at_its_linger(coord_factory):
    coord, a, b, pa, pb = pair(coord_factory, 50, b_agent=False)
    ended_at = []

    def lingering():
        stop = [False]
        a.on_end = lambda: stop.__setitem__(0, True)
        a.done = lambda: a.now_ns() >= 1000
        pa.send_at(b"x", 60)
        while not stop[0]:               # would wake every 100 ns for a second of linger
            a.sleep_until_ns(a.now_ns() + 100)
        ended_at.append(a.now_ns())

    run_members(coord, {"a": lingering, "b": lambda: receiver(b, [pb])})
    assert ended_at and 1000 <= ended_at[0] <= 1100
    assert coord.windows < 20


def test_protocol_messages_round_trip():
    msg = protocol.report(12345, True, [(0, 3, 777), (2, 1, 999)])
    assert protocol.parse_report(msg) == (protocol.REPORT, 12345, True, [(0, 3, 777), (2, 1, 999)])
    assert protocol.parse_go(protocol.go(4000, 5000, [(0, 42), (3, 1)])) == (4000, 5000,
                                                                           [(0, 42), (3, 1)])
    assert protocol.parse_go(protocol.go(0, 1, [])) == (0, 1, [])
    with pytest.raises(ValueError):
        protocol.parse_report(protocol.go(0, 1, [(0, 1)]) + bytes(4))
    with pytest.raises(ValueError):
        protocol.parse_go(msg)


def test_trailer_round_trip_and_foreign_frames():
    frame = bytes(range(60))
    assert arrival_of(frame + trailer(123_456_789)) == 123_456_789
    assert arrival_of(frame) is None
    assert TRAILER_BYTES == 12


def test_lookahead_is_the_smallest_links_propagation_plus_a_minimum_frame():
    links = [SimpleNamespace(rate_bps=100_000_000_000, delay_ns=1000),
             SimpleNamespace(rate_bps=25_000_000_000, delay_ns=500)]
    # (60 + 24 bytes) x 8 / 25 Gb/s = 26.88 ns
    assert lookahead_ns(links) == 526
    # a link without delay still has the smallest frame's serialization
    assert lookahead_ns([SimpleNamespace(rate_bps=100_000_000_000, delay_ns=0)]) == 6
    # InfiniBand's shortest, a 6-byte flow-control packet: 0.48 ns, never below 1 ns
    assert lookahead_ns([SimpleNamespace(rate_bps=100_000_000_000, delay_ns=0)],
                        IB_MIN_WIRE_BYTES) == 1


def test_commit_wire_hands_a_frame_over_at_once_stamped_with_its_arrival():
    out = []
    w = CommitWire(1000, lambda frame, arrival: out.append((frame, arrival)))
    w.put(500, b"a")                     # the NIC's and InfiniBand's path
    w.in_flight.append((2600, b"b"))     # a switch port's serve appends itself
    assert w.release(0) == 1             # ... and is released however early
    assert out == [(b"a", 1500), (b"b", 2600)]
    assert w.next_release_ns() is None
    assert w.lateness_stats()["max_lateness_ns"] == 0


def test_between_windows_comes_once_every_member_has_passed_the_windows_end(coord_factory):
    coord, a, b, pa, pb = pair(coord_factory, 50)
    calls = []
    # what each member's clock had reached when the hook ran: never the window's end
    coord.between_windows = lambda end: calls.append((end, a.now_ns(), b.now_ns()))
    sends = [(0, 50, b"one"), (100, 170, b"two"), (1000, 1060, b"three")]
    run_members(coord, {"a": lambda: sender(a, pa, sends, []), "b": lambda: receiver(b, [pb], 3)})
    assert coord.error is None and len(calls) == coord.windows >= 3
    ends = [end for end, _, _ in calls]
    assert ends == sorted(set(ends))
    assert all(now_a < end and now_b < end for end, now_a, now_b in calls)


def test_what_between_windows_raises_ends_the_run_saying_so(coord_factory):
    coord, a, b, pa, pb = pair(coord_factory, 50)

    def fails(end):
        raise RuntimeError("controller: the reroute failed")
    coord.between_windows = fails
    run_members(coord, {"a": lambda: sender(a, pa, [(0, 50, b"x"), (500, 560, b"y")], []),
                        "b": lambda: receiver(b, [pb])})
    assert coord.error is not None and "controller: the reroute failed" in coord.error


def test_a_switch_ports_committed_frames_go_in_one_call_stamped_in_order_and_counted(coord_factory):
    coord, a, b, pa, pb = pair(coord_factory, 50)
    w = CommitWire(1000, None, pa.send_flight)
    # a switch's bytes, a rewritten bytearray, a NIC's view; a paced time is never early
    w.in_flight.extend([(1500, b"one"), (2600.25, bytearray(b"two")), (2700, memoryview(b"three"))])
    assert w.release(0) == 3 and not w.in_flight
    got = [pb.sock.recv(100) for _ in range(3)]
    assert [(arrival_of(d), d[:-TRAILER_BYTES]) for d in got] == [
        (1500, b"one"), (2601, b"two"), (2700, b"three")]
    assert a._take_sent() == [(0, 3, 1500)]          # the window's report: 3 frames, earliest 1500
    assert pa.tx_frames == 3


def test_a_frame_the_kernel_refuses_for_good_goes_to_on_refused_and_the_rest_still_go(coord_factory):
    coord, a, b, pa, pb = pair(coord_factory, 50)
    w = CommitWire(1000, None, pa.send_flight)
    pb.sock.close()                      # the peer is gone: ECONNREFUSED, not a full queue
    w.in_flight.extend([(1500, b"x"), (1600, b"y")])
    with pytest.raises(OSError):         # nobody counts refusals: raised
        w.release(0)
    refused = []
    pa.on_refused = lambda: refused.append(1)
    w.in_flight.clear()
    w.in_flight.extend([(1500, b"x"), (1600, b"y")])
    assert w.release(0) == 2
    assert refused == [1, 1] and not w.in_flight


def test_a_window_reads_each_port_for_the_frames_it_is_owed_and_no_more(coord_factory):
    coord = coord_factory({"a-eth0": "b-eth0", "b-eth0": "a-eth0",
                           "c-eth0": "b-eth1", "b-eth1": "c-eth0"}, lookahead=50)
    a_sock, b0_sock = link("a-eth0", "b-eth0")
    c_sock, b1_sock = link("c-eth0", "b-eth1")
    a, b, c = (VirtualClock(coord.path, n) for n in "abc")
    pa, pc = a.attach_port(a_sock, "a-eth0"), c.attach_port(c_sock, "c-eth0")
    pb0, pb1 = b.attach_port(b0_sock, "b-eth0"), b.attach_port(b1_sock, "b-eth1")
    for i, t in enumerate((100, 200, 300)):
        pa.send_at(b"a%d" % i, t)
    pc.send_at(b"c0", 150)
    b._rx_expected[:] = [2, 0]           # a GO counted 2 frames on b-eth0, none on b-eth1
    b._read_sockets(0)
    assert sorted(f for _, _, f in pb0.inbox) == [b"a0", b"a1"] and pb0.rx_frames == 2
    assert not pb1.inbox and pb1.rx_frames == 0      # owed nothing: not read
    # what was not counted yet waits in its socket for the GO that counts it
    b._rx_expected[:] = [3, 1]
    b._read_sockets(0)
    assert sorted(f for _, _, f in pb0.inbox) == [b"a0", b"a1", b"a2"]
    assert [f for _, _, f in pb1.inbox] == [b"c0"] and b.rx_frames == 4
