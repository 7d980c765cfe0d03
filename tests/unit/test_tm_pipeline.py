"""fabric.p4's lossless part on the embedded target, programmed over real P4Runtime.

dscp_to_priority, pfc_config and ecn_config reach the traffic manager through
the pipeline's verdict; MAC control frames are consumed at ingress; the TM's
counters (tx_prio, ecn_mark, pfc_tx) read back over P4Runtime.
"""
from __future__ import annotations

import pytest
from scapy.compat import raw
from scapy.contrib.mac_control import MACControlClassBasedFlowControl, MACControlPause
from scapy.layers.l2 import Ether

from emulator.dataplane.pfc import build_pfc_frame, pause_frame
from emulator.dataplane.pipeline import DROP_PORT, FabricPipeline
from emulator.dataplane.state import SwitchState
from emulator.dataplane.tm import TrafficManager
from emulator.p4.p4info import P4Info
from tests.packet_cases import (
    DEVICE_ID, H1_IP, H1_MAC, H1_PORT, H2_IP, H2_PORT, program, rocev2, to_h1,
)
from tests.switch_rig import p4rt_switch

ROCE_DSCP, ROCE_PRIO, CNP_DSCP, CNP_PRIO = 26, 3, 48, 6
XOFF, XON, HEADROOM = 8000, 6000, 50_000
KMIN, KMAX, PMAX = 5000, 200_000, 10


@pytest.fixture(scope="module")
def p4info():
    return P4Info.load()


class Rig:
    def __init__(self, p4, state, server, conn):
        self.p4, self.state, self.server, self.conn = p4, state, server, conn
        self.pipe = FabricPipeline(state, p4)
        self.pfc_in = []
        self.pipe.pfc_handler = lambda *a: self.pfc_in.append(a)

    def qos(self, pfc_ports=(H2_PORT,), ecn_ports=(H1_PORT,)):
        p4 = self.p4
        ents = [p4.table_entry("dscp_to_priority", {"dscp": ROCE_DSCP}, ("set_priority", {"priority": ROCE_PRIO})),
                p4.table_entry("dscp_to_priority", {"dscp": CNP_DSCP}, ("set_priority", {"priority": CNP_PRIO}))]
        ents += [p4.table_entry("pfc_config", {"ig_port": port, "priority": ROCE_PRIO},
                                ("set_pfc_thresholds", {"xoff_bytes": XOFF, "xon_bytes": XON,
                                                        "headroom_bytes": HEADROOM}))
                 for port in pfc_ports]
        ents += [p4.table_entry("ecn_config", {"eg_port": port, "priority": ROCE_PRIO},
                                ("set_ecn_thresholds", {"kmin_bytes": KMIN, "kmax_bytes": KMAX,
                                                        "pmax_per_mille": PMAX}))
                 for port in ecn_ports]
        self.conn.insert(ents)

    def cell(self, counter: str, index: int) -> tuple[int, int]:
        return self.conn.read_counter(counter, index=index)[index]


@pytest.fixture
def rig(p4info):
    with p4rt_switch(p4info, DEVICE_ID) as (state, server, conn):
        r = Rig(p4info, state, server, conn)
        program(conn, p4info)
        yield r


def test_dscp_selects_the_priority_and_pfc_config_makes_it_lossless(rig):
    rig.qos()
    frame = rocev2()                                        # DSCP 26, ECT(0), h2 -> h1
    port, out = rig.pipe.ingress(frame, H2_PORT)
    v = rig.pipe.verdict
    assert (port, bytes(out)) == (H1_PORT, to_h1(frame))
    assert v.priority == ROCE_PRIO and v.pfc == (XOFF, XON, HEADROOM)
    assert v.ecn == (KMIN, KMAX, PMAX)
    assert (v.in_cell, v.eg_cell) == (H2_PORT * 8 + ROCE_PRIO, H1_PORT * 8 + ROCE_PRIO)
    # CNP class: priority 6, no pfc_config for it: lossy; no ecn_config either.
    rig.pipe.ingress(rocev2(tos=CNP_DSCP << 2, sport=50000), H2_PORT)
    assert (rig.pipe.verdict.priority, rig.pipe.verdict.pfc, rig.pipe.verdict.ecn) == (CNP_PRIO, None, None)
    # No entry for the DSCP: priority 0, lossy.
    rig.pipe.ingress(rocev2(tos=10 << 2 | 2, sport=50001), H2_PORT)
    assert (rig.pipe.verdict.priority, rig.pipe.verdict.pfc) == (0, None)
    # Lossless only on the ingress port pfc_config names.
    rig.pipe.ingress(rocev2(H1_IP, H2_IP, src_mac=H1_MAC), H1_PORT)
    assert rig.pipe.verdict.priority == ROCE_PRIO and rig.pipe.verdict.pfc is None
    assert rig.pipe.verdict.ecn is None                     # no ecn_config on port 2


