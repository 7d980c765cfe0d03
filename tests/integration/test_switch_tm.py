"""The traffic manager of a real switch process: PFC out of the ingress ports of an incast.

Needs root. Three network namespaces with one veth each (the switch's ends
stay in the root namespace, where ``python -m emulator.dataplane`` runs).
The switch is programmed over P4Runtime: routes to the namespaces' IPs,
DSCP 26 -> priority 3, ``pfc_config`` on ports 1 and 2 for priority 3. Port
3 is 100 times slower than ports 1 and 2; the namespaces behind ports 1 and
2 blast DSCP-26 RoCEv2 frames to the one behind port 3, so the ingress
accounting of ports 1 and 2 crosses XOFF: pause frames must come out of
ports 1 and 2 (captured in the namespaces, dissected by Scapy), be counted
in ``pfc_tx_counter``, logged, and be in the switch's pcaps (tshark too).
The rig is ``tests/switch_rig.py``'s ``SwitchRig``: namespaces, veths and
the switch process are removed in a finalizer.
"""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
import time

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from emulator.control.p4rt_client import SwitchConnection
from emulator.p4.p4info import P4Info
from tests.packet_cases import rocev2
from tests.switch_rig import SwitchRig, recv_ready, requires_netns


pytestmark = requires_netns

PORTS = (1, 2, 3)
DEVICE_ID = 7
ROUTER_MAC = "02:00:00:00:07:01"
HOST_MAC = {p: f"02:00:00:00:77:0{p}" for p in PORTS}
HOST_IP = {p: f"10.77.0.{p}" for p in PORTS}
FAST_BPS, SLOW_BPS = 1_000_000_000, 10_000_000
ROCE_DSCP, ROCE_PRIO = 26, 3
XOFF, XON, HEADROOM = 20_000, 10_000, 60_000
FRAMES_PER_SENDER = 150
PAYLOAD = 1000

@pytest.fixture
def switch(request, tmp_path):
    sr = SwitchRig("tm", HOST_MAC, rcvbuf=4 << 20)
    request.addfinalizer(sr.close)
    cfg = {"name": "tmsw", "device_id": DEVICE_ID,
           "ports": [{"port_no": p, "delay_ns": 0,
                      "rate_bps": SLOW_BPS if p == 3 else FAST_BPS} for p in PORTS],
           "stats_path": str(tmp_path / "tmsw.stats.json"), "buffer_bytes": 400_000,
           "sample_interval_ns": 1_000_000, "router_mac": ROUTER_MAC, "pcap": True, "seed": 1}
    sr.start(cfg, tmp_path)
    return {"proc": sr.proc, "conn": sr.conn, "socks": sr.socks,
            "dir": tmp_path, "sw_if": sr.sw_if, "log": sr.log_path}


def program(conn: SwitchConnection, p4: P4Info) -> None:
    conn.set_pipeline(p4)
    conn.insert([p4.table_entry("my_station", {"eth_dst": ROUTER_MAC}, "NoAction")])
    conn.insert([p4.action_profile_member("ecmp_selector", p, "set_nexthop",
                                          {"port": p, "smac": ROUTER_MAC, "dmac": HOST_MAC[p]})
                 for p in PORTS])
    conn.insert([p4.table_entry("ipv4_lpm", {"ipv4_dst": (HOST_IP[p], 32)}, member_id=p) for p in PORTS])
    conn.insert([p4.table_entry("dscp_to_priority", {"dscp": ROCE_DSCP},
                                ("set_priority", {"priority": ROCE_PRIO}))])
    conn.insert([p4.table_entry("pfc_config", {"ig_port": p, "priority": ROCE_PRIO},
                                ("set_pfc_thresholds", {"xoff_bytes": XOFF, "xon_bytes": XON,
                                                        "headroom_bytes": HEADROOM}))
                 for p in (1, 2)])


def _drain(socks, got, seconds):
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        got.extend(recv_ready(socks, min(left, 0.05)))


