"""The InfiniBand switch and NIC in virtual time (emulator/vtime), and the
switch's credit return on the manual clock.

Virtual time: members in threads, as tests/unit/test_vtime.py runs them --
the coordinator's Unix socket, each member's ``VirtualClock``. The NIC's
"veth" is a datagram socket pair; the switch's ports are real packet
sockets on a veth pair (root). The coordinator's window is the links'
delay plus a flow-control packet's 6 bytes on the wire (``IB_MIN_WIRE_BYTES``):
a link packet waits for no serializer, and one stamped inside its own window
would end the run -- on a link without delay too.
"""
from __future__ import annotations

import json
import select
import socket
import struct

import pytest

from tests.nics import ib_nic
from emulator.nic.roce import RC_WRITE_ONLY
from emulator.clock import ManualClock
from emulator.control.p4rt_client import SwitchConnection
from emulator.dataplane.p4rt_server import P4RuntimeServer
from emulator.ib.credits import blocks
from emulator.ib.frames import IbFrameTemplate, fc_frame, parse_fc
from emulator.ib.switch import IbSwitch
from emulator.p4.p4info import IB_P4INFO, P4Info
from emulator.schema.switch import SwitchConfig
from emulator.ib.headers import fc_wire_ns
from emulator.vtime.coordinator import IB_MIN_WIRE_BYTES, lookahead_ns
from emulator.vtime.member import VirtualClock
from emulator.wire import ETH_HDR_BYTES, ETH_P_ALL

from .test_nic_loopback import needs_root, veth  # noqa: F401  (fixture)
from .test_vtime import FOREVER, coord_factory, link, receiver, run_members  # noqa: F401
from .veth_nics import MAC, netns

DELAY_NS = 1000
RATE_BPS = 25_000_000_000
PERIOD_NS = 10_000
HOST_LID, SWITCH_DLID = 1, 7
FC_NS = fc_wire_ns(RATE_BPS)        # 6 bytes at 25 Gb/s: 1.92 ns, 2 in whole ns


def _links(delay_ns: int = DELAY_NS):
    return [type("Link", (), {"delay_ns": delay_ns, "rate_bps": RATE_BPS})()]


def test_the_lookahead_of_link_packets_is_the_delay_and_their_six_bytes():
    assert FC_NS == 2
    assert lookahead_ns(_links(), IB_MIN_WIRE_BYTES) == DELAY_NS + 1     # 1001.92, whole ns
    assert lookahead_ns(_links()) > DELAY_NS + FC_NS   # what a 60-byte Ethernet frame allows
    assert lookahead_ns(_links(0), IB_MIN_WIRE_BYTES) == 1


# --------------------------------------------------------------------------- the NIC
@pytest.mark.parametrize("delay_ns", [DELAY_NS, 0])
def test_a_nics_credit_updates_leave_at_their_exact_times(coord_factory, delay_ns):
    """The initial credit at the loop's first turn (before its first wait:
    counted for its receiver all the same), then one every update period,
    arriving its 6 bytes and a link delay later -- never inside the window it
    was sent in (the coordinator would end the run), on a link without delay too."""
    coord = coord_factory({"h-eth0": "s-eth1", "s-eth1": "h-eth0"},
                          lookahead_ns(_links(delay_ns), IB_MIN_WIRE_BYTES))
    h_sock, s_sock = link("h-eth0", "s-eth1")
    h = VirtualClock(coord.path, "h", agent=True)
    s = VirtualClock(coord.path, "s")
    nic = ib_nic(None, MAC["a"], "10.99.0.1", MAC["b"], lid=HOST_LID, lids={}, clock=h,
                sock=h.attach_port(h_sock, "h-eth0"), rate_bps=RATE_BPS, tx_delay_ns=delay_ns,
                update_period_ns=PERIOD_NS, timer_slack_ns=None,
                absorb_udp=False)
    ps = s.attach_port(s_sock, "s-eth1")
    assert nic.max_lag_ns == 0                        # no catch-up: never late

    def nic_loop():
        h.done = lambda: h.now_ns() >= 3 * PERIOD_NS   # (its last update is sent then)
        while not h.ended:
            nic.run_once(1.0)
        return nic.stats.fc_tx

    out = run_members(coord, {"h": nic_loop, "s": lambda: receiver(s, [ps])})
    got, s_stats = out["s"]
    assert coord.error is None
    assert [(t, parse_fc(f)) for t, _, f in got] == \
        [(k * PERIOD_NS + FC_NS + delay_ns, (0, 0, 512)) for k in range(3)]
    assert out["h"] == 4
    assert s_stats["rx_frames"] == s_stats["rx_expected"] == 3 and s_stats["early_frames"] == 0


