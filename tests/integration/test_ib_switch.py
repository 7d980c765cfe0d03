"""The InfiniBand switch on real veths, programmed over P4Runtime with
ib.p4's contract; the test plays the CAs behind its ports, flow-control
packets included.

What ib.p4 defines is checked on both targets, the embedded InfiniBand
switch (``python -m emulator.ib.switch``) and BMv2 running ib.p4 where it
is installed: forwarding on DLID, the VL from sl2vl, the transport left
as sent, drops counted by reason. Credit-based flow control, which BMv2
cannot express, on the embedded switch as a peer sees it: the switch
advertises its buffer at start, withholds a packet from a port whose peer
granted no credit (and counts the stall), sends it once the credit comes,
and returns the credit of its input buffer when the packet has left.

Needs root; the rig (namespaces, veths, sockets inside the namespaces, the
switch process) is ``tests/switch_rig.py``'s ``SwitchRig``.
"""
from __future__ import annotations

import json
import time

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from emulator.nic.roce import RC_WRITE_ONLY, RETH
from emulator.ib.headers import LRH, IBFlowControl, check_crcs, vcrc
from emulator.ib.pipeline import DROP_LINK_PACKET, DROP_NO_LFT_ENTRY, DROP_NOT_IB
from emulator.p4.p4info import IB_P4INFO
from emulator.p4.p4info import P4Info
from emulator.wire import ETH_P_IB_DATA, ETH_P_IB_LINK
from tests.switch_rig import SwitchRig, recv_ready, requires_netns

pytestmark = requires_netns

HOST_MAC = {1: "02:00:00:00:0b:01", 2: "02:00:00:00:0b:02", 3: "02:00:00:00:0b:03"}
BUFFER_BLOCKS = 64
QUIET_S = 0.3
WAIT_S = 5.0


def start(target: str, tmp_path, vls: int = 1):
    rig = SwitchRig("ib", HOST_MAC)
    if target == "bmv2":
        from emulator.net.bmv2 import bmv2_unavailable_reason
        if bmv2_unavailable_reason():
            pytest.skip(f"BMv2 target: {bmv2_unavailable_reason()}")
        rig.start_bmv2("ibleaf", 1, tmp_path, program="ib")
    else:
        config = {"name": "ibleaf", "device_id": 1,
                  "stats_path": str(tmp_path / "ibleaf.stats.json"),
                  "ports": [{"port_no": p, "rate_bps": 10_000_000_000, "delay_ns": 0}
                            for p in HOST_MAC],
                  "ib": {"vls": vls, "buffer_blocks": BUFFER_BLOCKS, "update_blocks": 1,
                         "update_period_ns": 10_000_000_000}}
        rig.start(config, tmp_path, module="emulator.ib.switch")
    rig.conn.set_pipeline(P4Info.load(IB_P4INFO), device_config=rig.device_config)
    c = rig.conn.codec
    rig.conn.insert([c.table_entry("lft", {"dlid": 0x10}, ("forward", {"port": 2})),
                     c.table_entry("lft", {"dlid": 0x11}, ("forward", {"port": 3}))])
    return rig


@pytest.fixture
def ib_switch(tmp_path):
    rig = start("embedded", tmp_path)
    try:
        yield rig, tmp_path
    finally:
        rig.close()


@pytest.fixture(params=["embedded", "bmv2"])
def either(request, tmp_path):
    """The switch on each target, every host having granted credit (BMv2
    counts the grants as link packets and has no use for them)."""
    rig = start(request.param, tmp_path, vls=2)
    try:
        for p in HOST_MAC:
            for vl in (0, 1):
                rig.socks[p].send(fc(fctbs=0, fccl=1000, vl=vl))
        rig.target = request.param
        yield rig
    finally:
        rig.close()


def data(dlid: int, payload: bytes = b"p" * 64, vl: int = 0, sl: int = 0) -> bytes:
    return bytes(Ether(src=HOST_MAC[1], dst="ff:ff:ff:ff:ff:ff", type=ETH_P_IB_DATA)
                 / LRH(vl=vl, sl=sl, dlid=dlid, slid=0x01) / BTH(opcode=RC_WRITE_ONLY, dqpn=5, psn=7)
                 / RETH(dma_length=len(payload)) / Raw(payload))


def fc(fctbs: int, fccl: int, vl: int = 0) -> bytes:
    return bytes(Ether(src=HOST_MAC[2], dst="ff:ff:ff:ff:ff:ff", type=ETH_P_IB_LINK)
                 / IBFlowControl(fctbs=fctbs, vl=vl, fccl=fccl))


