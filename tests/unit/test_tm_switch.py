"""The switch process's config schema, raw logs and pcap files, and its loop
on a manual clock (Unix socket pairs instead of veths: no root needed)."""
from __future__ import annotations

import json
import socket

from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.inet import UDP
from scapy.utils import rdpcap

from emulator.clock import ManualClock
from emulator.dataplane import switch as switch_mod
from emulator.dataplane.pcap import PcapWriter
from emulator.dataplane.pfc import pause_frame
from emulator.dataplane.switch import EmbeddedSwitch, RawLogs, SwitchConfig
from emulator.p4.p4info import P4Info
from emulator.schema.switch import DEFAULT_BUFFER_BYTES
from tests.unit.test_tm_helpers import roce, verdict

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
    clock = ManualClock(5_000_000_000)
    w = PcapWriter(tmp_path / "s1-eth1.pcap", clock)
    t0 = clock.now_ns() + 250
    frames = [roce(200), pause_frame(bytes.fromhex("020000000101"), 3, 0xFFFF), roce(1000, ident=2)]
    for i, f in enumerate(frames):
        w.write(t0 + i * 1500, f)
    w.close()
    pkts = rdpcap(str(tmp_path / "s1-eth1.pcap"))
    assert [bytes(p) for p in pkts] == frames
    assert pkts[0].haslayer(UDP) and pkts[0][UDP].dport == 4791
    assert pkts[1][MACControlClassBasedFlowControl].c3_pause_time == 0xFFFF
    # clock time -> its Unix time, to the nanosecond
    assert [int(p.time * 10**9) for p in pkts] == [clock.unix_epoch_ns + t0 + i * 1500
                                                  for i in range(3)]


class StopAt(ManualClock):
    """A manual clock that stops ``switch`` once time reaches ``stop_ns``, and
    records every deadline the loop waited for."""

    def __init__(self, stop_ns: int):
        super().__init__(0)
        self.stop_ns, self.switch, self.waits = stop_ns, None, []

    def wait_readable(self, fds, deadline_ns):
        self.waits.append(deadline_ns)
        ready = super().wait_readable(fds, deadline_ns)
        if self.now_ns() >= self.stop_ns:
            self.switch.stop()
        return ready


def test_switch_loop_on_a_manual_clock(tmp_path, monkeypatch):
    """The loop wakes exactly when a serialization starts, a frame leaves the
    wire or a sample is due; frames leave at serialization end + delay, and
    queue depths are sampled on the interval (only queues that changed)."""
    ends = {p["ifname"]: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for p in PORTS}
    for mine, _ in ends.values():
        mine.setblocking(False)
    monkeypatch.setattr(switch_mod, "open_port_socket", lambda ifname: ends[ifname][0])
    ports = [{**p, "rate_bps": 1_000_000, "delay_ns": 1_000_000} for p in PORTS]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = _load(tmp_path, ports=ports, stats_path=str(run_dir / "s1.stats.json"),
                sample_interval_ns=10_000_000, pcap=True)
    clock = StopAt(40_000_000)
    sw = clock.switch = EmbeddedSwitch(cfg, P4Info.load(), clock)
    try:
        frames = [roce(1000, ident=i) for i in range(3)]
        for f in frames:                          # 3 frames queued for port 2 at t = 0
            assert sw.tm.enqueue(0, f, verdict(2, 1))
        sw.run()
        stats = sw.stats()
        peer = ends["s1-eth2"][1]
        received = [peer.recv(2048) for _ in frames]
    finally:
        sw.close()
        for pair in ends.values():
            for s in pair:
                s.close()
    ser = (1000 + 24) * 8000                      # 8.192 ms per frame at 1 Mbit/s
    # serialization starts 0, ser, 2 ser; wire releases + 1 ms; samples every 10 ms
    assert clock.waits == [0, ser, ser + 1_000_000, 10_000_000, 2 * ser, 2 * ser + 1_000_000,
                           20_000_000, 3 * ser + 1_000_000, 30_000_000, 40_000_000]
    assert received == frames
    pkts = rdpcap(str(run_dir / "s1-eth2.pcap"))
    assert [int(p.time * 10**9) - clock.unix_epoch_ns for p in pkts] == [
        k * ser + 1_000_000 for k in (1, 2, 3)]
    # depth after each start: 2000, 1000, 0 bytes; sampled at 10 and 20 ms
    assert (run_dir / "s1.qdepth.csv").read_text().splitlines()[1:] == [
        "10000000,2,0,1000", "20000000,2,0,0"]
    (p2,) = [p for p in stats["ports"] if p["port"] == 2]
    assert p2["tx_packets"] == 3 and p2["released_frames"] == 3 and p2["max_lateness_ns"] == 0


class LateWake(StopAt):
    """The loop's first wait returns late, at ``late_ns``, with port 1 readable."""

    def __init__(self, stop_ns: int, late_ns: int):
        super().__init__(stop_ns)
        self.late_ns = late_ns

    def wait_readable(self, fds, deadline_ns):
        if self.late_ns is not None:
            self.set(self.late_ns)
            self.late_ns = None
            return ManualClock.wait_readable(self, fds, self.now_ns())
        return super().wait_readable(fds, deadline_ns)