# --------------------------------------------------------------------------- the switch
def _switch_config(veth, tmp_path, pcap: bool) -> SwitchConfig:  # noqa: F811
    cfg = {"name": "sw", "device_id": 3, "grpc_port": 0, "pcap": pcap,
           "stats_path": str(tmp_path / "sw.stats.json"),
           "ports": [{"port_no": 1, "ifname": veth["dev"]["b"], "rate_bps": RATE_BPS,
                      "delay_ns": DELAY_NS}],
           "ib": {"vls": 1, "buffer_blocks": 512, "update_blocks": 16,
                  "update_period_ns": PERIOD_NS}}
    path = tmp_path / "sw.json"
    path.write_text(json.dumps(cfg))
    return SwitchConfig.load(path)


def _programmed(sw: IbSwitch):
    """``SWITCH_DLID`` back out of port 1 (a hairpin), written over P4Runtime."""
    p4 = P4Info.load(IB_P4INFO)
    server = P4RuntimeServer(sw.state, 3, 0, p4)
    server.start()
    conn = SwitchConnection(server.address, 3, (0, 1), timeout=3.0)
    conn.set_pipeline(p4)
    conn.insert([p4.table_entry("lft", {"dlid": SWITCH_DLID}, ("forward", {"port": 1}))])
    return server, conn


def _data_packet() -> bytes:
    tpl = IbFrameTemplate(MAC["a"], MAC["b"], HOST_LID, SWITCH_DLID, 9, max_payload_bytes=1024)
    return bytes(tpl.build(RC_WRITE_ONLY, 0, bytes(1024), reth=(0x1000, 0x100, 1024)))


def _credit() -> bytes:
    """The host's flow-control packet: 512 blocks of buffer, nothing sent."""
    return fc_frame(bytes.fromhex(MAC["a"].replace(":", "")), 0, 0, 512)


def _host_socket(veth) -> socket.socket:  # noqa: F811
    with netns(veth["ns"]["a"]):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        s.setsockopt(263, 23, 1)                      # PACKET_IGNORE_OUTGOING
        s.bind((veth["dev"]["a"], ETH_P_ALL))
    return s


@needs_root
def test_a_switch_returns_the_credit_a_packet_frees_in_the_turn_it_leaves(veth, tmp_path):  # noqa: F811
    """Manual clock: the blocks of a packet that starts out go back to its
    peer in that turn (after it on the wire: its FCTBS counts them), not at
    whatever turn the loop takes next."""
    clock = ManualClock()
    with netns(veth["ns"]["b"]):
        sw = IbSwitch(_switch_config(veth, tmp_path, pcap=False), P4Info.load(IB_P4INFO), clock)
    server, conn = _programmed(sw)
    host = _host_socket(veth)
    try:
        sw.begin()                                    # the initial credit
        port = sw.ports[1]
        assert port.fc_tx[0] == 1
        clock.set(5000)
        frame = _data_packet()
        host.send(_credit())                          # the host's buffer, then a packet
        host.send(frame)
        readable = select.select(sw.fds, [], [], 5.0)[0]
        assert readable, "the packet never reached the switch"
        sw.turn(readable)
        n = blocks(len(frame) - ETH_HDR_BYTES)
        end = 5000 + (len(frame) - ETH_HDR_BYTES) * 8 * 10**9 // RATE_BPS
        assert port.fc_tx[0] == 2
        (fc_due, fc), = [(t, f) for t, f in port.wire.in_flight if parse_fc(f)][-1:]
        # FCTBS: the packet it follows; FCCL: what the peer sent plus the whole buffer free again
        assert (fc_due, parse_fc(fc)) == (end + FC_NS + DELAY_NS, (0, n, n + 512))
    finally:
        host.close()
        conn.close()
        server.stop(grace=0)
        sw.close()


