"""Connections of the runner's gRPC clients, made from the management host.

The controller and the telemetry collector run in the runner process, in
the root namespace, and gRPC opens its connections on threads of its own:
a thread that ``setns``-ed into the management host could not hold them
there (``setns(2)`` is per thread). So each switch server the runner calls
gets a listening socket in the runner's abstract unix namespace
(``unix-abstract:`` targets, which gRPC dials), and each connection to it
is carried by a TCP connection *created inside the management host's
namespace* (``emulator.netns.network_of``) to the switch's management
address: on the wire, every P4Runtime and gNMI byte goes from the
management host over the out-of-band network. The bytes are copied as they
come, in both directions; a connection's end (either side) ends both.
"""
from __future__ import annotations

import os
import socket
import threading

from emulator.netns import network_of

CONNECT_TIMEOUT_S = 5.0
CHUNK_BYTES = 1 << 16


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(CHUNK_BYTES):
            dst.sendall(data)
    except OSError:
        pass
    for sock in (dst, src):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class ManagementRelay:
    """Per (address, port) on the management network: a ``unix-abstract:``
    target whose connections leave from the namespace of process ``netns_pid``."""

    def __init__(self, netns_pid: int):
        self.netns_pid = netns_pid
        self._listeners: dict[tuple[str, int], tuple[socket.socket, str]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def target(self, ip: str, port: int) -> str:
        """The gRPC target that reaches ``ip:port`` from the management host."""
        with self._lock:
            if (ip, port) not in self._listeners:
                name = f"fabric-emu-mgmt.{os.getpid()}.{id(self):x}.{ip}:{port}"
                lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                lsock.bind("\0" + name)
                lsock.listen(64)
                threading.Thread(target=self._accept, args=(lsock, ip, port), daemon=True,
                                 name=f"mgmt-relay-{ip}:{port}").start()
                self._listeners[(ip, port)] = (lsock, name)
            return f"unix-abstract:{self._listeners[(ip, port)][1]}"

    def connect(self, ip: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> socket.socket:
        """A TCP connection to ``ip:port`` from the management host."""
        with network_of(self.netns_pid):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout_s)
            sock.connect((ip, port))
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            sock.close()
            raise
        return sock

    def _accept(self, lsock: socket.socket, ip: str, port: int) -> None:
        while True:
            try:
                conn, _ = lsock.accept()
            except OSError:            # closed
                return
            try:
                up = self.connect(ip, port)
            except OSError:            # gRPC sees the connection close, and retries
                conn.close()
                continue
            with self._lock:
                if self._closed:
                    conn.close()
                    up.close()
                    return
            for src, dst in ((conn, up), (up, conn)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True,
                                 name=f"mgmt-relay-{ip}:{port}").start()

    def close(self) -> None:
        """Stop listening. A carried connection ends with either side (a
        stream's last bytes still reach the runner after its switch stopped)."""
        with self._lock:
            self._closed = True
            listeners, self._listeners = self._listeners, {}
        for lsock, _ in listeners.values():
            try:
                lsock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            lsock.close()


__all__ = ["ManagementRelay"]
