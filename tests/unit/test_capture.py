"""Captures as users read them: a run's per-port pcaps in fabric time, and one
pcapng of the whole run with interface names (Scapy's readers check both)."""
from __future__ import annotations

from scapy.layers.l2 import Ether
from scapy.utils import PcapNgReader, rdpcap

from emulator.clock import ManualClock
from emulator.dataplane.pcap import PcapWriter
from emulator.experiment.capture import read_pcap, write_captures
from emulator.rundir import RunDir

MS = 1_000_000


def _run_pcaps(run):
    """Two ports' pcaps as the switch writes them, frames 10 and 20 ms (wall)
    after t0 on eth1 and 5 ms on eth2; t0 is the clock's Unix time now."""
    clock = ManualClock(1_000)
    t0 = clock.unix_ns()
    a, b = PcapWriter(run / "s1-eth1.pcap", clock), PcapWriter(run / "s1-eth2.pcap", clock)
    frame = lambda i: bytes(Ether(dst="02:00:00:00:00:02") / (bytes([i]) * 100))  # noqa: E731
    a.write(clock.now_ns() + 10 * MS, frame(1))
    b.write(clock.now_ns() + 5 * MS, frame(2))
    a.write(clock.now_ns() + 20 * MS, frame(3))
    a.close()
    b.close()
    return t0


def test_ports_in_fabric_time_and_one_capture_with_interface_names(tmp_path):
    rd = RunDir(tmp_path)
    rd.raw.path.mkdir()
    t0 = _run_pcaps(rd.raw.path)
    files = write_captures(rd, t0, dilation=1000.0)
    eth1 = rdpcap(str(files["pcap"] / "s1-eth1.pcap"))
    assert [round(float(p.time) * 1e9) for p in eth1] == [10_000, 20_000]     # wall / D
    merged = list(PcapNgReader(str(files["capture.pcapng"])))
    assert [(round(float(p.time) * 1e9), p.sniffed_on, bytes(p)[14]) for p in merged] == [
        (5_000, "s1-eth2", 2), (10_000, "s1-eth1", 1), (20_000, "s1-eth1", 3)]


def test_wall_time_keeps_the_switch_stamps(tmp_path):
    rd = RunDir(tmp_path / "out")
    rd.raw.path.mkdir(parents=True)
    t0 = _run_pcaps(rd.raw.path)
    files = write_captures(rd, t0, dilation=1000.0, time="wall")
    assert [t for t, _, _ in read_pcap(files["pcap"] / "s1-eth2.pcap")] == [t0 + 5 * MS]
    none = RunDir(tmp_path / "none")
    assert write_captures(none, t0, 1000.0) == {} and not none.path.exists()   # no pcaps


def test_a_file_cut_short_yields_its_whole_records(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _run_pcaps(run)
    data = (run / "s1-eth1.pcap").read_bytes()
    (run / "s1-eth1.pcap").write_bytes(data[:-10])          # the switch was killed mid-write
    assert len(list(read_pcap(run / "s1-eth1.pcap"))) == 1


def test_an_infiniband_run_keeps_its_erf_records_and_their_stamps_follow_fabric_time(tmp_path):
    import shutil
    import struct
    import subprocess

    from emulator.dataplane.pcap import LINKTYPE_ERF, IbPcapWriter
    from emulator.experiment.capture import pcap_linktype
    from emulator.ib.frames import IbFrameTemplate, fc_frame
    rd = RunDir(tmp_path)
    run = rd.raw.path
    run.mkdir()
    clock = ManualClock(1_000)
    t0 = clock.unix_ns()
    w = IbPcapWriter(run / "ibleaf-eth1.pcap", clock)
    tpl = IbFrameTemplate("02:00:00:00:00:01", "02:00:00:00:00:02", 3, 5, 0x11)
    w.write(clock.now_ns() + 10 * MS, bytes(tpl.build(0x0A, 7, b"x" * 64)))   # RDMA WRITE ONLY
    w.write(clock.now_ns() + 20 * MS, fc_frame(bytes(6), 0, 0, 64))
    w.close()
    files = write_captures(rd, t0, dilation=1000.0)
    port = files["pcap"] / "ibleaf-eth1.pcap"
    assert pcap_linktype(port) == LINKTYPE_ERF
    records = list(read_pcap(port))
    assert [t for t, _, _ in records] == [10_000, 20_000]                     # wall / D
    for t, _, data in records:                                              # and the ERF's own
        (erf_ts,) = struct.unpack_from("<Q", data)
        assert (erf_ts >> 32) * 10**9 + ((erf_ts & 0xFFFFFFFF) * 10**9 >> 32) in (t, t - 1)
    if shutil.which("tshark"):
        out = subprocess.run(["tshark", "-r", str(files["capture.pcapng"]), "-T", "fields",
                              "-e", "frame.time_epoch", "-e", "_ws.col.Protocol"],
                             capture_output=True, text=True, timeout=60).stdout.split("\n")
        assert [line.split("\t")[1] for line in out if line] == ["InfiniBand", "InfiniBand Link"]