@needs_root
def test_a_switch_in_virtual_time_sends_at_exact_times_and_captures_in_time_order(
        veth, tmp_path, coord_factory):  # noqa: F811
    """The initial credit at 0, credit updates every period,
    a packet forwarded when it arrives, its credit back right behind it; the
    port's pcap holds what it received and sent, in time order."""
    dev_a, dev_b = veth["dev"]["a"], veth["dev"]["b"]
    coord = coord_factory({dev_a: dev_b, dev_b: dev_a}, lookahead_ns(_links(), IB_MIN_WIRE_BYTES))
    sw_clock = VirtualClock(coord.path, "sw")
    h = VirtualClock(coord.path, "h", agent=True)
    with netns(veth["ns"]["b"]):
        sw = IbSwitch(_switch_config(veth, tmp_path, pcap=True), P4Info.load(IB_P4INFO), sw_clock)
    server, conn = _programmed(sw)
    hp = h.attach_port(_host_socket(veth), dev_a)
    frame = _data_packet()
    n = blocks(len(frame) - ETH_HDR_BYTES)
    ser_ns = (len(frame) - ETH_HDR_BYTES) * 8 * 10**9 // RATE_BPS
    sw_clock.on_end = sw.stop

    def switch_loop():
        sw.run()
        sw.close()
        sw_clock.leave()

    def host():
        got, sent = [], []
        h.done = lambda: h.now_ns() >= 3 * PERIOD_NS
        fd = hp.fileno()
        while not h.ended:
            # credit for the switch at 0, a packet at 3000; read what comes at its time
            for _ in h.wait_readable([fd], 3000 * len(sent) if len(sent) < 2 else FOREVER):
                while True:
                    try:
                        f = hp.recv()
                    except BlockingIOError:
                        break
                    got.append((h.now_ns(), parse_fc(f) or len(f)))
            if len(sent) < 2 and h.now_ns() == 3000 * len(sent):
                # as a NIC would: a packet after its serialization, the credit its 6 bytes
                sent.append(hp.send_at(frame if sent else _credit(),
                                       h.now_ns() + (ser_ns if sent else FC_NS) + DELAY_NS))
        return got

    try:
        out = run_members(coord, {"sw": switch_loop, "h": host})
    finally:
        conn.close()
        server.stop(grace=0)
    assert coord.error is None
    arrival = 3000 + ser_ns + DELAY_NS
    back = arrival + ser_ns + DELAY_NS       # forwarded at its arrival
    fc = (0, n, n + 512)                      # FCTBS: the packet; FCCL: all of the buffer free
    # the credit the packet freed (made at its arrival) restarts the period
    period = arrival + FC_NS + DELAY_NS + PERIOD_NS
    assert out["h"][:5] == [(FC_NS + DELAY_NS, (0, 0, 512)), (back, len(frame)),
                            (back + FC_NS, fc), (period, fc), (period + PERIOD_NS, fc)]
    stamps = _pcap_stamps(tmp_path / f"{dev_b}.pcap")
    # the host's credit in, the switch's out, both at 1002: what arrived first
    assert stamps[:7] == [FC_NS + DELAY_NS, FC_NS + DELAY_NS, arrival, back, back + FC_NS, period,
                          period + PERIOD_NS]
    assert stamps == sorted(stamps)


def _pcap_stamps(path) -> list[int]:
    data = path.read_bytes()
    off, out = 24, []
    while off < len(data):
        sec, nsec, caplen, _ = struct.unpack_from("<IIII", data, off)
        out.append(sec * 10**9 + nsec - 1_700_000_000_000_000_000)
        off += 16 + caplen
    return out