def test_incast_into_a_slow_port_pauses_both_ingress_ports(switch):
    p4 = P4Info.load()
    conn, socks = switch["conn"], switch["socks"]
    program(conn, p4)
    frames = {p: [rocev2(HOST_IP[p], HOST_IP[3], sport=49152 + p, src_mac=HOST_MAC[p],
                         dst_mac=ROUTER_MAC, payload_len=PAYLOAD, psn=i, ip_id=i)
                  for i in range(FRAMES_PER_SENDER)] for p in (1, 2)}
    got: list[tuple[int, bytes]] = []
    for i in range(FRAMES_PER_SENDER):            # both senders at once, as fast as we can
        for p in (1, 2):
            while True:
                try:
                    socks[p].send(frames[p][i])
                    break
                except BlockingIOError:
                    _drain(socks, got, 0.001)
        if i % 16 == 15:
            _drain(socks, got, 0)
    # The slow port drains ~1.25 MB/s: XON comes once each ingress is back under XON.
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        _drain(socks, got, 0.2)
        resumed = {p for p, f in got if f[12:14] == b"\x88\x08"
                   and Ether(f)[MACControlClassBasedFlowControl].c3_pause_time == 0}
        if resumed == {1, 2}:
            break

    pauses = {1: [], 2: [], 3: []}
    for p, f in got:
        if f[12:14] == b"\x88\x08":
            pauses[p].append(Ether(f))
    assert pauses[1] and pauses[2], f"no pause frames: {[(p, len(v)) for p, v in pauses.items()]}"
    assert not pauses[3]                           # the congested egress is not paused by us
    for p in (1, 2):
        for e in pauses[p]:
            assert (e.dst, e.src, e.type) == ("01:80:c2:00:00:01", ROUTER_MAC, 0x8808)
            pfc = e[MACControlClassBasedFlowControl]
            assert [getattr(pfc, f"c{i}_enabled") for i in range(8)] == [0, 0, 0, 1, 0, 0, 0, 0]
            assert pfc.c3_pause_time in (0, 0xFFFF)
            assert all(getattr(pfc, f"c{i}_pause_time") == 0 for i in range(8) if i != 3)
        timers = [e[MACControlClassBasedFlowControl].c3_pause_time for e in pauses[p]]
        assert timers[0] == 0xFFFF and timers[-1] == 0, timers     # XOFF first, XON last
    delivered = [f for p, f in got if p == 3 and f[12:14] == b"\x08\x00"]
    assert delivered and all(f[0:6] == bytes.fromhex(HOST_MAC[3].replace(":", "")) for f in delivered)

    for p in (1, 2):
        cell = p * 8 + ROCE_PRIO
        sent = conn.read_counter("pfc_tx_counter", index=cell)[cell]
        assert sent[0] == len(pauses[p]) > 0 and sent[1] == 60 * sent[0]
    assert conn.read_counter("pfc_tx_counter", index=3 * 8 + ROCE_PRIO)[3 * 8 + ROCE_PRIO] == (0, 0)
    cell = 3 * 8 + ROCE_PRIO
    assert conn.read_counter("tx_prio_counter", index=cell)[cell][0] == len(delivered)
    assert conn.read_counter("enq_prio_counter", index=cell)[cell][0] > 0

    # Stop the switch: stats, raw logs and pcaps are written at exit.
    conn.close()
    switch["conn"] = None
    proc = switch["proc"]
    proc.terminate()
    proc.wait(timeout=10)
    d, sw_if = switch["dir"], switch["sw_if"]
    stats = json.loads((d / "tmsw.stats.json").read_text())
    by_port = {s["port"]: s for s in stats["ports"]}
    for p in (1, 2):
        prio = by_port[p]["priorities"][ROCE_PRIO]
        assert prio["pause_tx"] + prio["resume_tx"] == len(pauses[p])
    assert by_port[3]["priorities"][ROCE_PRIO]["max_depth_bytes"] > XOFF
    assert stats["buffer_bytes"] == 400_000 and stats["headroom_reserved_bytes"] == 2 * HEADROOM
    with open(d / "tmsw.events.csv") as f:
        events = list(csv.DictReader(f))
    assert {(int(e["port"]), int(e["priority"])) for e in events if e["event"] == "pause_tx"} == \
        {(1, ROCE_PRIO), (2, ROCE_PRIO)}
    with open(d / "tmsw.qdepth.csv") as f:
        depths = list(csv.DictReader(f))
    assert max(int(r["depth_bytes"]) for r in depths if r["port"] == "3") > XOFF

    pcap1 = d / f"{sw_if[1]}.pcap"
    captured = rdpcap(str(pcap1))
    assert sum(1 for c in captured if c.haslayer(MACControlClassBasedFlowControl)) == len(pauses[1])
    assert sum(1 for c in captured if c.haslayer("UDP")) >= FRAMES_PER_SENDER * 0.5
    if shutil.which("tshark"):
        # Wireshark's MAC control dissector ("macc"): class based flow control = opcode 0x0101.
        out = subprocess.run(["tshark", "-r", str(pcap1), "-Y", "macc.opcode == 0x0101", "-T", "fields",
                              "-E", "separator=,", "-e", "eth.src", "-e", "macc.cbfc.enbv.c3",
                              "-e", "macc.cbfc.pause_time.c3"], capture_output=True, text=True, timeout=30)
        rows = out.stdout.split()
        assert len(rows) == len(pauses[1]), out.stderr
        assert all(r.split(",")[0:2] == [ROUTER_MAC, "1"] for r in rows), rows
        assert [int(r.split(",")[2]) for r in rows] == \
            [e[MACControlClassBasedFlowControl].c3_pause_time for e in pauses[1]]
        out = subprocess.run(["tshark", "-r", str(d / f"{sw_if[3]}.pcap"), "-Y", "infiniband.bth",
                              "-c", "1", "-T", "fields", "-e", "infiniband.bth.opcode"],
                             capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "10", out.stderr        # RDMA WRITE Only
