"""A flood into a switch that falls behind: nothing vanishes uncounted.

Needs root. A real switch process (``python -m emulator.dataplane``, as
leaf1 of clos-2x2, ports 1 and 2 on veths: ``tests/switch_rig.py``) is
stopped (SIGSTOP) while h2's namespace floods port 2 with malformed frames
(a bad IPv4 checksum): what the port's socket cannot hold, the kernel
drops, as it did under the testers' flood that reached leaf1's pipeline as
14,824 of 19,048 frames. The switch then goes on (SIGCONT); good frames
sent after the flood, one after the other until the last one sent leaves
port 1, show that the switch has read everything before it (a socket is a
FIFO), so the counts are final without waiting on time. Every frame sent
is either counted by the pipeline or by the port's ``rx_socket_drops`` in
the switch's stats.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time

from emulator.dataplane.malformed import Malformed
from emulator.p4.p4info import P4Info
from tests.packet_cases import (
    DEVICE_ID, H1_MAC, H1_PORT, H2_MAC, H2_PORT, ipv4_checksum, malformed_counts, program,
    rocev2, to_h1, with_ipv4_checksum,
)
from tests.switch_rig import SwitchRig, recv_ready, requires_netns

pytestmark = requires_netns

FLOOD_FRAMES = 25_000      # the switch's 4 MiB socket buffer holds ~10,000 of them
WAIT_S = 30.0


def _send_all(sock, frame: bytes, n: int) -> None:
    """``n`` copies on a non-blocking socket, waiting for room when it has none."""
    sent = 0
    while sent < n:
        try:
            assert sock.send(frame) == len(frame)
            sent += 1
        except BlockingIOError:
            select.select([], [sock], [], 1.0)


def test_a_flood_a_stopped_switch_could_not_read_is_counted_as_socket_drops(request, tmp_path):
    rig = SwitchRig("sd", {H1_PORT: H1_MAC, H2_PORT: H2_MAC})
    request.addfinalizer(rig.close)
    stats_path = tmp_path / "leaf1.stats.json"
    rig.start({"name": "leaf1", "device_id": DEVICE_ID, "stats_path": str(stats_path),
               "ports": [{"port_no": p, "rate_bps": 10_000_000_000, "delay_ns": 0}
                         for p in (H1_PORT, H2_PORT)]}, tmp_path)
    program(rig.conn, P4Info.load())
    good = rocev2(ip_id=77)
    bad = with_ipv4_checksum(good, ipv4_checksum(good) ^ 0x5A5A)
    os.kill(rig.proc.pid, signal.SIGSTOP)
    try:
        _send_all(rig.socks[H2_PORT], bad, FLOOD_FRAMES)
    finally:
        os.kill(rig.proc.pid, signal.SIGCONT)
    # A marker sent while the socket is still full is dropped too: send one
    # after the other until the last one sent comes out.
    deadline = time.monotonic() + WAIT_S
    markers, out = [], []
    while not markers or markers[-1] not in out:
        assert time.monotonic() < deadline, f"no marker came out of port 1 ({len(markers)} sent)"
        m = rocev2(ip_id=1000 + len(markers))
        _send_all(rig.socks[H2_PORT], m, 1)
        markers.append(to_h1(m))
        end = time.monotonic() + 0.2
        while markers[-1] not in out and time.monotonic() < end:
            out += [f for _, f in recv_ready({H1_PORT: rig.socks[H1_PORT]}, 0.02)]
    markers_out = sum(f in out for f in markers)
    rx_packets = rig.conn.read_counter("rx_port_counter", index=H2_PORT)[H2_PORT][0]
    malformed = malformed_counts(rig.conn, H2_PORT)[Malformed.IPV4_CHECKSUM][0]
    rig.proc.terminate()                       # the switch writes its stats as it exits
    assert rig.proc.wait(timeout=10) == 0
    ports = {p["port"]: p for p in json.loads(stats_path.read_text())["ports"]}
    drops = ports[H2_PORT]["rx_socket_drops"]
    veth = subprocess.run(["ip", "-s", "link", "show", rig.sw_if[H2_PORT]],
                          capture_output=True, text=True).stdout
    print(f"flood {FLOOD_FRAMES}, markers {len(markers)} (out {markers_out}): "
          f"pipeline read {rx_packets} ({malformed} malformed), socket drops {drops}")
    assert drops > 0
    # everything sent into port 2 was read by the pipeline or dropped at its socket
    assert rx_packets + drops == FLOOD_FRAMES + len(markers), (rx_packets, drops, veth)
    assert rx_packets == malformed + markers_out
    assert ports[H1_PORT]["rx_socket_drops"] == 0