def collect(rig, seconds: float, until=None) -> list[tuple[int, bytes]]:
    got, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        got += recv_ready(rig.socks, 0.05)
        if until is not None and until(got):
            break
    return got


def flow_controls(got, port):
    out = []
    for p, f in got:
        if p == port and f[12:14] == ETH_P_IB_LINK.to_bytes(2, "big"):
            pkt = IBFlowControl(f[14:20])
            assert pkt.lpcrc == vcrc(f[14:18])
            out.append(pkt)
    return out


def datas(got, port):
    return [f for p, f in got if p == port and f[12:14] == ETH_P_IB_DATA.to_bytes(2, "big")]


def test_a_packet_waits_for_credit_then_goes_and_its_buffer_is_credited_back(ib_switch):
    rig, tmp_path = ib_switch
    # at start the switch advertises its whole buffer on every port
    start = collect(rig, WAIT_S, until=lambda g: all(flow_controls(g, p) for p in (1, 2)))
    assert flow_controls(start, 1)[0].fccl == BUFFER_BLOCKS
    sent = data(0x10)
    rig.socks[1].send(sent)
    # h2 granted no credit: nothing leaves port 2
    early = collect(rig, QUIET_S)
    assert datas(early, 2) == []
    rig.socks[2].send(fc(fctbs=0, fccl=100))             # h2's receive buffer: 100 blocks
    later = collect(rig, WAIT_S, until=lambda g: datas(g, 2) and flow_controls(g, 1))
    (out,) = datas(later, 2)
    assert out[28:-6] == sent[28:-6]                     # BTH, RETH, payload: the sender's
    assert check_crcs(out[14:]) == (True, True) and LRH(out[14:]).dlid == 0x10
    # the packet left the switch: port 1's buffer is whole again, ABR counts its blocks
    n_blocks = -(-(len(sent) - 14) // 64)
    assert flow_controls(later, 1)[-1].fccl == n_blocks + BUFFER_BLOCKS
    rig.proc.terminate()
    rig.proc.wait(timeout=10)
    stats = json.loads((tmp_path / "ibleaf.stats.json").read_text())
    port2 = next(p for p in stats["ports"] if p["port"] == 2)["vls"][0]
    assert port2["tx_packets"] == 1 and port2["stalls"] == 1 and port2["stalled_ns"] > 0
    assert all(vl["overruns"] == 0 for p in stats["ports"] for vl in p["vls"])


def test_an_unknown_dlid_is_dropped_counted_and_its_blocks_credited_back(ib_switch):
    rig, _ = ib_switch
    collect(rig, WAIT_S, until=lambda g: flow_controls(g, 1))
    rig.socks[1].send(data(0x0BAD))
    got = collect(rig, WAIT_S, until=lambda g: flow_controls(g, 1))
    assert datas(got, 2) == [] and datas(got, 3) == []
    n_blocks = -(-(len(data(0x0BAD)) - 14) // 64)
    assert flow_controls(got, 1)[-1].fccl == n_blocks + BUFFER_BLOCKS
    drops = rig.conn.read_counter("ib_drop_counter")
    assert drops[DROP_NO_LFT_ENTRY][0] == 1


# ------------------------------------------------------------ ib.p4 on both targets

def test_forwarding_on_dlid_with_the_vl_sl2vl_gives(either):
    rig = either
    c = rig.conn.codec
    rig.conn.insert([c.table_entry("sl2vl", {"port": 3, "sl": 4}, ("set_vl", {"vl": 1}))])
    sent = {0x10: data(0x10, sl=4), 0x11: data(0x11, sl=4)}
    for frame in sent.values():
        rig.socks[1].send(frame)
    got = collect(rig, WAIT_S, until=lambda g: datas(g, 2) and datas(g, 3))
    (to2,), (to3,) = datas(got, 2), datas(got, 3)
    assert LRH(to2[14:]).vl == 0 and LRH(to3[14:]).vl == 1       # no entry for (2, SL 4): VL 0
    for out, dlid in ((to2, 0x10), (to3, 0x11)):
        assert LRH(out[14:]).dlid == dlid
        assert out[22:-6] == sent[dlid][22:-6]                 # BTH, RETH, payload as sent
        icrc_ok, vcrc_ok = check_crcs(out[14:])
        assert icrc_ok                                          # the VL is not in the ICRC
        assert vcrc_ok or rig.target == "bmv2"                  # BMv2 cannot reseal the VCRC
    assert datas(got, 1) == []


def test_drops_are_counted_by_reason(either):
    rig = either
    rig.socks[1].send(data(0x0BAD))                                        # no LFT entry
    rig.socks[1].send(bytes(Ether(src=HOST_MAC[1], type=0x0800) / Raw(b"\x45" + bytes(40))))
    time.sleep(QUIET_S)
    assert datas(collect(rig, QUIET_S), 2) == []
    drops = rig.conn.read_counter("ib_drop_counter")
    assert drops[DROP_NO_LFT_ENTRY][0] == 1 and drops[DROP_NOT_IB][0] == 1
    assert drops[DROP_LINK_PACKET][0] == 2 * len(HOST_MAC)                # the credit grants


def test_an_sl_mapped_to_a_vl_the_port_does_not_run_is_dropped_and_counted(ib_switch):
    rig, tmp_path = ib_switch                        # one data VL per port
    c = rig.conn.codec
    rig.conn.insert([c.table_entry("sl2vl", {"port": 2, "sl": 6}, ("set_vl", {"vl": 3}))])
    rig.socks[2].send(fc(fctbs=0, fccl=100))
    collect(rig, WAIT_S, until=lambda g: flow_controls(g, 1))
    rig.socks[1].send(data(0x10, sl=6))
    got = collect(rig, WAIT_S, until=lambda g: flow_controls(g, 1))
    assert datas(got, 2) == []
    assert flow_controls(got, 1)[-1].fccl == -(-(len(data(0x10)) - 14) // 64) + BUFFER_BLOCKS
    rig.proc.terminate()
    rig.proc.wait(timeout=10)
    stats = json.loads((tmp_path / "ibleaf.stats.json").read_text())
    assert next(p for p in stats["ports"] if p["port"] == 2)["vl_errors"] == 1


@pytest.mark.parametrize("stall", ["before data", "after data", "no data"])
def test_the_lateness_window_starts_with_the_first_data_packet(tmp_path, stall):
    """Flow-control packets go from the start, while a run's agents launch
    and the CPU is busy; a stall then (here the process stopped 150 ms while
    updates were on a 20 ms link) delays no data and is not counted: the
    switch's lateness starts with its first data packet, and one that
    forwards none has no window. A stall after it is counted."""
    import os
    import signal
    rig = SwitchRig("ib", HOST_MAC)
    try:
        stats_path = tmp_path / "ibleaf.stats.json"
        config = {"name": "ibleaf", "device_id": 1, "stats_path": str(stats_path),
                  "ports": [{"port_no": p, "rate_bps": 10_000_000_000, "delay_ns": 20_000_000}
                            for p in HOST_MAC],
                  "ib": {"vls": 1, "buffer_blocks": BUFFER_BLOCKS, "update_blocks": 1,
                         "update_period_ns": 5_000_000}}
        rig.start(config, tmp_path, module="emulator.ib.switch")
        rig.conn.set_pipeline(P4Info.load(IB_P4INFO), device_config=rig.device_config)
        c = rig.conn.codec
        rig.conn.insert([c.table_entry("lft", {"dlid": 0x10}, ("forward", {"port": 2}))])
        for p in HOST_MAC:
            rig.socks[p].send(fc(fctbs=0, fccl=1000))

        def stall(seconds: float) -> None:
            os.kill(rig.proc.pid, signal.SIGSTOP)
            time.sleep(seconds)
            os.kill(rig.proc.pid, signal.SIGCONT)
        collect(rig, 0.1)
        if stall != "after data":
            stall(0.15)                              # updates in flight: released ~150 ms late
            collect(rig, 0.1)
        if stall != "no data":
            rig.socks[1].send(data(0x10))
            assert datas(collect(rig, WAIT_S, until=lambda g: datas(g, 2)), 2)
            collect(rig, 0.1)
        if stall == "after data":
            stall(0.15)
            collect(rig, 0.1)
        rig.close()
        st = json.loads(stats_path.read_text())
        assert (st["lateness_since_ns"] is None) == (stall == "no data")
        worst = max(p["max_lateness_ns"] for p in st["ports"])
        assert (worst >= 100_000_000) == (stall == "after data")
        if stall == "no data":
            assert all(p["lateness_hist"] == [] for p in st["ports"])
    finally:
        rig.close()
