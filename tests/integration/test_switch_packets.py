"""One real embedded switch process, its ports on veths, frames in and out of namespaces.

Needs root. Builds, per module run, three network namespaces with one veth
each (the switch's ends stay in the root namespace, where the switch process
``python -m emulator.dataplane CONFIG.json`` runs), programs the switch over
P4Runtime as leaf1 of clos-2x2, and replays the PTF-style cases of
``tests/packet_cases.py`` that only use ports 1-3 and the CPU port: a frame
is sent from one namespace with an AF_PACKET socket, and what comes out of
every port (and of the controller's stream) is compared byte for byte.
Packet-out and packet-in go over the client's StreamChannel.

The AF_PACKET sockets are opened inside the namespaces by short
``ip netns exec ... python -c`` helpers and handed back over a Unix socket
(SCM_RIGHTS), so this process never changes namespace. Namespaces, veths
and the switch process are removed in a finalizer, also when a test fails.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from emulator.control.p4rt_client import SwitchConnection
from emulator.p4.p4info import P4Info
from tests.conftest import REPO
from tests.packet_cases import (
    CASES, CPU_PORT, DEVICE_ID, H1_IP, H1_MAC, H1_PORT, H2_IP, H2_MAC, H2_PORT, PUNT_ROCE_FROM_PORT1,
    REMOTE_IP, ROUTER_MAC, UPLINK_MAC, Case, arp_request, program, rocev2, to_h1, to_h2, to_uplink,
    verify,
)


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root: creates network namespaces and veth pairs, opens AF_PACKET sockets"
    if shutil.which("ip") is None:
        return "needs iproute2's ip"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")

PORTS = (1, 2, 3)
PORT_MAC = {1: H1_MAC, 2: H2_MAC, 3: UPLINK_MAC[3]}   # what sits behind each port
QUIET_S = 0.25          # after the expected output: how long nothing else may appear
WAIT_S = 5.0            # longest wait for an expected frame / counter
BUFFER_BYTES = 4 << 20
_n = itertools.count(1)

_GRAB_SOCKET = r"""
import socket, sys
chan = socket.socket(fileno=int(sys.argv[1]))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
s.setsockopt(263, 23, 1)            # SOL_PACKET, PACKET_IGNORE_OUTGOING: only what arrives
s.bind((sys.argv[2], 0))
socket.send_fds(chan, [b"ok"], [s.fileno()])
"""

INTEGRATION_CASES = [c for c in CASES if c.ports <= {*PORTS, CPU_PORT} and not c.any_of]


def sh(*cmd: str) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {res.stderr.strip()}")


def ns_packet_socket(ns: str, ifname: str) -> socket.socket:
    """An AF_PACKET socket bound to ``ifname`` inside namespace ``ns``."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        res = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-S", "-c", _GRAB_SOCKET,
             str(child.fileno()), ifname],
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


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def switch_config(grpc_port: int, ifnames: dict[int, str]) -> dict:
    """The switch process's JSON config: 10 Gb/s ports, no propagation delay, 4 MiB buffers.

    The buffer size goes wherever this version of ``SwitchConfig`` takes it
    (per port or per switch).
    """
    from emulator.dataplane.switch import PortConfig, SwitchConfig
    per_port = "buffer_bytes" in {f.name for f in dataclasses.fields(PortConfig)}
    ports = [{"port_no": p, "ifname": ifnames[p], "rate_bps": 10_000_000_000, "delay_ns": 0,
              **({"buffer_bytes": BUFFER_BYTES} if per_port else {})} for p in PORTS]
    cfg = {"name": "leaf1", "device_id": DEVICE_ID, "grpc_port": grpc_port, "ports": ports}
    if "buffer_bytes" in {f.name for f in dataclasses.fields(SwitchConfig)}:
        cfg["buffer_bytes"] = BUFFER_BYTES
    return cfg


