"""How the switch's turn reads a real socket (``switch_port.polling_reader``,
the dilated-time twin of ``VirtualPort.next_frame``): each frame as sent,
then None once the socket holds nothing -- never an exception."""
from __future__ import annotations

import socket

from emulator.dataplane.switch_port import RX_MAX_BYTES, polling_reader


def test_the_reader_gives_each_frame_then_none_once_the_socket_is_empty():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with a, b:
        b.setblocking(False)
        read = polling_reader(b)
        assert read() is None
        a.send(b"one")
        a.send(bytes(RX_MAX_BYTES))          # a jumbo frame, whole
        assert read() == b"one"
        assert read() == bytes(RX_MAX_BYTES)
        assert read() is None
        a.send(b"two")                       # a frame after an empty read is not lost
        assert read() == b"two"