def test_flow_cache_keys_on_dscp_not_on_ecn(rig):
    rig.qos()
    pipe = rig.pipe
    for ecn in (0, 1, 2, 3):
        pipe.ingress(rocev2(tos=ROCE_DSCP << 2 | ecn), H2_PORT)
        assert pipe.verdict.priority == ROCE_PRIO
    assert len(pipe._cache) == 1                            # one flow, whatever its ECN bits
    pipe.ingress(rocev2(tos=CNP_DSCP << 2 | 2), H2_PORT)    # same 5-tuple, other DSCP
    assert pipe.verdict.priority == CNP_PRIO and len(pipe._cache) == 2


def test_enq_prio_counter_counts_egress_port_and_priority(rig):
    rig.qos()
    frames = [rocev2(payload_len=n) for n in (64, 500)]
    for f in frames:
        rig.pipe.ingress(f, H2_PORT)
    rig.pipe.ingress(rocev2(tos=0, payload_len=100), H2_PORT)
    assert rig.cell("enq_prio_counter", H1_PORT * 8 + ROCE_PRIO) == (2, sum(map(len, frames)))
    assert rig.cell("enq_prio_counter", H1_PORT * 8) == (1, len(rocev2(tos=0, payload_len=100)))
    assert rig.cell("enq_port_counter", H1_PORT)[0] == 3


def test_table_changes_reach_cached_flows(rig):
    rig.qos()
    frame = rocev2()
    rig.pipe.ingress(frame, H2_PORT)
    assert rig.pipe.verdict.priority == ROCE_PRIO
    rig.conn.modify(rig.p4.table_entry("dscp_to_priority", {"dscp": ROCE_DSCP},
                                       ("set_priority", {"priority": 5})))
    rig.pipe.ingress(frame, H2_PORT)
    assert rig.pipe.verdict.priority == 5 and rig.pipe.verdict.pfc is None
    rig.conn.delete(rig.p4.table_entry("ecn_config", {"eg_port": H1_PORT, "priority": ROCE_PRIO}))
    rig.conn.modify(rig.p4.table_entry("dscp_to_priority", {"dscp": ROCE_DSCP},
                                       ("set_priority", {"priority": ROCE_PRIO})))
    rig.pipe.ingress(frame, H2_PORT)
    assert rig.pipe.verdict.pfc == (XOFF, XON, HEADROOM) and rig.pipe.verdict.ecn is None


def test_pfc_frames_are_consumed_counted_and_handed_to_the_tm(rig):
    frame = build_pfc_frame(bytes(6), 0b10001000, (0, 0, 0, 0xFFFF, 0, 0, 0, 12))
    assert rig.pipe.ingress(frame, H1_PORT) == (DROP_PORT, frame)
    assert rig.pfc_in == [(H1_PORT, 0b10001000, (0, 0, 0, 0xFFFF, 0, 0, 0, 12))]
    assert rig.cell("pfc_rx_counter", H1_PORT * 8 + 3) == (1, 60)
    assert rig.cell("pfc_rx_counter", H1_PORT * 8 + 7) == (1, 60)
    assert rig.cell("pfc_rx_counter", H1_PORT * 8 + 0) == (0, 0)
    assert rig.cell("rx_port_counter", H1_PORT) == (1, 60)
    assert rig.cell("pipeline_drop_counter", H1_PORT) == (0, 0)   # consumed, not a drop
    # An 802.3x PAUSE (opcode 1): consumed too, but no PFC.
    pause = raw(Ether(dst="01:80:c2:00:00:01", src="02:00:00:00:00:09") / MACControlPause(pause_time=3))
    assert rig.pipe.ingress(pause, H1_PORT)[0] == DROP_PORT
    assert len(rig.pfc_in) == 1
    assert rig.cell("rx_port_counter", H1_PORT)[0] == 2


def test_tm_reserves_the_configured_headroom_and_counts_over_p4runtime(rig, p4info):
    rig.qos(pfc_ports=(1, 2, 3))
    tm = TrafficManager([(1, 10**9, 0), (2, 10**9, 0), (3, 10**9, 0)], 1_000_000,
                        bytes.fromhex("020000000001"), seed=1)
    rig.pipe.on_tables = tm.set_tables
    _ = rig.pipe.tables
    assert tm.buffer.reserved_bytes == 3 * HEADROOM and tm.buffer.limit == 1_000_000 - 3 * HEADROOM
    sent = []
    tm.ports[H2_PORT].send = sent.append
    tm.ports[H1_PORT].send = sent.append
    now = 0
    # Enough to cross XOFF on (port 2, priority 3), into an ECN-configured queue above Kmin.
    for i in range(40):
        port, out = rig.pipe.ingress(rocev2(payload_len=900, psn=i), H2_PORT)
        assert tm.enqueue(now, out, rig.pipe.verdict)
    tm.transmit(10**12)
    pfc = [Ether(f) for f in sent if f[12:14] == b"\x88\x08"]
    assert pfc and all(p.haslayer(MACControlClassBasedFlowControl) for p in pfc)
    assert rig.cell("pfc_tx_counter", H2_PORT * 8 + ROCE_PRIO)[0] == len(pfc) == 2   # XOFF, XON
    n = len(rocev2(payload_len=900))
    assert rig.cell("tx_prio_counter", H1_PORT * 8 + ROCE_PRIO) == (40, 40 * n)
    assert rig.cell("tx_port_counter", H1_PORT) == (40, 40 * n)
    marks = sum(1 for f in sent if f[12:14] == b"\x08\x00" and f[15] & 3 == 3)
    assert rig.cell("ecn_mark_counter", H1_PORT * 8 + ROCE_PRIO) == (marks, marks * n)
    assert tm.ports[H1_PORT].ecn_marks[ROCE_PRIO] == marks


