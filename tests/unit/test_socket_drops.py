"""Frames the kernel drops at a packet socket whose process did not read in
time: read from real AF_PACKET sockets (``PACKET_STATISTICS``, which resets
the kernel's counters at every read) and accumulated, by the reader itself,
a NIC (both its sockets) and a switch's ports (Ethernet and InfiniBand), whose
stats then carry them per port. The senders here are AF_PACKET sockets in
the other namespace of a veth pair; nothing reads the receiving socket while
they send, so its receive buffer fills and the kernel drops the rest.

Exact counts only: what the kernel saw arrive (``packets``) is what the
receiver read plus what was dropped. (Not what was sent: a loaded machine
may drop on the veth's backlog before the socket, which is not the
socket's loss.)"""
from __future__ import annotations

import json
import select
import socket

import pytest

from emulator.nic import roce
from emulator.nic.packet_socket import SocketRxStats, open_packet_socket
from emulator.clock import MONOTONIC
from emulator.dataplane.pfc import pause_frame
from emulator.schema.switch import SwitchConfig

from .test_nic_loopback import needs_root, veth  # noqa: F401  (fixture)
from .veth_nics import IP, MAC, netns, open_nic

ETH_P_TEST = 0x88B5                 # IEEE local experimental: nothing else sends it


def _test_frame(size: int = 60) -> bytes:
    dst, src = (bytes.fromhex(MAC[s].replace(":", "")) for s in "ba")
    return dst + src + ETH_P_TEST.to_bytes(2, "big") + bytes(size - 14)


def _injector(env) -> socket.socket:
    """A blocking packet socket on side a's interface: each send returns once
    the frame is past the veth."""
    with netns(env["ns"]["a"]):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((env["dev"]["a"], 0))
    return s


def _send(sock: socket.socket, frames) -> int:
    n = 0
    for f in frames:
        assert sock.send(f) == len(f)
        n += 1
    return n


def _read_all(sock: socket.socket) -> int:
    n = 0
    while True:
        try:
            sock.recv(65535)
        except BlockingIOError:
            return n
        n += 1


def test_a_socket_that_is_not_a_packet_socket_or_is_closed_reads_nothing():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        st = SocketRxStats(a)
        b.send(b"x")
        assert st.poll() == 0 and (st.packets, st.drops) == (0, 0)
    finally:
        a.close()
        b.close()
    assert st.poll() == 0                         # closed: no error either


@needs_root
def test_the_reader_accumulates_the_kernels_drops_across_reads(veth):  # noqa: F811
    with netns(veth["ns"]["b"]):                  # the smallest receive buffer the kernel allows
        rx = open_packet_socket(veth["dev"]["b"], None, 1, 1 << 16, ETH_P_TEST)
    rx.setblocking(False)
    tx = _injector(veth)
    try:
        st = SocketRxStats(rx)
        sent1 = _send(tx, [_test_frame(1000)] * 200)
        new1 = st.poll()
        read1 = _read_all(rx)
        assert new1 == st.drops > 0
        assert st.packets == read1 + st.drops
        assert sent1 >= st.packets
        # the kernel's counters were reset by the read: the next batch's are added
        _send(tx, [_test_frame(1000)] * 100)
        new2 = st.poll()
        read2 = _read_all(rx)
        assert new2 > 0 and st.drops == new1 + new2
        assert st.packets == read1 + read2 + st.drops
        assert st.poll() == 0 and st.drops == new1 + new2      # nothing new: nothing added
        # a new window: totals from 0, and only what came after
        st.clear()
        assert (st.packets, st.drops) == (0, 0)
        _send(tx, [_test_frame(60)])
        st.poll()
        assert (st.packets, st.drops, _read_all(rx)) == (1, 0, 1)
    finally:
        rx.close()
        tx.close()
    assert st.poll() == 0


