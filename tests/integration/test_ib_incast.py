"""A 15-to-1 incast through the embedded InfiniBand switch (``python -m
emulator.ib.switch``) on real veths: sixteen ``IbNic``s, one per port, run
by this process (each on the packet socket of its port's namespace, ``tests/
switch_rig.py``), fifteen of them writing at line rate to the sixteenth.

Credit-based flow control is what keeps it lossless: each sender may fill
only the few kilobytes of its input buffer that the switch grants, so the
fifteen wait for credit (stalls counted on every sender) instead of the
switch dropping. Checked: every byte arrives intact, no data packet is
dropped anywhere (the switch's overruns and drops, the NICs' sockets), and
nothing is sent twice -- whatever the machine's load, since credit, not
timing, decides what may be sent.
"""
from __future__ import annotations

import json

import pytest

from tests.nics import ib_nic
from emulator.agents.payload import pattern_bytes
from emulator.nic.nic import WcStatus
from emulator.clock import MONOTONIC
from emulator.p4.p4info import IB_P4INFO, P4Info
from tests.nic_sim import NicLoop
from tests.switch_rig import SwitchRig, requires_netns

pytestmark = requires_netns

SENDERS = 15
RECEIVER = SENDERS + 1                       # its port number and LID
PORTS = range(1, RECEIVER + 1)
RATE_BPS = 100_000_000                       # every port and NIC (wall: no dilation here)
BUFFER_BLOCKS = 64                           # 4 KiB per port and VL: the incast must wait
FLOW_BYTES = 24 * 1024
RKEY = 0x500


def ip(p: int) -> str:
    return f"10.0.{p}.1"


def mac(p: int) -> str:
    return f"02:00:00:00:0c:{p:02x}"


@pytest.fixture
def incast(tmp_path):
    rig = SwitchRig("ic", {p: mac(p) for p in PORTS})
    nics = []
    try:
        config = {"name": "ibleaf", "device_id": 1,
                  "stats_path": str(tmp_path / "ibleaf.stats.json"),
                  "ports": [{"port_no": p, "rate_bps": RATE_BPS, "delay_ns": 0} for p in PORTS],
                  "ib": {"buffer_blocks": BUFFER_BLOCKS, "update_blocks": 16,
                         "update_period_ns": 1_000_000}}
        rig.start(config, tmp_path, module="emulator.ib.switch")
        rig.conn.set_pipeline(P4Info.load(IB_P4INFO), device_config=rig.device_config)
        c = rig.conn.codec
        rig.conn.insert([c.table_entry("lft", {"dlid": p}, ("forward", {"port": p}))
                         for p in PORTS])               # LID p lives behind port p
        lids = {ip(p): p for p in PORTS}
        for p in PORTS:
            nics.append(ib_nic(None, mac(p), ip(p), "ff:ff:ff:ff:ff:ff", lid=p, lids=lids,
                              rate_bps=RATE_BPS, mtu_bytes=1024, sock=rig.socks[p],
                              rto_ns=30_000_000_000, clock=MONOTONIC,
                              buffer_blocks=BUFFER_BLOCKS, update_blocks=16,
                              update_period_ns=1_000_000))
        yield rig, nics, tmp_path
    finally:
        rig.close()


def test_a_15_to_1_incast_loses_no_data_packet_and_the_senders_wait_for_credit(incast):
    rig, nics, tmp_path = incast
    receiver = nics[RECEIVER - 1]
    dst = receiver.register_mr(SENDERS * FLOW_BYTES, rkey=RKEY)
    for p in range(1, SENDERS + 1):
        receiver.create_qp(0x100 + p, ip(p), 0x200 + p)
    done = []
    for p in range(1, SENDERS + 1):
        n = nics[p - 1]
        qp = n.create_qp(0x200 + p, ip(RECEIVER), 0x100 + p)
        src = n.register_mr(FLOW_BYTES, buf=pattern_bytes(p, 0, FLOW_BYTES))
        n.post_write(qp, p, (src, 0, FLOW_BYTES), dst.addr + (p - 1) * FLOW_BYTES, RKEY)
    loop = NicLoop(nics, MONOTONIC)
    loop.after_pass.append(lambda: done.extend(c for n in nics[:SENDERS] for c in n.poll_cq()))
    assert loop.wait(lambda: len(done) == SENDERS, timeout_s=60.0), \
        f"{len(done)} of {SENDERS} writes completed"
    assert all(c.status == WcStatus.SUCCESS for c in done)
    for p in range(1, SENDERS + 1):
        got = bytes(dst.buf[(p - 1) * FLOW_BYTES:p * FLOW_BYTES])
        assert got == bytes(pattern_bytes(p, 0, FLOW_BYTES)), f"sender {p}'s data"
    for n in nics:
        n.update_pause_stats()
        n.poll_kernel_stats()
    senders = [n.stats for n in nics[:SENDERS]]
    # no data packet lost: nothing was sent twice, nothing timed out, no socket dropped
    assert sum(s.tx_retransmits + s.timeouts for s in senders) == 0
    assert all(n.stats.rx_socket_drops == 0 for n in nics)
    assert receiver.link.credits.overruns == 0
    assert receiver.stats.rx_data_packets == SENDERS * FLOW_BYTES // 1024
    # the fifteen waited for credit: backpressure, not loss
    assert sum(s.credit_stalls for s in senders) >= SENDERS
    assert all(s.credit_stalled_ns > 0 for s in senders)
    rig.proc.terminate()
    rig.proc.wait(timeout=10)
    stats = json.loads((tmp_path / "ibleaf.stats.json").read_text())
    vls = [vl for port in stats["ports"] for vl in port["vls"]]
    assert sum(vl["overruns"] for vl in vls) == 0                # no packet beyond a buffer
    assert all(port["send_errors"] == 0 and port["vl_errors"] == 0 for port in stats["ports"])
    to_receiver = next(p for p in stats["ports"] if p["port"] == RECEIVER)["vls"][0]
    assert to_receiver["tx_packets"] >= SENDERS * FLOW_BYTES // 1024