@dataclass
class Rig:
    proc: subprocess.Popen
    conn: SwitchConnection
    p4: P4Info
    socks: dict[int, socket.socket]
    log_path: str
    stream_errors_seen: int = 0

    def alive(self) -> None:
        assert self.proc.poll() is None, f"switch exited {self.proc.returncode}: {self.log()}"

    def log(self) -> str:
        try:
            with open(self.log_path) as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def drain(self) -> None:
        for s in self.socks.values():
            while True:
                try:
                    s.recv(65535)
                except BlockingIOError:
                    break
        while self.conn.packet_in(timeout=0) is not None:
            pass

    def send(self, port: int, frame: bytes) -> None:
        assert self.socks[port].send(frame) == len(frame)

    def outputs(self, until, quiet_s: float = QUIET_S, wait_s: float = WAIT_S):
        """Every (port, frame) that leaves the switch, packet-ins as (CPU_PORT, payload, ingress).

        Collects until ``until(got)`` holds (or ``wait_s`` passes), then for
        ``quiet_s`` more, so that unexpected extra frames are seen too.
        """
        got: list[tuple] = []
        by_fd = {s.fileno(): (port, s) for port, s in self.socks.items()}
        deadline = time.monotonic() + wait_s
        quiet_until = None
        while True:
            now = time.monotonic()
            if quiet_until is None and (until(got) or now >= deadline):
                quiet_until = now + quiet_s
            if quiet_until is not None and now >= quiet_until:
                return got
            readable, _, _ = select.select(list(by_fd), [], [], 0.01)
            for fd in readable:
                port, s = by_fd[fd]
                while True:
                    try:
                        got.append((port, s.recv(65535)))
                    except BlockingIOError:
                        break
            while (pin := self.conn.packet_in(timeout=0)) is not None:
                got.append((CPU_PORT, pin[0], pin[1]))

    def counter_cell(self, name: str, index: int) -> tuple[int, int]:
        return self.conn.read_counter(name, index=index)[index]

    def wait_counter(self, name: str, index: int, want: tuple[int, int]) -> tuple[int, int]:
        deadline = time.monotonic() + WAIT_S
        while True:
            cell = self.counter_cell(name, index)
            if cell == want or time.monotonic() >= deadline:
                return cell
            time.sleep(0.02)


@pytest.fixture(scope="module")
def rig(request, tmp_path_factory):
    n = next(_n)
    tag = f"{os.getpid() % 100000}{n}"
    ns = {p: f"pkt-{os.getpid()}-{n}-p{p}" for p in PORTS}
    sw_if = {p: f"pk{tag}s{p}"[:15] for p in PORTS}     # not "<node>-eth<N>": not a fabric's
    ns_if = {p: f"pk{tag}h{p}"[:15] for p in PORTS}
    state: dict = {"proc": None, "conn": None, "socks": {}}

    def cleanup():
        if state["conn"] is not None:
            state["conn"].close()
        for s in state["socks"].values():
            s.close()
        proc = state["proc"]
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        for p in PORTS:
            subprocess.run(["ip", "netns", "del", ns[p]], capture_output=True, timeout=20)
            subprocess.run(["ip", "link", "del", sw_if[p]], capture_output=True, timeout=20)

    request.addfinalizer(cleanup)
    for p in PORTS:
        sh("ip", "netns", "add", ns[p])
        sh("ip", "link", "add", sw_if[p], "type", "veth", "peer", "name", ns_if[p])
        sh("ip", "link", "set", ns_if[p], "netns", ns[p])
        # No IPv6 (router solicitations, MLD) on either end: only our frames cross.
        with open(f"/proc/sys/net/ipv6/conf/{sw_if[p]}/disable_ipv6", "w") as f:
            f.write("1")
        sh("ip", "netns", "exec", ns[p], "sysctl", "-qw", f"net.ipv6.conf.{ns_if[p]}.disable_ipv6=1")
        sh("ip", "-n", ns[p], "link", "set", ns_if[p], "address", PORT_MAC[p])
        sh("ip", "-n", ns[p], "link", "set", ns_if[p], "up")
        sh("ip", "link", "set", sw_if[p], "up")
        state["socks"][p] = ns_packet_socket(ns[p], ns_if[p])

    tmp = tmp_path_factory.mktemp("switch")
    grpc_port = free_tcp_port()
    (tmp / "switch.json").write_text(json.dumps(switch_config(grpc_port, sw_if)))
    log_path = str(tmp / "switch.log")
    with open(log_path, "w") as log:
        state["proc"] = subprocess.Popen(
            [sys.executable, "-m", "emulator.dataplane", str(tmp / "switch.json")],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while "ready" not in Path(log_path).read_text():
        if state["proc"].poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"switch did not start: {Path(log_path).read_text()[-2000:]}")
        time.sleep(0.02)
    p4 = P4Info.load()
    state["conn"] = SwitchConnection(f"127.0.0.1:{grpc_port}", DEVICE_ID, timeout=10.0)
    return Rig(state["proc"], state["conn"], p4, state["socks"], log_path)


@pytest.fixture
def sw(rig):
    rig.alive()
    rig.drain()
    rig.stream_errors_seen = len(rig.conn.stream_errors)
    yield rig
    rig.alive()
    assert rig.conn.stream_errors[rig.stream_errors_seen:] == []


def _outcome(got, ingress_port: int) -> list[tuple[int, bytes]]:
    """Collected outputs -> sorted (port, frame); packet-ins must carry the ingress port."""
    out = []
    for item in got:
        if item[0] == CPU_PORT:
            assert item[2] == ingress_port, f"packet-in ingress_port {item[2]}, sent on {ingress_port}"
        out.append((item[0], bytes(item[1])))
    return sorted(out)


# ---------------------------------------------------------------- the case table