def test_packet_out_verdict_is_priority_0_lossy(rig):
    rig.qos(ecn_ports=(2,))
    frame = rocev2()
    assert rig.pipe.packet_out(frame, 2) == 2
    v = rig.pipe.verdict
    assert (v.priority, v.pfc, v.in_cell, v.eg_cell) == (0, None, 255 * 8, 16)
    assert v.ecn is None                      # ecn_config is on (2, 3), not (2, 0)


def test_pause_frame_for_an_unconfigured_pipeline_is_dropped_silently(p4info):
    pipe = FabricPipeline(SwitchState(), p4info)
    got = []
    pipe.pfc_handler = lambda *a: got.append(a)
    assert pipe.ingress(pause_frame(bytes(6), 3, 5), 1)[0] == DROP_PORT and got == []


# ---------------------------------------------------------------- INT (HPCC)

def _int_rig(rig, dilation=1.0):
    from emulator.control.qos import int_port_params
    rig.qos()
    params = int_port_params(10**10, dilation)
    rig.conn.insert([rig.p4.table_entry("int_port", {"eg_port": H1_PORT}, ("set_int_port", params))])
    tm = TrafficManager([(1, 10**9, 0), (2, 10**9, 0), (3, 10**9, 0)], 1_000_000,
                        bytes.fromhex("020000000001"), seed=1)
    rig.pipe.on_tables = tm.set_tables
    _ = rig.pipe.tables
    sent = []
    tm.ports[H1_PORT].send = sent.append
    return tm, sent, params


def test_int_port_fills_one_record_per_switch_at_dequeue(rig):
    from emulator import int_md
    from tests.packet_cases import rocev2_int
    tm, sent, params = _int_rig(rig)
    assert params == {"rate_mbps": 10_000, "ts_q16": 65_536_000}
    frames = [rocev2_int(max_hops=3, psn=i, payload_len=500) for i in range(3)]
    start = 5_000_000
    for f in frames:                              # three back to back: a queue forms
        port, out = rig.pipe.ingress(f, H2_PORT)
        assert port == H1_PORT and tm.enqueue(start, out, rig.pipe.verdict)
    tm.transmit(10**12)
    assert len(sent) == 3
    size = len(frames[0])
    frame_ns = (size + 24) * 8                    # 1 Gb/s: 8 ns a byte
    for k, out in enumerate(sent):
        st = int_md.strip(out)
        assert st.kind == int_md.INT_KIND_COLLECT and st.max_hops == 3
        (hop,) = int_md.unpack_hops(st.hops)      # this switch's record, in slot 0
        # the queue its class left at dequeue, the port's bytes so far (this
        # frame included), the dequeue time (fabric ns: D = 1), the rate
        assert hop == (size * (2 - k), size * (k + 1), start + k * frame_ns, 10_000)
    # the rest of the packet is what the source sent, routed
    assert int_md.strip(sent[0]).frame[34:] == int_md.strip(frames[0]).frame[34:]


def test_int_timestamp_is_fabric_time_and_echo_or_full_stacks_pass(rig):
    from emulator import int_md
    from emulator.int_md import IntHop
    from tests.packet_cases import rocev2_int
    tm, sent, params = _int_rig(rig, dilation=1000.0)
    t = 7_000_000_000                              # the switch's clock: wall ns
    full = rocev2_int(max_hops=1, hop_count=1, hops=[IntHop(qlen_bytes=1)])
    echo = rocev2_int(max_hops=2, hop_count=1, kind=int_md.INT_KIND_ECHO,
                      hops=[IntHop(qlen_bytes=2), IntHop()], psn=8)
    fresh = rocev2_int(max_hops=2, psn=9)
    for f in (full, echo, fresh):
        tm.enqueue(t, rig.pipe.ingress(f, H2_PORT)[1], rig.pipe.verdict)
    tm.transmit(10**13)
    full_out, echo_out, fresh_out = sent
    assert full_out[34:] == full[34:] and echo_out[34:] == echo[34:]     # untouched after IPv4
    (hop,) = int_md.unpack_hops(int_md.strip(fresh_out).hops)
    dequeue = t + (len(full) + len(echo) + 48) * 8
    assert hop.ts_ns == dequeue * params["ts_q16"] // 65_536_000 == dequeue // 1000
    # the tx-bytes counter counts every packet of the port, INT or not
    assert hop.tx_bytes == len(full) + len(echo) + len(fresh)