def test_woken_late_the_ports_catch_up_before_arrivals_are_enqueued(tmp_path, monkeypatch):
    """Three frames queued for port 2 at t = 0; the loop wakes at 2.5 frame
    times with a frame read from port 1. By then all three have started, so
    the arrival finds port 2's queue empty -- not two frames deep, a queue
    the fabric never had (and that ECN and PFC would act on)."""
    ends = {p["ifname"]: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for p in PORTS}
    for mine, _ in ends.values():
        mine.setblocking(False)
    monkeypatch.setattr(switch_mod, "open_port_socket", lambda ifname: ends[ifname][0])
    ports = [{**p, "rate_bps": 1_000_000, "delay_ns": 0} for p in PORTS]
    cfg = _load(tmp_path, ports=ports)
    ser = (1000 + 24) * 8000
    clock = LateWake(3 * ser, late_ns=ser * 5 // 2)
    sw = clock.switch = EmbeddedSwitch(cfg, P4Info.load(), clock)
    seen = []
    enqueue = sw.tm.enqueue

    def spy(now_ns, frame, v):
        seen.append((now_ns, sw.tm.ports[2].depth[0]))
        return enqueue(now_ns, frame, v)

    def route(frame, port_no):
        sw.pipeline.verdict = verdict(2, port_no)
        return 2, frame
    try:
        for i in range(3):
            assert sw.tm.enqueue(0, roce(1000, ident=i), verdict(2, 1))
        sw.tm.enqueue = spy
        sw.pipeline.ingress = route
        ends["s1-eth1"][1].send(roce(1000, ident=9))
        sw.run()
    finally:
        sw.close()
        for pair in ends.values():
            for s in pair:
                s.close()
    assert seen == [(ser * 5 // 2, 0)]


class SnapshotAt(StopAt):
    """A StopAt clock that asks the switch for a snapshot (as SIGUSR1 does)
    at the first wait from ``snap_ns`` on."""

    def __init__(self, stop_ns: int, snap_ns: int):
        super().__init__(stop_ns)
        self.snap_ns = snap_ns

    def wait_readable(self, fds, deadline_ns):
        ready = super().wait_readable(fds, deadline_ns)
        if self.snap_ns is not None and self.now_ns() >= self.snap_ns:
            self.snap_ns = None
            self.switch.request_snapshot()
        return ready


def test_a_snapshot_writes_the_window_so_far_and_starts_a_new_one(tmp_path, monkeypatch):
    """Three frames for port 2 at t = 0; a snapshot asked for as the first
    leaves the wire: it has the two frames started by then and the 3000-byte peak;
    the stats at the end have only the third frame, a peak from the 1000
    bytes still queued at the snapshot, and no lateness counted twice.
    The snapshot records where the raw logs stood: the next window's rows
    begin there."""
    ends = {p["ifname"]: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for p in PORTS}
    for mine, _ in ends.values():
        mine.setblocking(False)
    monkeypatch.setattr(switch_mod, "open_port_socket", lambda ifname: ends[ifname][0])
    ports = [{**p, "rate_bps": 1_000_000, "delay_ns": 1_000_000} for p in PORTS]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    stats_path = run_dir / "s1.stats.json"
    cfg = _load(tmp_path, ports=ports, stats_path=str(stats_path), sample_interval_ns=10_000_000)
    ser = (1000 + 24) * 8000
    clock = SnapshotAt(40_000_000, snap_ns=ser + 1_000_000)
    sw = clock.switch = EmbeddedSwitch(cfg, P4Info.load(), clock)
    try:
        for i in range(3):
            assert sw.tm.enqueue(0, roce(1000, ident=i), verdict(2, 1))
        sw.run()
        snap = json.loads(stats_path.read_text())
        end = sw.stats()
    finally:
        sw.close()
        for pair in ends.values():
            for s in pair:
                s.close()
    (s2,) = [p for p in snap["ports"] if p["port"] == 2]
    (e2,) = [p for p in end["ports"] if p["port"] == 2]
    assert (snap["since_ns"], snap["until_ns"]) == (0, ser + 1_000_000)
    assert (s2["tx_packets"], s2["released_frames"], s2["max_depth_bytes"]) == (2, 1, 3000)
    assert (end["since_ns"], end["until_ns"]) == (ser + 1_000_000, 40_000_000)
    assert (e2["tx_packets"], e2["released_frames"], e2["max_depth_bytes"]) == (1, 2, 1000)
    assert end["rx_frames"] == 0
    qdepth = (run_dir / "s1.qdepth.csv").read_bytes()
    header = len(b"t_ns,port,priority,depth_bytes\n")
    assert snap["raw_log_bytes"]["qdepth"] == header                  # nothing sampled yet
    assert qdepth[header:end["raw_log_bytes"]["qdepth"]].decode().splitlines() == [
        "10000000,2,0,1000", "20000000,2,0,0"]
