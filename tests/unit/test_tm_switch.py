"""The switch process's config schema, raw logs and pcap files (no sockets needed)."""
from __future__ import annotations

import json
import time

from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.inet import UDP
from scapy.utils import rdpcap

from emulator.dataplane.pcap import PcapWriter
from emulator.dataplane.pfc import pause_frame
from emulator.dataplane.switch import DEFAULT_BUFFER_BYTES, RawLogs, SwitchConfig
from tests.unit.test_tm_helpers import roce

PORTS = [{"port_no": 1, "ifname": "s1-eth1", "rate_bps": 10**9, "delay_ns": 1000},
         {"port_no": 2, "ifname": "s1-eth2", "rate_bps": 10**9, "delay_ns": 1000}]


def _load(tmp_path, **extra) -> SwitchConfig:
    path = tmp_path / "sw.json"
    path.write_text(json.dumps({"name": "s1", "device_id": 3, "grpc_port": 1, **extra}))
    return SwitchConfig.load(path)


def test_current_schema(tmp_path):
    cfg = _load(tmp_path, ports=PORTS, stats_path=str(tmp_path / "run" / "s1.stats.json"),
                buffer_bytes=300_000, sample_interval_ns=10_000_000, router_mac="02:00:00:00:01:01",
                pcap=True, seed=9)
    assert cfg.shared_buffer_bytes() == 300_000
    assert cfg.router_mac_bytes() == bytes.fromhex("020000000101")
    assert (cfg.sample_interval_ns, cfg.pcap, cfg.seed) == (10_000_000, True, 9)
    assert cfg.run_dir == tmp_path / "run"


def test_old_schema_per_port_buffers_are_summed_and_defaults_apply(tmp_path):
    old = [{**p, "buffer_bytes": 1_000_000} for p in PORTS]
    cfg = _load(tmp_path, ports=old)
    assert cfg.shared_buffer_bytes() == 2_000_000
    assert (cfg.sample_interval_ns, cfg.pcap, cfg.seed, cfg.run_dir) == (0, False, 0, None)
    assert cfg.router_mac_bytes() == bytes.fromhex("020000fe0003")      # from the device id
    assert _load(tmp_path, ports=PORTS).shared_buffer_bytes() == DEFAULT_BUFFER_BYTES
    # Both given: the switch-wide value wins.
    assert _load(tmp_path, ports=old, buffer_bytes=5).shared_buffer_bytes() == 5


def test_raw_logs_have_the_documented_headers(tmp_path):
    logs = RawLogs(tmp_path, "s1")
    logs.event(123, 1, 3, "pause_tx", 65535)
    logs.qdepth("124,1,3,5000\n")
    logs.close()
    assert (tmp_path / "s1.events.csv").read_text() == "t_ns,port,priority,event,value\n123,1,3,pause_tx,65535\n"
    assert (tmp_path / "s1.qdepth.csv").read_text() == "t_ns,port,priority,depth_bytes\n124,1,3,5000\n"


def test_pcap_is_readable_with_nanosecond_epoch_times(tmp_path):
    w = PcapWriter(tmp_path / "s1-eth1.pcap")
    t0 = time.monotonic_ns()
    frames = [roce(200), pause_frame(bytes.fromhex("020000000101"), 3, 0xFFFF), roce(1000, ident=2)]
    for i, f in enumerate(frames):
        w.write(t0 + i * 1500, f)
    w.close()
    pkts = rdpcap(str(tmp_path / "s1-eth1.pcap"))
    assert [bytes(p) for p in pkts] == frames
    assert pkts[0].haslayer(UDP) and pkts[0][UDP].dport == 4791
    assert pkts[1][MACControlClassBasedFlowControl].c3_pause_time == 0xFFFF
    assert abs(float(pkts[0].time) - time.time()) < 60
    assert round((pkts[2].time - pkts[0].time) * 10**9) == 3000     # ns resolution kept
