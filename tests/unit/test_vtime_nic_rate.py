"""A RoCE NIC in virtual time sends at its link's exact rate: back-to-back
MTU frames start a fractional frame time apart (88.48 ns at 100 Gb/s), as
on the manual clock. Its loop wakes at a slot's ceiling ns; the catch-up
window of a clock that is never late must let such a slot stand, not move
it to the ns (89 ns a frame: the link 0.6 % slow, every FCT with it).

Members in threads, as tests/unit/test_vtime.py runs them: the NIC an agent
on a datagram socket pair, the other end a receiver taking every frame at
its arrival."""
from __future__ import annotations

from types import SimpleNamespace

from tests.nics import roce_nic
from emulator.vtime.coordinator import lookahead_ns
from emulator.vtime.member import VirtualClock
from emulator.wire import WIRE_OVERHEAD_BYTES

from .test_vtime import coord_factory, link, receiver, run_members  # noqa: F401

RATE_BPS = 100_000_000_000
DELAY_NS = 1000
MTU = 1024
FRAMES = 64
END_NS = DELAY_NS + 2 * FRAMES * 90


def test_back_to_back_frames_leave_at_the_exact_line_rate(coord_factory):
    coord = coord_factory({"h-eth0": "s-eth1", "s-eth1": "h-eth0"},
                          lookahead_ns([SimpleNamespace(delay_ns=DELAY_NS, rate_bps=RATE_BPS)]))
    h_sock, s_sock = link("h-eth0", "s-eth1")
    h = VirtualClock(coord.path, "h", agent=True)
    s = VirtualClock(coord.path, "s")
    nic = roce_nic(None, "02:00:00:00:00:01", "10.9.0.1", "02:00:00:00:00:02", clock=h,
                   sock=h.attach_port(h_sock, "h-eth0"), rate_bps=RATE_BPS, mtu_bytes=MTU,
                   tx_delay_ns=DELAY_NS)
    port = s.attach_port(s_sock, "s-eth1")
    qp = nic.create_qp(16, "10.9.0.2", 32)
    mr = nic.register_mr(FRAMES * MTU)

    def sender():
        h.done = lambda: h.now_ns() >= END_NS           # every frame arrived by then
        h.sleep_until_ns(0)
        nic.post_write(qp, 1, (mr, 0, FRAMES * MTU), 0x1000, 7)
        while not h.ended:
            nic.run_once(1.0)

    try:
        out = run_members(coord, {"h": sender, "s": lambda: receiver(s, [port])})
    finally:
        nic.close()
    got, _ = out["s"]
    assert coord.error is None
    at = [t for t, _, frame in got]
    lengths = [len(frame) for _, _, frame in got]
    assert len(at) == FRAMES and len(set(lengths[1:])) == 1      # the first carries the RETH
    frame_ns = (lengths[1] + WIRE_OVERHEAD_BYTES) * 8e9 / RATE_BPS
    assert frame_ns % 1                                           # a fractional frame time
    # Each frame is taken at its arrival's ceiling ns: the schedule is the exact
    # one, rounded up once per frame, never once per frame and carried on.
    first_end = (lengths[0] + WIRE_OVERHEAD_BYTES) * 8e9 / RATE_BPS
    for k in range(1, FRAMES):
        exact = first_end + k * frame_ns + DELAY_NS
        assert exact - 1e-6 <= at[k] < exact + 1, (k, at[k], exact)
