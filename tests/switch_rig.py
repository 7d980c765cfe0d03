"""Shared test rigs around one switch (no tests here).

``SwitchRig``: one real switch process (``python -m emulator.dataplane
CONFIG.json``) whose ports are veths. Per port, a network namespace holds the
host end of a veth pair (the switch's end stays in the root namespace, where
the switch runs) and an AF_PACKET socket bound to it. The sockets are opened
inside the namespaces by short ``ip netns exec ... python -c`` helpers and
handed back over a Unix socket (SCM_RIGHTS), so this process never changes
namespace. Interface names are unique per process and rig and never look like
a fabric's ``<node>-eth<N>``. ``close()`` kills the process and removes the
namespaces and veths, whatever state ``start()`` got to; register it as a
finalizer before calling ``start()``.

``p4rt_switch``: an embedded ``SwitchState`` behind a ``P4RuntimeServer`` on
an ephemeral port, with a primary ``SwitchConnection`` to it (no sockets, no
process).
"""
from __future__ import annotations

import itertools
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from emulator.control.p4rt_client import SwitchConnection
from emulator.dataplane.p4rt_server import P4RuntimeServer
from emulator.dataplane.state import SwitchState
from emulator.p4.p4info import P4Info
from tests.conftest import REPO

START_TIMEOUT_S = 20.0