@pytest.mark.parametrize("case", INTEGRATION_CASES, ids=[c.name for c in INTEGRATION_CASES])
def test_case(sw, case: Case):
    program(sw.conn, sw.p4, case.acl)
    sw.drain()
    sw.send(case.ingress_port, case.frame)
    if case.dropped:
        # Proof the switch saw and dropped it, then: nothing on any port, no packet-in.
        drops = sw.wait_counter("pipeline_drop_counter", case.ingress_port, (1, len(case.frame)))
        assert drops == (1, len(case.frame)), sw.log()
        got = sw.outputs(until=lambda g: True)
    else:
        got = sw.outputs(until=lambda g: len(g) >= len(case.expect))
    verify(_outcome(got, case.ingress_port), case)
    assert sw.counter_cell("rx_port_counter", case.ingress_port) == (1, len(case.frame))


# ---------------------------------------------------------------- paths the table does not cover

def test_routed_to_an_uplink(sw):
    p4 = sw.p4
    ents = program(sw.conn, p4)
    port_param = p4.param_id("set_nexthop", "port")
    member3 = next(m.member_id for m in ents["members"]
                   if p4.decode_action(m.action).param(port_param) == 3)
    sw.conn.insert(p4.table_entry("ipv4_lpm", {"ipv4_dst": (REMOTE_IP, 32)}, member_id=member3))
    frame = rocev2(H1_IP, REMOTE_IP, src_mac=H1_MAC, payload_len=1024)
    sw.send(H1_PORT, frame)
    got = sw.outputs(until=lambda g: len(g) >= 1)
    assert _outcome(got, H1_PORT) == [(3, to_uplink(frame, 3))]


def test_counters_rx_enq_tx_and_drops(sw):
    program(sw.conn, sw.p4)
    frames = [rocev2(payload_len=n, psn=n) for n in (64, 256, 1024, 512)]
    bad = rocev2(dst_mac=H1_MAC)
    for f in frames:
        sw.send(H2_PORT, f)
    sw.send(H2_PORT, bad)
    got = sw.outputs(until=lambda g: len(g) >= len(frames))
    assert _outcome(got, H2_PORT) == sorted((H1_PORT, to_h1(f)) for f in frames)
    routed = (len(frames), sum(map(len, frames)))
    assert sw.counter_cell("rx_port_counter", H2_PORT) == (5, routed[1] + len(bad))
    assert sw.counter_cell("enq_port_counter", H1_PORT) == routed
    assert sw.wait_counter("tx_port_counter", H1_PORT, routed) == routed   # counted at dequeue
    assert sw.counter_cell("pipeline_drop_counter", H2_PORT) == (1, len(bad))
    assert sw.counter_cell("rx_port_counter", H1_PORT) == (0, 0)


def test_packet_out_leaves_port_2_unchanged(sw):
    program(sw.conn, sw.p4)
    # A frame ingress would drop (TTL 1, not to the router MAC): packet-out skips all lookups.
    frame = rocev2(H1_IP, H2_IP, dst_mac=H2_MAC, src_mac=ROUTER_MAC, ttl=1, payload_len=300)
    sw.conn.packet_out(frame, 2)
    got = sw.outputs(until=lambda g: len(g) >= 1)
    assert _outcome(got, 0) == [(2, frame)]
    assert sw.counter_cell("enq_port_counter", 2)[0] == 1
    assert sw.wait_counter("tx_port_counter", 2, (1, len(frame)))[0] == 1
    assert all(sw.counter_cell("rx_port_counter", p) == (0, 0) for p in PORTS)


def test_packet_out_of_a_non_ip_frame_and_to_each_port(sw):
    program(sw.conn, sw.p4)
    sent = {p: arp_request(PORT_MAC[p], H1_IP, f"10.0.1.{p + 10}") for p in PORTS}
    for p, f in sent.items():
        sw.conn.packet_out(f, p)
    got = sw.outputs(until=lambda g: len(g) >= len(sent))
    assert _outcome(got, 0) == sorted(sent.items())


def test_acl_punt_arrives_as_packet_in_with_ingress_port(sw):
    program(sw.conn, sw.p4, [PUNT_ROCE_FROM_PORT1])
    frame = rocev2(H1_IP, H2_IP, src_mac=H1_MAC, payload_len=200)
    sw.send(H1_PORT, frame)
    got = sw.outputs(until=lambda g: len(g) >= 1)
    assert len(got) == 1 and got[0][0] == CPU_PORT, got
    _, payload, ingress_port = got[0]
    assert ingress_port == H1_PORT
    assert payload == to_h2(frame)           # routed first: set_nexthop's rewrite is kept
    # The same flow from port 2 is not punted: it is routed to h1.
    frame2 = rocev2(src_mac=H2_MAC)
    sw.send(H2_PORT, frame2)
    got = sw.outputs(until=lambda g: len(g) >= 1)
    assert _outcome(got, H2_PORT) == [(H1_PORT, to_h1(frame2))]
    # Punted frames are neither enqueued to a port nor pipeline drops.
    assert sw.counter_cell("enq_port_counter", CPU_PORT) == (0, 0)
    assert sw.counter_cell("pipeline_drop_counter", H1_PORT) == (0, 0)
