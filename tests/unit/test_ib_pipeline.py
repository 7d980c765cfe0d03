"""``p4src/ib.p4`` on the embedded target (``emulator/ib/pipeline.py``),
programmed as the subnet manager would: ib.p4's P4Info set and the LFTs of
``emulator.ib.sm.sweep`` written over real gRPC P4Runtime to the embedded
target's server, then packets through the pipeline: forwarding on DLID,
link packets consumed, strangers and unknown DLIDs dropped and counted,
and on egress the VL, FECN above the threshold and a resealed VCRC."""
from __future__ import annotations

from pathlib import Path

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from emulator.nic.roce import RC_WRITE_ONLY, RETH
from emulator.control.p4rt_client import SwitchConnection
from emulator.dataplane.p4rt_server import P4RuntimeServer
from emulator.dataplane.state import SwitchState
from emulator.ib.headers import LRH, IBFlowControl, check_crcs
from emulator.ib.pipeline import (
    DROP_LINK_PACKET, DROP_NO_LFT_ENTRY, DROP_NOT_IB, DROP_PORT, IbPipeline,
)
from emulator.ib.sm import lft_entries, sweep
from emulator.p4.p4info import IB_P4INFO, P4Info
from emulator.topo import load_fabric
from emulator.wire import ETH_P_IB_DATA, ETH_P_IB_LINK

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


@pytest.fixture
def leaf1():
    """leaf1 of clos-2x2, its LFT written by the 'subnet manager' over P4Runtime."""
    p4 = P4Info.load(IB_P4INFO)
    state = SwitchState()
    server = P4RuntimeServer(state, 1, 0, p4)
    server.start()
    conn = SwitchConnection(server.address, 1, (0, 1), timeout=3.0)
    try:
        conn.set_pipeline(p4)
        subnet = sweep(load_fabric(TOPOLOGIES / "clos-2x2.yaml"))
        conn.insert(lft_entries(subnet, "leaf1", p4))
        yield IbPipeline(state, p4), conn, subnet
    finally:
        # the server first: a client closed while its server lives waits
        # ~0.2 s for its stream's reader to end
        server.stop(grace=0)
        conn.close()


def packet(dlid: int, slid: int = 1, sl: int = 0, payload: bytes = b"z" * 64) -> bytes:
    return bytes(Ether(type=ETH_P_IB_DATA)
                 / LRH(sl=sl, dlid=dlid, slid=slid) / BTH(opcode=RC_WRITE_ONLY, dqpn=9, psn=1)
                 / RETH(dma_length=len(payload)) / Raw(payload))


def test_a_packet_leaves_by_the_port_the_subnet_managers_lft_names(leaf1):
    pipe, _, subnet = leaf1
    for dst in ("h2", "h3", "h4"):
        port, _ = pipe.ingress(packet(subnet.lid[dst]), 1)
        assert port == subnet.lft["leaf1"][subnet.lid[dst]] != DROP_PORT
    assert pipe.ingress(packet(subnet.lid["h2"]), 1)[0] == 2     # h2 hangs off leaf1's port 2


def test_what_is_not_forwarded_is_counted_by_reason(leaf1):
    pipe, conn, _ = leaf1
    link = bytes(Ether(type=ETH_P_IB_LINK) / IBFlowControl(fctbs=1, vl=0, fccl=9))
    ipv4 = bytes(Ether(type=0x0800) / Raw(b"\x45" + bytes(40)))
    assert pipe.ingress(link, 3)[0] == DROP_PORT
    assert pipe.ingress(ipv4, 3)[0] == DROP_PORT
    assert pipe.ingress(packet(0x0BAD), 3)[0] == DROP_PORT            # no LFT entry
    drops = conn.read_counter("ib_drop_counter")
    assert {i: drops[i][0] for i in (DROP_NOT_IB, DROP_LINK_PACKET, DROP_NO_LFT_ENTRY)} == \
        {DROP_NOT_IB: 1, DROP_LINK_PACKET: 1, DROP_NO_LFT_ENTRY: 1}
    assert conn.read_counter("ib_rx_port_counter")[3][0] == 3


def test_egress_sets_the_vl_marks_fecn_above_the_threshold_and_reseals_the_vcrc(leaf1):
    pipe, conn, _ = leaf1
    codec = conn.codec
    conn.insert([codec.table_entry("sl2vl", {"port": 3, "sl": 5}, ("set_vl", {"vl": 2})),
                 codec.table_entry("cc_threshold", {"port": 3},
                                   ("set_cc_threshold", {"packets": 8, "marking_rate": 0}))])
    calm = pipe.egress(packet(5, sl=5), 3, qdepth_packets=7)
    busy = pipe.egress(packet(5, sl=5), 3, qdepth_packets=8)
    other = pipe.egress(packet(5, sl=1), 3, qdepth_packets=50)       # no sl2vl entry: VL 0
    assert LRH(calm[14:]).vl == 2 and not LRH(calm[14:])[BTH].fecn
    assert LRH(busy[14:]).vl == 2 and LRH(busy[14:])[BTH].fecn == 1
    assert LRH(other[14:]).vl == 0 and LRH(other[14:])[BTH].fecn == 1
    for out in (calm, busy, other):
        assert check_crcs(out[14:]) == (True, True)        # ICRC untouched, VCRC resealed
    assert conn.read_counter("fecn_mark_counter")[3][0] == 2


def test_above_the_threshold_one_packet_in_marking_rate_plus_one_is_marked(leaf1):
    pipe, conn, _ = leaf1
    conn.insert([conn.codec.table_entry("cc_threshold", {"port": 3},
                                        ("set_cc_threshold", {"packets": 4, "marking_rate": 2}))])
    depths = [9, 9, 9, 1, 9, 9, 9, 9, 3, 9]          # below the threshold: not eligible, not counted
    marked = [LRH(pipe.egress(packet(5), 3, qdepth_packets=d)[14:])[BTH].fecn for d in depths]
    assert marked == [1, 0, 0, 0, 1, 0, 0, 1, 0, 0]
    assert conn.read_counter("fecn_mark_counter")[3][0] == 3


def test_before_a_pipeline_config_nothing_passes():
    p4 = P4Info.load(IB_P4INFO)
    pipe = IbPipeline(SwitchState(), p4)
    assert pipe.ingress(packet(2), 1)[0] == DROP_PORT