@needs_root
def test_a_nic_counts_the_drops_of_both_its_sockets(veth):  # noqa: F811
    """RoCE frames into a data socket of the smallest buffer, PFC frames into
    the PFC socket (1 MiB: a few thousand 64-byte frames): more dropped than
    the data socket could have, and frames read + dropped = frames that arrived."""
    nic = open_nic(veth, "b", 10_000_000, rcvbuf_bytes=1)
    tx = _injector(veth)
    try:
        tpl = roce.FrameTemplate(MAC["a"], MAC["b"], IP["a"], IP["b"], 50000, 99)  # no such QP
        data = bytes(tpl.build(roce.RC_WRITE_ONLY, 0, bytes(1024), ack_req=True,
                               reth=(0x1000, 0x100, 1024)))
        n_data = _send(tx, [data] * 300)
        pfc = pause_frame(bytes.fromhex(MAC["a"].replace(":", "")), 3, 0)     # resume: no pause
        _send(tx, [pfc] * 8000)
        nic.poll_kernel_stats()
        st = nic.stats
        assert st.rx_socket_drops > n_data        # the PFC socket's drops are counted too
        for _ in range(1000):                     # read what the sockets kept
            nic.run_once(0)
            if not select.select(nic.rx_fds, [], [], 0)[0]:
                break
        nic.poll_kernel_stats()
        arrived = sum(k.packets for k in nic._rx_kernel)
        assert st.rx_ignored + st.pfc_rx + st.rx_socket_drops == arrived
        assert nic.stats.as_dict()["rx_socket_drops"] == st.rx_socket_drops
    finally:
        nic.close()
        tx.close()


def _switch(veth, tmp_path, kind: str):  # noqa: F811
    cfg = {"name": "sw", "device_id": 3, "grpc_port": 1,
           "stats_path": str(tmp_path / "sw.stats.json"),
           "ports": [{"port_no": 1, "ifname": veth["dev"]["b"], "rate_bps": 10**9,
                      "delay_ns": 0}]}
    if kind == "ib":
        cfg["ib"] = {"vls": 1, "buffer_blocks": 1000, "update_blocks": 1,
                     "update_period_ns": 10_000_000_000}
    path = tmp_path / "sw.json"
    path.write_text(json.dumps(cfg))
    scfg = SwitchConfig.load(path)
    from emulator.p4.p4info import IB_P4INFO, P4Info
    with netns(veth["ns"]["b"]):
        if kind == "ib":
            from emulator.ib.switch import IbSwitch
            return IbSwitch(scfg, P4Info.load(IB_P4INFO), MONOTONIC)
        from emulator.dataplane.switch import EmbeddedSwitch
        return EmbeddedSwitch(scfg, P4Info.load(), MONOTONIC)


def _drain(sw) -> None:
    """Turns until the switch has read every frame its sockets kept."""
    for _ in range(10_000):
        readable = select.select(sw.fds, [], [], 0)[0]
        if not readable:
            return
        sw.turn(readable)
    raise AssertionError("the switch never emptied its sockets")


@needs_root
@pytest.mark.parametrize("kind", ["embedded", "ib"])
def test_a_switch_port_counts_what_the_kernel_dropped_at_its_socket(veth, tmp_path,  # noqa: F811
                                                                   kind):
    """A flood of small frames (the switch's 4 MiB buffer holds ~10,000)
    while the switch does not read: its port's stats count the drops, and
    what the switch read plus them is what reached the port. A snapshot
    (embedded switch) ends the window: the next one counts anew."""
    sw = _switch(veth, tmp_path, kind)
    tx = _injector(veth)
    try:
        sw.begin()
        port = sw.ports[1]
        _send(tx, [_test_frame(60)] * 25_000)
        (p1,) = sw.stats()["ports"]
        assert p1["port"] == 1 and p1["rx_socket_drops"] > 0
        _drain(sw)
        (p1,) = sw.stats()["ports"]
        assert sw.rx_frames + p1["rx_socket_drops"] == port.rx_kernel.packets
        if kind == "ib":
            return
        sw.snapshot(MONOTONIC.now_ns())
        (snap,) = json.loads((tmp_path / "sw.stats.json").read_text())["ports"]
        assert snap["rx_socket_drops"] == p1["rx_socket_drops"]
        _send(tx, [_test_frame(60)] * 10)
        _drain(sw)
        (p1,) = sw.stats()["ports"]
        assert (p1["rx_socket_drops"], sw.rx_frames, port.rx_kernel.packets) == (0, 10, 10)
    finally:
        tx.close()
        sw.close()
        for p in sw.ports.values():
            p.sock.close()
