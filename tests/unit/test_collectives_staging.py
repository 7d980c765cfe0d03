"""GPUDirect RDMA off in the collective engine: 2 servers x 2 GPUs in one
process, NIC g of server 0 <-> NIC g of server 1 by an AF_UNIX socket pair
(real RoceNics and frames, no root). With staging, every RDMA message waits
for a device-to-host copy before the NIC sends it and a host-to-device copy
after it arrives; the copy engine (here 8x slower than the NIC, plus a
latency) becomes the ring's bottleneck, so busbw falls to the copy engine's
rate while every result stays exact. NVLink messages are never staged.
Wall units throughout (dilation 1), on one manual clock: no Python cost
in the measured times."""
from __future__ import annotations

import pytest

from emulator.agents.gpudirect import StagingCopies
from emulator.clock import ManualClock
from emulator.collectives import bench, report
from emulator.collectives.engine import CollectiveEngine, drive, quiescent
from emulator.collectives.staging import staging_from_config
from emulator.collectives.transport import RdmaConn
from emulator.schema.workload import parse_workload
from emulator.errors import ConfigError
from tests.rail_nics import rail_nic_pairs

S, G = 2, 2
NIC_RATE_BPS = 400_000_000
STAGE_RATE_BPS = 50_000_000           # an eighth of the NIC's
STAGE_LATENCY_NS = 500_000
SLICE_BYTES = 16384
SIZE_BYTES = 256 << 10
COPY_NS = STAGE_LATENCY_NS + SLICE_BYTES * 8e9 / STAGE_RATE_BPS      # 3.1 ms per slice: 5.2 MB/s


def engines_with(staging: bool):
    clock = ManualClock()
    nics, ips = rail_nic_pairs(G, NIC_RATE_BPS, clock)
    cfg = {"gpudirect": False, "staging_rate_bps": STAGE_RATE_BPS,
           "staging_latency_ns": STAGE_LATENCY_NS} if staging else {}
    engines = [CollectiveEngine(server=s, servers=S, nics=[nics[(s, g)] for g in range(G)],
                                rank_ips=ips, nvlink_rate_bps=4 * NIC_RATE_BPS,
                                nvlink_delay_ns=2000, slice_bytes=SLICE_BYTES, slots=4,
                                staging=[staging_from_config(cfg) for _ in range(G)],
                                clock=clock)
               for s in range(S)]
    for e in engines:
        e.connect(bench.connections_for(S, G, [("all_reduce", "ring")]))
    return engines, list(nics.values())


def ring_busbw_GBps(staging: bool):
    engines, nics = engines_with(staging)
    try:
        recs = bench.measure(engines, "all_reduce", "ring", SIZE_BYTES, iters=2, warmup_iters=1)
        drive(engines, [], 5.0, until=lambda: quiescent(engines))
        (row,) = report.collective_rows(recs, 1.0)
        return row, engines
    finally:
        for n in nics:
            n.close()


@pytest.fixture(scope="module")
def on_off():
    return ring_busbw_GBps(False), ring_busbw_GBps(True)


def test_gpudirect_off_makes_the_copy_engine_the_bottleneck(on_off):
    (on, _), (off, _) = on_off
    assert on["wrong"] == 0 and off["wrong"] == 0
    nic_GBps = NIC_RATE_BPS / 8e9
    copy_GBps = SLICE_BYTES / COPY_NS              # one engine, slices back to back
    # on: the NICs carry the ring (95 % of their rate: headers, ACKs, credits)
    assert 0.9 * nic_GBps <= on["busbw_GBps"] <= nic_GBps, on
    # staged: the GPU's D2H (and the peer's H2D) engine carries the ring's hop
    assert off["busbw_GBps"] <= copy_GBps * 1.05, (off, copy_GBps)
    assert off["busbw_GBps"] >= 0.95 * copy_GBps, (off, copy_GBps)   # measured 101.7 %


def test_every_rdma_byte_is_staged_twice_and_nvlink_never(on_off):
    (_, eng_on), (_, eng_off) = on_off
    assert all(cp is None for e in eng_on for cp in e.staging)
    rdma_tx = sum(c.tx_bytes for e in eng_off for conns in e.conns.values()
                  for c in conns.values() if isinstance(c, RdmaConn))
    staged = sum(cp.staged_bytes for e in eng_off for cp in e.staging)
    assert rdma_tx > 0 and staged == 2 * rdma_tx    # D2H at the sender, H2D at the receiver
    for e in eng_off:
        assert not e.timers


def test_staging_config():
    assert staging_from_config({}) is None and staging_from_config({"gpudirect": True}) is None
    cp = staging_from_config({"gpudirect": False, "staging_rate_bps": 8e9,
                              "staging_latency_ns": 100})
    assert isinstance(cp, StagingCopies) and cp.copy_ns(1000) == 1100
    # one engine per direction, in order: the second copy queues behind the first
    assert cp.stage(1000, "tx", 0) == 1100 and cp.stage(1000, "tx", 0) == 2200
    assert cp.stage(1000, "rx", 0) == 1100
    with pytest.raises(KeyError):
        staging_from_config({"gpudirect": False})


def test_workload_gpudirect_points_to_endpoints():
    with pytest.raises(ConfigError) as e:
        parse_workload({"gpudirect": False, "training": {"steps": 1, "size_bytes": 4}}, "exp.yaml")
    assert e.value.field == "workload.gpudirect" and "endpoints" in e.value.reason