def netns_unavailable_reason() -> str | None:
    """Why ``SwitchRig`` cannot run here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root: creates network namespaces and veth pairs, opens AF_PACKET sockets"
    return None if shutil.which("ip") else "needs iproute2's ip"


requires_netns = pytest.mark.skipif(bool(netns_unavailable_reason()), reason=netns_unavailable_reason() or "")

_GRAB_SOCKET = r"""
import socket, sys
chan = socket.socket(fileno=int(sys.argv[1]))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
s.setsockopt(263, 23, 1)            # SOL_PACKET, PACKET_IGNORE_OUTGOING: only what arrives
if int(sys.argv[3]):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, int(sys.argv[3]))
s.bind((sys.argv[2], 0))
socket.send_fds(chan, [b"ok"], [s.fileno()])
"""

_rigs = itertools.count(1)


def sh(*cmd: str) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {res.stderr.strip()}")


def ns_packet_socket(ns: str, ifname: str, rcvbuf: int = 0) -> socket.socket:
    """A non-blocking AF_PACKET socket bound to ``ifname`` inside namespace ``ns``.

    ``rcvbuf``: SO_RCVBUF in bytes (0: the kernel's default).
    """
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        res = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-S", "-c", _GRAB_SOCKET,
             str(child.fileno()), ifname, str(rcvbuf)],
            pass_fds=(child.fileno(),), capture_output=True, text=True, timeout=20)
        if res.returncode != 0:
            raise RuntimeError(f"opening a packet socket on {ns}/{ifname}: {res.stderr.strip()}")
        _, fds, _, _ = socket.recv_fds(parent, 16, 1)
    finally:
        parent.close()
        child.close()
    sock = socket.socket(fileno=fds[0])
    sock.setblocking(False)
    return sock


def recv_ready(socks: Mapping[int, socket.socket], timeout: float) -> list[tuple[int, bytes]]:
    """The frames waiting on non-blocking sockets, as (port, frame); waits up to ``timeout`` for one."""
    by_fd = {s.fileno(): (p, s) for p, s in socks.items()}
    got = []
    for fd in select.select(list(by_fd), [], [], timeout)[0]:
        p, s = by_fd[fd]
        while True:
            try:
                got.append((p, s.recv(65535)))
            except BlockingIOError:
                break
    return got


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SwitchRig:
    """A switch process with one namespace + veth + packet socket per port.

    ``host_macs``: port number -> MAC of the namespace's end of that port's
    veth. ``prefix``: 2 lower-case letters that start every name this rig makes.
    After ``start()``: ``proc``, ``conn``, ``socks`` (port -> socket),
    ``sw_if`` / ``ns_if`` / ``ns`` (port -> name), ``log_path``.
    """

    def __init__(self, prefix: str, host_macs: Mapping[int, str], rcvbuf: int = 0):
        n, pid = next(_rigs), os.getpid()
        self.ports = tuple(sorted(host_macs))
        self.host_macs = dict(host_macs)
        self.rcvbuf = rcvbuf
        self.ns = {p: f"{prefix}-{pid}-{n}-p{p}" for p in self.ports}
        self.sw_if = {p: f"{prefix}{pid % 100000}n{n}s{p}"[:15] for p in self.ports}
        self.ns_if = {p: f"{prefix}{pid % 100000}n{n}h{p}"[:15] for p in self.ports}
        assert len({*self.sw_if.values(), *self.ns_if.values()}) == 2 * len(self.ports)
        self.proc: subprocess.Popen | None = None
        self.conn: SwitchConnection | None = None
        self.socks: dict[int, socket.socket] = {}
        self.log_path: Path | None = None
        self.device_config = b""      # what SetForwardingPipelineConfig carries (BMv2: its JSON)

    def start(self, config: dict, workdir: Path, module: str = "emulator.dataplane") -> SwitchRig:
        """Namespaces, veths, sockets; then the switch with ``config``, connected over P4Runtime.

        ``config`` is the switch's JSON config without ``grpc_port`` and
        without the ports' ``ifname``: both are filled in here. It is written
        to ``workdir/{name}.switch.json``, the switch's output to
        ``workdir/{name}.log``. ``module``: the switch program
        (``emulator.ib.switch`` for an InfiniBand switch).
        """
        for p in self.ports:
            self._add_port(p)
        config = {**config, "grpc_port": free_tcp_port(),
                  "ports": [{**pc, "ifname": self.sw_if[pc["port_no"]]} for pc in config["ports"]]}
        cfg_path = workdir / f"{config['name']}.switch.json"
        cfg_path.write_text(json.dumps(config))
        self.log_path = workdir / f"{config['name']}.log"
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", module, str(cfg_path)],
                cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while "ready" not in self.log_path.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"switch did not start: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.02)
        self.conn = SwitchConnection(f"127.0.0.1:{config['grpc_port']}", config["device_id"],
                                     timeout=10.0)
        return self

    def start_bmv2(self, name: str, device_id: int, workdir: Path,
                   program: str = "fabric") -> SwitchRig:
        """Namespaces, veths, sockets; then BMv2's simple_switch_grpc on the
        switch ends, as the BMv2 target runs it (emulator/net/bmv2.py), with
        no program until the test sets ``p4src/<program>.p4``'s JSON
        (``device_config``)."""
        from emulator.net.bmv2 import CPU_PORT, NUM_PRIORITIES, SWITCH_BINARY
        from emulator.p4.build import bmv2_json
        self.device_config = bmv2_json(program=program).read_bytes()
        for p in self.ports:
            self._add_port(p)
        grpc_port = free_tcp_port()
        cmd = [shutil.which(SWITCH_BINARY), "--device-id", str(device_id), "--no-p4",
               "--log-file", str(workdir / f"{name}.bmv2"), "--log-level", os.environ.get("BMV2_LOG_LEVEL", "info"), "--log-flush"]
        for p in self.ports:
            cmd += ["-i", f"{p}@{self.sw_if[p]}"]
        cmd += ["--", "--grpc-server-addr", f"127.0.0.1:{grpc_port}", "--cpu-port", str(CPU_PORT),
                "--priority-queues", str(NUM_PRIORITIES)]
        self.log_path = workdir / f"{name}.log"
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{SWITCH_BINARY} did not start: {self.log_path.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", grpc_port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        self.conn = SwitchConnection(f"127.0.0.1:{grpc_port}", device_id, timeout=10.0)
        return self

    def _add_port(self, p: int) -> None:
        ns, sw_if, ns_if = self.ns[p], self.sw_if[p], self.ns_if[p]
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", sw_if, "type", "veth", "peer", "name", ns_if)
        sh("ip", "link", "set", ns_if, "netns", ns)
        # No IPv6 (router solicitations, MLD) on either end: only the test's frames cross.
        with open(f"/proc/sys/net/ipv6/conf/{sw_if}/disable_ipv6", "w") as f:
            f.write("1")
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{ns_if}.disable_ipv6=1")
        sh("ip", "-n", ns, "link", "set", ns_if, "address", self.host_macs[p])
        sh("ip", "-n", ns, "link", "set", ns_if, "up")
        sh("ip", "link", "set", sw_if, "up")
        self.socks[p] = ns_packet_socket(ns, ns_if, self.rcvbuf)

    def close(self) -> None:
        """Close the sockets, stop (or kill) the switch, close the connection,
        delete namespaces and veths (the switch before its client: a client
        closed while its switch serves waits ~0.2 s for its stream's end).

        Idempotent; every step runs even when an earlier one fails.
        """
        errors: list[BaseException] = []

        def attempt(fn, *args, **kw) -> None:
            try:
                fn(*args, **kw)
            except Exception as e:      # noqa: BLE001 - keep cleaning, report at the end
                errors.append(e)

        for s in self.socks.values():
            attempt(s.close)
        if self.proc is not None:
            attempt(_stop, self.proc)
        if self.conn is not None:
            attempt(self.conn.close)
        for p in self.ports:
            # Deleting the namespace removes its veth end, and so the pair; the
            # veth is deleted too in case it never made it into the namespace.
            attempt(subprocess.run, ["ip", "netns", "del", self.ns[p]], capture_output=True, timeout=20)
            attempt(subprocess.run, ["ip", "link", "del", self.sw_if[p]], capture_output=True, timeout=20)
        if errors:
            raise errors[0]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@contextmanager
def p4rt_switch(p4info: P4Info, device_id: int
                ) -> Iterator[tuple[SwitchState, P4RuntimeServer, SwitchConnection]]:
    """A fresh ``SwitchState`` served over P4Runtime on 127.0.0.1, and a primary connection to it."""
    state = SwitchState()
    server = P4RuntimeServer(state, device_id, 0, p4info)
    server.start()
    conn = None
    try:
        conn = SwitchConnection(server.address, device_id, timeout=5.0)
        yield state, server, conn
    finally:
        # the server first: a client closed while its server lives waits
        # ~0.2 s for its stream's reader to end
        server.stop(grace=0)
        if conn is not None:
            conn.close()
