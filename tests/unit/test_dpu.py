"""DPU vs plain-NIC endpoints: tenant isolation by BTH P_Key over veth
(real frames from another tenant are dropped, counted, never ACKed; a plain
NIC filters in software at host-CPU cost), per-packet host CPU work capping
what a plain-NIC host drives while a DPU host runs at line rate, and a
storage target served by RDMA READ."""
from __future__ import annotations

import random
import socket
import time

import pytest

from emulator.schema.nic import HostCpuConfig
from tests.nics import roce_nic
from emulator import wire
from emulator.nic import roce
from emulator.agents.dpu import Endpoint, StorageClient, StorageTarget, tenant_pkey
from emulator.nic.nic import RoceNic, WcOpcode, WcStatus
from emulator.nic.roce import parse_roce

from .test_nic_core import IP_A, IP_B, MAC_A, MAC_B, QPN_A, QPN_B
from .test_nic_loopback import needs_root, veth  # noqa: F401  (fixture)
from tests.nic_sim import SimNicPair, manual_clock

from .veth_nics import IP, MAC, QPN, VethPair, netns

MS = 1_000_000


def pattern(n, seed=1):
    return bytearray(random.Random(seed).randbytes(n))


@needs_root
@pytest.mark.parametrize("dpu", [True, False], ids=["dpu", "plain_nic"])
def test_tenant_isolation_over_veth(veth, dpu):  # noqa: F811
    fw_ns = 200_000                                  # software filter: 0.2 ms per packet
    p = VethPair(veth, 50_000_000)
    try:
        # host a: tenant 1 (DPU or plain NIC with a host firewall); b: tenant 1 too
        ea = Endpoint(p.a, dpu=dpu, tenant=1, host_cpu=HostCpuConfig(firewall_ns_per_packet=fw_ns))
        Endpoint(p.b, dpu=True, tenant=1)
        qa2 = p.a.create_qp(QPN["a"] + 1, IP["b"], 77)   # its peer QP 77 does not exist
        ea.apply(qa2)
        size = 64 * 1024
        src = p.b.register_mr(size, buf=pattern(size))
        dst = p.a.register_mr(size)
        # tenant 2's frames: same addresses, QPs, PSNs; would be placed and ACKed
        evil = {q: roce.FrameTemplate(MAC["b"], MAC["a"], IP["b"], IP["a"], 50000, q,
                                      pkey=tenant_pkey(2)) for q in (QPN["a"], QPN["a"] + 1)}
        with netns(veth["ns"]["b"]):
            inj = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            inj.bind((veth["dev"]["b"], 0))
        p.start()
        ea.reset()
        n_evil = 0
        junk = bytes(1024)
        for psn in range(40):                        # before, during and after the WRITE
            for q, t in evil.items():
                inj.send(bytes(t.build(roce.RC_WRITE_ONLY, psn, junk, ack_req=True,
                                       reth=(dst.addr, dst.rkey, 1024))))
                n_evil += 1
            if psn == 10:
                p.call(p.b, lambda: p.b.post_write(p.qb, 1, (src, 0, size), dst.addr, dst.rkey))
            p.run_for(0.002)
        inj.close()
        assert p.wait(lambda ca, cb: cb and ca, 10), (p.a.stats, p.b.stats)
        p.run_for(0.1)
        sa, sb = p.a.stats, p.b.stats
        assert dst.buf == src.buf                    # tenant 2 wrote nothing
        assert sa.tenant_drops == n_evil             # every foreign frame, none of ours
        assert sa.rx_data_packets == size // 1024 and sa.rx_duplicates == 0
        assert sa.tx_naks == 0 and qa2.epsn == 0     # never seen by a QP
        assert sb.rx_ignored == 0 and sb.rx_acks >= 1   # no ACK for tenant 2 came out
        assert sb.tenant_drops == 0
        host = ea.host_cpu
        if dpu:
            assert host.busy_ns == 0 and ea.dpu_cpu.busy_ns == 0
        else:                                        # each foreign frame and each of ours
            assert host.busy_ns == pytest.approx((n_evil + size // 1024) * fw_ns, rel=0.01)
    finally:
        p.close()


class Duo(SimNicPair):
    """Sender a (Endpoint under test) and receiver b over a socketpair, on a
    ``ManualClock`` (the CPU model runs on the NICs' clock)."""

    def __init__(self, rate_bps, endpoint_kw, rx_endpoint_kw=None):
        clock = manual_clock()
        sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        for s in (sa, sb):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        kw = dict(rate_bps=rate_bps, rto_ns=2_000 * MS, clock=clock)
        self.a = roce_nic(None, MAC_A, IP_A, MAC_B, sock=sa, **kw)
        self.b = roce_nic(None, MAC_B, IP_B, MAC_A, sock=sb, **kw)
        self.qa = self.a.create_qp(QPN_A, IP_B, QPN_B)
        self.qb = self.b.create_qp(QPN_B, IP_A, QPN_A)
        self.ea = Endpoint(self.a, **endpoint_kw)
        self.eb = Endpoint(self.b, **(rx_endpoint_kw or {}))
        self._init_loop(clock)

    def wait(self, pred, timeout_s):
        return self.loop.wait(pred, timeout_s)


def drive(dpu: bool, cores: int = 1):
    """1 MiB WRITE at 100 Mbit/s with 0.4 ms of crypto per packet: (packets
    per second, host CPU busy fraction over the transfer, dpu busy)."""
    cost_ns = 400_000
    size = 1 << 20
    d = Duo(100_000_000, {"dpu": dpu, "host_cpu": HostCpuConfig(cores=cores,
                                                                  crypto_ns_per_packet=cost_ns)})
    try:
        src = d.a.register_mr(size, buf=pattern(size, 3))
        dst = d.b.register_mr(size)
        d.run_for(0.02)
        d.ea.reset()
        d.a.post_write(d.qa, 1, (src, 0, size), dst.addr, dst.rkey)
        assert d.wait(lambda: d.cq[d.a], 15)
        c = d.cq[d.a][0]
        assert c.status == WcStatus.SUCCESS and dst.buf == src.buf
        el = c.complete_ns - c.post_ns
        pps = (size // 1024) / (el / 1e9)
        busy = d.ea.host_cpu.busy_ns / (el * cores)
        return pps, busy, 1e9 / cost_ns
    finally:
        d.close()


def test_dpu_host_drives_line_rate_plain_host_is_cpu_bound():
    line_pps = 100e6 / ((wire.ROCE_HDR_BYTES + 1024 + wire.ICRC_BYTES + wire.WIRE_OVERHEAD_BYTES) * 8)
    pps_dpu, busy_dpu, _ = drive(dpu=True)
    pps_plain, busy_plain, cpu_pps = drive(dpu=False)
    print(f"\nline {line_pps:.0f} pkt/s; DPU {pps_dpu:.0f} pkt/s host busy {busy_dpu:.3f}; "
          f"plain {pps_plain:.0f} pkt/s (CPU bound {cpu_pps:.0f}) host busy {busy_plain:.3f}")
    assert 0.65 * cpu_pps <= pps_plain <= 1.02 * cpu_pps
    assert busy_plain >= 0.85
    assert busy_dpu == 0.0
    assert pps_dpu >= 0.5 * line_pps and pps_dpu >= 2.5 * pps_plain
    pps_2, busy_2, _ = drive(dpu=False, cores=2)     # two cores prepare packets in parallel
    print(f"plain, 2 cores: {pps_2:.0f} pkt/s busy {busy_2:.3f}")
    assert 0.65 * 2 * cpu_pps <= pps_2 <= 1.02 * 2 * cpu_pps


@pytest.mark.parametrize("dpu", [True, False], ids=["dpu_target", "plain_target"])
def test_storage_target_serves_blocks_by_read(dpu):
    blk, nblk = 4096, 64
    cost_ns = 300_000                                # storage protocol work per packet
    lat_ns = 20 * MS
    # a = storage server, b = client
    d = Duo(100_000_000, {"dpu": dpu, "host_cpu": HostCpuConfig(storage_ns_per_packet=cost_ns)})
    try:
        disk = StorageTarget(d.a, blk, nblk, storage_latency_ns=lat_ns, endpoint=d.ea,
                             buf=pattern(blk * nblk, 8))
        disk.serve(d.qa)
        cl = StorageClient(d.b, d.qb, disk.base_addr, disk.rkey, blk)
        local = d.b.register_mr(blk * nblk)
        order = list(range(nblk))
        random.Random(1).shuffle(order)

        t0 = d.clock.now_ns()
        d.ea.reset()
        for i, k in enumerate(order):
            cl.read_block(i, k, (local, k * blk))
        assert d.wait(lambda: len(d.cq[d.b]) == nblk, 20)
        cs = d.cq[d.b]
        assert all(c.opcode == WcOpcode.RDMA_READ and c.status == WcStatus.SUCCESS for c in cs)
        assert local.buf == disk.mr.buf
        first = min(c.complete_ns for c in cs) - t0
        assert first >= lat_ns                       # the device's service time
        el = max(c.complete_ns for c in cs) - min(c.post_ns for c in cs)
        pkts = nblk * blk // 1024                    # responses; + nblk requests
        busy = d.ea.host_cpu.busy_ns / el
        if dpu:
            assert busy == 0
            assert el < lat_ns + pkts * 0.4 * cost_ns
        else:
            assert d.ea.host_cpu.busy_ns == pytest.approx((pkts + nblk) * cost_ns, rel=0.01)
            assert el >= (pkts + nblk) * cost_ns      # one core does it all
            assert busy >= 0.8
        print(f"\n{'DPU' if dpu else 'plain'} target: {nblk} blocks in {el / 1e6:.0f} ms, "
              f"host CPU busy {busy:.3f}")
    finally:
        d.close()
