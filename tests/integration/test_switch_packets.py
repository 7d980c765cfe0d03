"""One real switch process, its ports on veths, frames in and out of namespaces:
the same PTF-style expectations checked on both targets (the embedded
target, and BMv2's simple_switch_grpc running fabric.p4 where it is installed).

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

import socket
import subprocess
import time
from dataclasses import dataclass

import pytest

from emulator.control.p4rt_client import SwitchConnection
from emulator.p4.p4info import P4Info
from tests.packet_cases import (
    CASES, CPU_PORT, DEVICE_ID, H1_IP, H1_MAC, H1_PORT, H2_IP, H2_MAC, H2_PORT, PUNT_ROCE_FROM_PORT1,
    REMOTE_IP, ROUTER_MAC, UPLINK_MAC, Case, arp_request, malformed_counts, program, rocev2, to_h1, to_h2,
    to_uplink, verify,
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
    from emulator.schema.switch import PortConfig, SwitchConfig
    per_port = "buffer_bytes" in PortConfig.model_fields
    ports = [{"port_no": p, "rate_bps": 10_000_000_000, "delay_ns": 0,
              **({"buffer_bytes": BUFFER_BYTES} if per_port else {})} for p in PORTS]
    cfg = {"name": "leaf1", "device_id": DEVICE_ID, "ports": ports}
    if "buffer_bytes" in SwitchConfig.model_fields:
        cfg["buffer_bytes"] = BUFFER_BYTES
    return cfg


@dataclass
class Rig:
    proc: subprocess.Popen
    conn: SwitchConnection
    p4: P4Info
    socks: dict[int, socket.socket]
    log_path: str
    target: str = "embedded"
    device_config: bytes = b""
    stream_errors_seen: int = 0

    def program(self, acl=()) -> dict:
        # BMv2's P4Runtime server forgets clone sessions when the pipeline is
        # set again but BMv2 keeps their replicas: a session inserted anew
        # would then clone twice. Delete them first (a no-op on a fresh switch).
        from p4.v1 import p4runtime_pb2 as pb
        try:
            sessions = self.conn.read(pb.PacketReplicationEngineEntry(
                clone_session_entry=pb.CloneSessionEntry()))
        except Exception:          # no pipeline set yet
            sessions = []
        if sessions:
            self.conn.delete(sessions)
        return program(self.conn, self.p4, acl, self.device_config)

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


@pytest.fixture(scope="module", params=["embedded", "bmv2"])
def rig(request, tmp_path_factory):
    target = request.param
    if target == "bmv2":
        from emulator.net.bmv2 import bmv2_unavailable_reason
        if bmv2_unavailable_reason():
            pytest.skip(f"BMv2 target: {bmv2_unavailable_reason()}")
    sr = SwitchRig("pk" if target == "embedded" else "pb", PORT_MAC)
    request.addfinalizer(sr.close)
    if target == "bmv2":
        sr.start_bmv2("leaf1", DEVICE_ID, tmp_path_factory.mktemp("bmv2"))
    else:
        sr.start(switch_config(), tmp_path_factory.mktemp("switch"))
    return Rig(sr.proc, sr.conn, P4Info.load(), sr.socks, str(sr.log_path), target, sr.device_config)


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
    sw.program(case.acl)
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
    # A malformed packet counts in its reason's cell (ingress port, reason), and only there.
    assert malformed_counts(sw.conn, case.ingress_port) == case.malformed_counts()


# ---------------------------------------------------------------- paths the table does not cover

def test_routed_to_an_uplink(sw):
    p4 = sw.p4
    ents = sw.program()
    port_param = p4.param_id("set_nexthop", "port")
    member3 = next(m.member_id for m in ents["members"]
                   if p4.decode_action(m.action).param(port_param) == 3)
    sw.conn.insert(p4.table_entry("ipv4_lpm", {"ipv4_dst": (REMOTE_IP, 32)}, member_id=member3))
    frame = rocev2(H1_IP, REMOTE_IP, src_mac=H1_MAC, payload_len=1024)
    sw.send(H1_PORT, frame)
    got = sw.outputs(until=lambda g: len(g) >= 1)
    assert _outcome(got, H1_PORT) == [(3, to_uplink(frame, 3))]


def test_counters_rx_enq_tx_and_drops(sw):
    sw.program()
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
    sw.program()
    # A frame ingress would drop (TTL 1, not to the router MAC): packet-out skips all lookups.
    frame = rocev2(H1_IP, H2_IP, dst_mac=H2_MAC, src_mac=ROUTER_MAC, ttl=1, payload_len=300)
    sw.conn.packet_out(frame, 2)
    got = sw.outputs(until=lambda g: len(g) >= 1)
    assert _outcome(got, 0) == [(2, frame)]
    assert sw.counter_cell("enq_port_counter", 2)[0] == 1
    assert sw.wait_counter("tx_port_counter", 2, (1, len(frame)))[0] == 1
    assert all(sw.counter_cell("rx_port_counter", p) == (0, 0) for p in PORTS)


def test_packet_out_of_a_non_ip_frame_and_to_each_port(sw):
    sw.program()
    sent = {p: arp_request(PORT_MAC[p], H1_IP, f"10.0.1.{p + 10}") for p in PORTS}
    for p, f in sent.items():
        sw.conn.packet_out(f, p)
    got = sw.outputs(until=lambda g: len(g) >= len(sent))
    assert _outcome(got, 0) == sorted(sent.items())


def test_acl_punt_arrives_as_packet_in_with_ingress_port(sw):
    sw.program([PUNT_ROCE_FROM_PORT1])
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


# ---------------------------------------------------------------- PFC in fabric.p4

def _program_lossless(sw, xoff_bytes: int, pause_us: float = 20.0, dilation: float = 1.0) -> dict:
    """leaf1's routes plus the lossless class (priority 3 from DSCP 26) with
    the given XOFF, its pfc_port entries and pause clone sessions, as the
    controller installs them. BMv2 refreshes a pause every pause_us × dilation / 2
    of wall time."""
    from emulator.control.qos import PfcSpec, QosSpec, qos_entities
    from tests.packet_cases import FABRIC, SWITCH
    ents = sw.program()
    qos = QosSpec(pfc=PfcSpec(xoff_bytes=xoff_bytes, xon_bytes=max(1, xoff_bytes // 2), pause_us=pause_us))
    sw.conn.insert(qos_entities(FABRIC, sw.p4, SWITCH, qos, 1024, 0, dilation=dilation))
    return ents


def test_received_pause_is_consumed_and_counted_per_priority(sw):
    """A PFC frame ends in the switch on both targets: nothing forwarded, and
    pfc_rx_counter counts each enabled class of the port it came in on."""
    from emulator.dataplane.pfc import build_pfc_frame
    _program_lossless(sw, xoff_bytes=100_000)
    frame = build_pfc_frame(bytes.fromhex(H2_MAC.replace(":", "")), 0b1000_1000,
                            [0, 0, 0, 0xFFFF, 0, 0, 0, 0x10])
    sw.send(H2_PORT, frame)
    assert sw.wait_counter("pfc_rx_counter", H2_PORT * 8 + 3, (1, len(frame))) == (1, len(frame))
    assert sw.counter_cell("pfc_rx_counter", H2_PORT * 8 + 7) == (1, len(frame))
    assert sw.counter_cell("pfc_rx_counter", H2_PORT * 8 + 0) == (0, 0)
    assert sw.outputs(until=lambda g: False, wait_s=0.3) == []
    assert sw.counter_cell("enq_port_counter", H1_PORT) == (0, 0)


def _pause_quanta_of(port: int, pause_us: float) -> int:
    """What the controller tells fabric.p4 to put in the pauses it sends out of ``port``."""
    from emulator.control.qos import PfcSpec, pfc_port_params
    from tests.packet_cases import FABRIC, SWITCH
    rate_bps = FABRIC.links[FABRIC.port(SWITCH, port).link_index].rate_bps
    return pfc_port_params(rate_bps, PfcSpec(pause_us=pause_us), 1.0)["pause_quanta"]


def _expect_pause(frame: bytes, priority: int, quanta: int) -> None:
    from scapy.layers.l2 import Ether
    from emulator.dataplane.pfc import parse_mac_control
    assert len(frame) == 60, frame.hex()
    eth = Ether(frame)
    assert (eth.dst, eth.src, eth.type) == ("01:80:c2:00:00:01", ROUTER_MAC, 0x8808)
    opcode, class_enable, timers = parse_mac_control(frame)
    assert (opcode, class_enable) == (0x0101, 1 << priority)
    assert timers == tuple(quanta if i == priority else 0 for i in range(8))
    assert frame[34:] == bytes(26)


def test_bmv2_egress_sends_xoff_toward_the_ingress_port(sw):
    """[BMv2 TM] A lossless packet that finds its queue at or above XOFF makes
    egress clone it to the ingress port's session and rewrite the clone
    into a pause for its priority; the data packet itself is forwarded. The
    next one, before the refresh time, sends no second pause."""
    if sw.target != "bmv2":
        pytest.skip("fabric.p4's [BMv2 TM] blocks: the embedded target's traffic manager pauses by "
                    "per-ingress accounting instead (tests/integration/test_switch_tm.py)")
    # the smallest XOFF the schema takes (XON 1 byte below it)
    _program_lossless(sw, xoff_bytes=2, pause_us=1000.0, dilation=10_000)   # refresh after 5 s
    frame = rocev2(payload_len=1024)                       # DSCP 26: priority 3
    # A lone packet finds its queue empty (depth 0): XOFF of 2 bytes is not reached.
    sw.send(H2_PORT, frame)
    got = sw.outputs(until=lambda g: len(g) >= 1)
    assert _outcome(got, H2_PORT) == [(H1_PORT, to_h1(frame))]
    assert sw.counter_cell("pfc_tx_counter", H2_PORT * 8 + 3) == (0, 0)
    # XOFF of 0 bytes is reached by every lossless packet.
    sw.conn.modify(sw.p4.table_entry("pfc_config", {"ig_port": H2_PORT, "priority": 3},
                                     ("set_pfc_thresholds", {"xoff_bytes": 0, "xon_bytes": 0,
                                                             "headroom_bytes": 10_000})))
    sw.send(H2_PORT, frame)
    got = sw.outputs(until=lambda g: len(g) >= 2)
    out = _outcome(got, H2_PORT)
    assert (H1_PORT, to_h1(frame)) in out
    pauses = [f for p, f in out if p == H2_PORT]
    assert len(pauses) == 1 and len(out) == 2, out
    _expect_pause(pauses[0], 3, _pause_quanta_of(H2_PORT, 1000.0))
    # Packets only: BMv2 counts the clone's bytes before truncate() cuts it to 60.
    assert sw.counter_cell("pfc_tx_counter", H2_PORT * 8 + 3)[0] == 1
    sw.send(H2_PORT, frame)
    got = sw.outputs(until=lambda g: len(g) >= 1)
    assert _outcome(got, H2_PORT) == [(H1_PORT, to_h1(frame))]


def test_bmv2_pause_received_is_relayed_to_the_sender(sw):
    """[BMv2 TM] BMv2 cannot stop an egress queue: a lossless packet routed to
    a (port, priority) that a received pause stops is still forwarded, and
    ingress pauses the port it came from; once the pause has run out, no
    more relay."""
    if sw.target != "bmv2":
        pytest.skip("fabric.p4's [BMv2 TM] blocks: the embedded target stops the paused queue itself")
    from emulator.dataplane.pfc import pause_frame
    # At dilation 10000 a quantum of the 100 Gb/s port lasts 51 us of wall
    # time: h1's pause of 0xFFFF quanta holds for 3.4 s.
    _program_lossless(sw, xoff_bytes=1_000_000, pause_us=1000.0, dilation=10_000)
    sw.send(H1_PORT, pause_frame(bytes.fromhex(H1_MAC.replace(":", "")), 3, 0xFFFF))
    sw.wait_counter("pfc_rx_counter", H1_PORT * 8 + 3, (1, 60))
    frame = rocev2(payload_len=256)
    sw.send(H2_PORT, frame)
    out = _outcome(sw.outputs(until=lambda g: len(g) >= 2), H2_PORT)
    assert (H1_PORT, to_h1(frame)) in out and len(out) == 2, out
    (relayed,) = [f for p, f in out if p == H2_PORT]
    _expect_pause(relayed, 3, _pause_quanta_of(H2_PORT, 1000.0))
    # Lossy traffic (DSCP 0: priority 0) to the same port is not held.
    lossy = rocev2(payload_len=256, tos=0)
    sw.send(H2_PORT, lossy)
    assert _outcome(sw.outputs(until=lambda g: len(g) >= 1), H2_PORT) == [(H1_PORT, to_h1(lossy))]
    # XON from h1: the next lossless packet is forwarded with no relay.
    sw.send(H1_PORT, pause_frame(bytes.fromhex(H1_MAC.replace(":", "")), 3, 0))
    sw.wait_counter("pfc_rx_counter", H1_PORT * 8 + 3, (2, 120))
    frame2 = rocev2(payload_len=256, psn=8)
    sw.send(H2_PORT, frame2)
    assert _outcome(sw.outputs(until=lambda g: len(g) >= 1), H2_PORT) == [(H1_PORT, to_h1(frame2))]


# ---------------------------------------------------------------- INT (HPCC)

def test_int_port_writes_this_switchs_record_on_both_targets(sw):
    """fabric.p4's egress fills slot hop_count of a collecting stack: the
    queue left (none: one packet), the port's tx bytes since the pipeline
    was set (this packet), the egress time in fabric ns, the link rate."""
    from emulator import int_md
    from emulator.control.qos import int_port_params
    from tests.packet_cases import rocev2_int
    sw.program()
    params = int_port_params(10**10, 1.0)               # D = 1: fabric ns = the switch's ns
    sw.conn.insert([sw.p4.table_entry("int_port", {"eg_port": H1_PORT}, ("set_int_port", params))])
    sw.drain()
    stamps = []
    sent = 0
    for i in range(2):
        f = rocev2_int(max_hops=3, psn=i)
        sw.send(H2_PORT, f)
        sent += len(f)
        got = sw.outputs(until=lambda g: len(g) >= 1)
        assert [p for p, *_ in got] == [H1_PORT], sw.log()
        out = bytes(got[0][1])
        st = int_md.strip(out)
        assert st is not None and st.kind == int_md.INT_KIND_COLLECT and st.max_hops == 3
        (hop,) = int_md.unpack_hops(st.hops)
        assert (hop.qlen_bytes, hop.tx_bytes, hop.rate_mbps) == (0, sent, 10_000)
        stamps.append(hop.ts_ns)
        # everything else is the routed packet, the record and its count aside
        want = bytearray(to_h1(f))
        rec = int_md.INT_OFFSET + int_md.INT_SHIM_BYTES
        want[int_md.INT_OFFSET + 1] = 1
        want[rec:rec + int_md.INT_HOP_BYTES] = out[rec:rec + int_md.INT_HOP_BYTES]
        assert out == bytes(want)
        time.sleep(0.05)
    # fabric ns between the two egress times: the 50 ms (and then some) between the sends
    assert 40_000_000 < (stamps[1] - stamps[0]) % 2**32 < 2_000_000_000, stamps


def test_int_echo_and_full_stacks_pass_untouched(sw):
    from emulator.control.qos import int_port_params
    from emulator.int_md import INT_KIND_ECHO, IntHop
    from tests.packet_cases import rocev2_int
    sw.program()
    sw.conn.insert([sw.p4.table_entry("int_port", {"eg_port": H1_PORT},
                                      ("set_int_port", int_port_params(10**10, 1.0)))])
    sw.drain()
    for f in (rocev2_int(max_hops=2, hop_count=1, kind=INT_KIND_ECHO, hops=[IntHop(qlen_bytes=5), IntHop()]),
              rocev2_int(max_hops=1, hop_count=1, hops=[IntHop(tx_bytes=6)], psn=3)):
        sw.send(H2_PORT, f)
        got = sw.outputs(until=lambda g: len(g) >= 1)
        assert [(p, bytes(fr)) for p, fr, *_ in got] == [(H1_PORT, to_h1(f))], sw.log()
