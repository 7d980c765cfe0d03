"""One real embedded switch process, its ports on veths, frames in and out of namespaces.

Needs root. Builds, per module run, three network namespaces with one veth
each (the switch's ends stay in the root namespace, where the switch process
``python -m emulator.dataplane CONFIG.json`` runs), programs the switch over
P4Runtime as leaf1 of clos-2x2, and replays the PTF-style cases of
``tests/packet_cases.py`` that only use ports 1-3 and the CPU port: a frame
is sent from one namespace with an AF_PACKET socket, and what comes out of
every port (and of the controller's stream) is compared byte for byte.
Packet-out and packet-in go over the client's StreamChannel.

The rig (namespaces, veths, AF_PACKET sockets opened inside the namespaces,
the switch process, its P4Runtime connection) is ``tests/switch_rig.py``'s
``SwitchRig``; namespaces, veths and the switch process are removed in a
finalizer, also when a test fails.
"""
from __future__ import annotations

import dataclasses
import socket
import subprocess
import time
from dataclasses import dataclass

import pytest

from emulator.control.p4rt_client import SwitchConnection
from emulator.p4.p4info import P4Info
from tests.packet_cases import (
    CASES, CPU_PORT, DEVICE_ID, H1_IP, H1_MAC, H1_PORT, H2_IP, H2_MAC, H2_PORT, PUNT_ROCE_FROM_PORT1,
    REMOTE_IP, ROUTER_MAC, UPLINK_MAC, Case, arp_request, program, rocev2, to_h1, to_h2, to_uplink,
    verify,
)
from tests.switch_rig import SwitchRig, recv_ready, requires_netns


pytestmark = requires_netns

PORTS = (1, 2, 3)
PORT_MAC = {1: H1_MAC, 2: H2_MAC, 3: UPLINK_MAC[3]}   # what sits behind each port
QUIET_S = 0.25          # after the expected output: how long nothing else may appear
WAIT_S = 5.0            # longest wait for an expected frame / counter
BUFFER_BYTES = 4 << 20

INTEGRATION_CASES = [c for c in CASES if c.ports <= {*PORTS, CPU_PORT} and not c.any_of]


def switch_config() -> dict:
    """The switch process's JSON config: 10 Gb/s ports, no propagation delay, 4 MiB buffers.

    The buffer size goes wherever this version of ``SwitchConfig`` takes it
    (per port or per switch). ``SwitchRig`` fills in the gRPC port and ifnames.
    """
    from emulator.dataplane.switch import PortConfig, SwitchConfig
    per_port = "buffer_bytes" in {f.name for f in dataclasses.fields(PortConfig)}
    ports = [{"port_no": p, "rate_bps": 10_000_000_000, "delay_ns": 0,
              **({"buffer_bytes": BUFFER_BYTES} if per_port else {})} for p in PORTS]
    cfg = {"name": "leaf1", "device_id": DEVICE_ID, "ports": ports}
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
        deadline = time.monotonic() + wait_s
        quiet_until = None
        while True:
            now = time.monotonic()
            if quiet_until is None and (until(got) or now >= deadline):
                quiet_until = now + quiet_s
            if quiet_until is not None and now >= quiet_until:
                return got
            got.extend(recv_ready(self.socks, 0.01))
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
    sr = SwitchRig("pk", PORT_MAC)
    request.addfinalizer(sr.close)
    sr.start(switch_config(), tmp_path_factory.mktemp("switch"))
    return Rig(sr.proc, sr.conn, P4Info.load(), sr.socks, str(sr.log_path))


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
