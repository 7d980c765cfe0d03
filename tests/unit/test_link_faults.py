"""Scripted link faults (``emulator.link_faults``): the per-frame judgement,
a switch port's faults on its loop on a manual clock (Unix socket pairs
instead of veths), and a NIC pair recovering what its link lost."""
from __future__ import annotations

import json
import socket

import pytest
from scapy.utils import rdpcap

from emulator.dataplane import switch as switch_mod
from emulator.dataplane.pfc import pause_frame
from emulator.dataplane.switch import EmbeddedSwitch, SwitchConfig
from emulator.experiment.faults import compile_faults
from emulator.link_faults import MAC_CONTROL, LinkFaults
from emulator.p4.p4info import P4Info
from emulator.schema.experiment import ExperimentSpec
from emulator.clock import NEVER_NS
from emulator.schema.faults import EndFaults
from emulator.topo import fabric_from_dict
from tests.unit.test_tm_helpers import roce, verdict
from tests.unit.test_tm_switch import PORTS, StopAt

from .test_nic_core import pairs  # noqa: F401 (a fixture)
from .test_nic_timeouts import done, write

DSCP_PRIO = [0] * 64
DSCP_PRIO[26] = 3


def end(**kw) -> EndFaults:
    return EndFaults(sender="s1", receiver="s2", dscp_priority=DSCP_PRIO, **kw)


def bits_differing(a: bytes, b: bytes) -> int:
    assert len(a) == len(b)
    return sum(bin(x ^ y).count("1") for x, y in zip(a, b))


# -- the judgement -------------------------------------------------------------------------------
def test_a_down_interval_drops_exactly_the_frames_that_end_in_it_and_counts_them_per_class():
    f = LinkFaults(end(down=[{"from_ns": 10_000, "until_ns": 20_000}]))
    told = []
    f.on_drop = lambda *drop: told.append(drop)
    data, pfc = roce(500), pause_frame(bytes(6), 3, 0xFFFF)
    out = [f.judge(data, t)[0] is not None for t in (9_999, 10_000, 15_000, 19_999, 20_000)]
    assert out == [True, False, False, False, True]
    assert f.judge(pfc, 12_000) == (None, False)             # PFC frames too
    assert f.stats()["dropped_down"] == {"3": 3, "pfc": 1}      # roce(): DSCP 26, the RoCE class
    assert f.lost_frames() == 4
    # each one told to the drop table: when its serialization ended, class, bytes, reason
    assert told == [(t, 3, len(data), "link_down") for t in (10_000, 15_000, 19_999)] + [
        (12_000, MAC_CONTROL, len(pfc), "link_down")]


def test_a_frame_is_counted_in_the_priority_of_its_dscp():
    frame = bytearray(roce(300))
    frame[15] = 10 << 2                                      # DSCP 10: no class of its own -> 0
    f = LinkFaults(end(down=[{"from_ns": 0, "until_ns": NEVER_NS}]))
    assert f.judge(bytes(frame), 5)[0] is None
    assert f.judge(roce(300), 5)[0] is None
    assert f.stats()["dropped_down"] == {"0": 1, "3": 1}


def test_random_loss_is_seeded_by_seed_and_direction_and_keeps_to_its_priority():
    frames = [roce(200, ident=i) for i in range(4000)]
    cfg = {"from_ns": 0, "until_ns": NEVER_NS, "rate": 0.1, "seed": 7}

    def lost(c: EndFaults) -> list[int]:
        f = LinkFaults(c)
        return [i for i, fr in enumerate(frames) if f.judge(fr, i)[0] is None]

    first = lost(end(loss=[cfg]))
    assert first == lost(end(loss=[cfg]))                     # the same file: the same frames
    assert first != lost(end(loss=[{**cfg, "seed": 8}]))
    assert first != lost(EndFaults(sender="s2", receiver="s1", loss=[cfg]))
    assert 320 < len(first) < 480                            # 400 expected: 5 sigma either way
    assert lost(end(loss=[{**cfg, "priority": 5}])) == []    # these frames are priority 3
    assert lost(end(loss=[{**cfg, "priority": 3}])) == first
    windowed = lost(end(loss=[{**cfg, "from_ns": 1000, "until_ns": 2000}]))
    assert windowed and all(1000 <= i < 2000 for i in windowed)


def test_a_bit_error_flips_exactly_one_bit_with_the_probability_of_the_frames_length():
    f = LinkFaults(end(bit_errors=[{"from_ns": 0, "until_ns": NEVER_NS, "ber": 1e-4, "seed": 1}]))
    frame = roce(1000)
    n = 2000
    hit = 0
    for i in range(n):
        out, bad = f.judge(frame, i)
        assert bits_differing(out, frame) == (1 if bad else 0)
        hit += bad
    p = 1 - (1 - 1e-4) ** (8 * len(frame))                  # ~0.56
    assert abs(hit / n - p) < 5 * (p * (1 - p) / n) ** 0.5
    assert f.stats()["corrupted"] == {"3": hit}
    assert f.lost_frames() == hit                           # the receiver's MAC drops them


def test_rate_changes_fall_due_in_order_and_are_recorded_when_applied():
    f = LinkFaults(end(rates=[{"at_ns": 100, "rate_fraction": 0.5}, {"at_ns": 300, "rate_fraction": 1.0}]))
    assert f.next_rate_change_ns() == 100
    assert f.rate_changes_due(99) is None
    assert f.rate_changes_due(100) == 0.5 and f.next_rate_change_ns() == 300
    assert f.rate_changes_due(350) == 1.0 and f.next_rate_change_ns() == NEVER_NS
    assert f.stats()["rate_changes"] == [{"at_ns": 100, "rate_fraction": 0.5, "applied_ns": 100},
                                        {"at_ns": 300, "rate_fraction": 1.0, "applied_ns": 350}]


# -- compiled from an experiment -------------------------------------------------------------------
TOPO = {"name": "t", "clos": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1,
                              "host_link": {"rate_gbps": 10, "delay_us": 1},
                              "fabric_link": {"rate_gbps": 10, "delay_us": 1}},
        "addressing": {"host_prefix": "10.0.0.0/16"}}


def test_faults_compile_into_each_directions_intervals_and_rate_changes():
    spec = ExperimentSpec.model_validate({
        "name": "f", "topology": TOPO, "traffic": [{"src": "h1", "dst": "h2", "size_bytes": 1000}],
        "faults": [{"kind": "link_flap", "link": "h1:leaf1", "at_us": 10, "period_us": 4, "count": 2},
                   {"kind": "link_down", "link": "leaf1:spine1", "at_us": 50, "direction": "b_to_a"},
                   {"kind": "link_degrade", "link": "leaf1:h1", "at_us": 5, "rate_fraction": 0.25,
                    "until_us": 7, "direction": "a_to_b"}]})
    ends = compile_faults(spec, fabric_from_dict(TOPO), "f.yaml")
    assert sorted(ends) == [("h1", "leaf1"), ("leaf1", "h1"), ("spine1", "leaf1")]
    flap = [(d.from_ns, d.until_ns) for d in ends[("h1", "leaf1")].down]
    assert flap == [(10_000, 12_000), (14_000, 16_000)]
    assert [(d.from_ns, d.until_ns) for d in ends[("spine1", "leaf1")].down] == [(50_000, NEVER_NS)]
    assert [(r.at_ns, r.rate_fraction) for r in ends[("leaf1", "h1")].rates] == [(5000, 0.25),
                                                                                 (7000, 1.0)]
    assert ends[("h1", "leaf1")].rates == []


# -- a switch port on its loop ---------------------------------------------------------------------
T0_NS = 1_000_000_000                  # tests.nic_sim's manual clock starts there
SER_NS = (1000 + 24) * 8000                   # a 1000-byte frame at 1 Mbit/s: 8.192 ms
DELAY_NS = 1_000_000


def run_port(tmp_path, monkeypatch, faults: dict, n_frames: int, stop_ns: int):
    """Port 2 of a switch on a manual clock, with ``faults``, sending
    ``n_frames`` queued at 0; (frames received by its peer, pcap times, stats)."""
    ends = {p["ifname"]: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for p in PORTS}
    for mine, _ in ends.values():
        mine.setblocking(False)
    monkeypatch.setattr(switch_mod, "open_port_socket", lambda ifname: ends[ifname][0])
    ports = [{**p, "rate_bps": 1_000_000, "delay_ns": DELAY_NS} for p in PORTS]
    ports[1]["faults"] = {"sender": "s1", "receiver": "s2", **faults}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = tmp_path / "sw.json"
    path.write_text(json.dumps({"name": "s1", "device_id": 3, "grpc_port": 1, "ports": ports,
                                "stats_path": str(run_dir / "s1.stats.json"), "pcap": True}))
    clock = StopAt(stop_ns)
    sw = clock.switch = EmbeddedSwitch(SwitchConfig.load(path), P4Info.load(), clock)
    frames = [roce(1000, ident=i) for i in range(n_frames)]
    try:
        for f in frames:
            assert sw.tm.enqueue(0, f, verdict(2, 1))
        sw.run()
        stats = sw.stats()
        peer = ends["s1-eth2"][1]
        peer.setblocking(False)
        got = []
        while True:
            try:
                got.append(peer.recv(2048))
            except BlockingIOError:
                break
    finally:
        sw.close()
        for pair in ends.values():
            for s in pair:
                s.close()
    times = [int(p.time * 10**9) - clock.unix_epoch_ns for p in rdpcap(str(run_dir / "s1-eth2.pcap"))]
    (p2,) = [p for p in stats["ports"] if p["port"] == 2]
    return frames, got, times, p2


def test_a_switch_port_loses_the_frames_whose_serialization_ends_while_down(tmp_path, monkeypatch):
    # frame k ends serializing at (k+1) x SER: down over [2 SER, 4 SER) takes frames 1 and 2
    frames, got, times, p2 = run_port(
        tmp_path, monkeypatch, {"down": [{"from_ns": 2 * SER_NS, "until_ns": 4 * SER_NS}]},
        6, 7 * SER_NS)
    assert got == [frames[0], frames[3], frames[4], frames[5]]
    assert times == [k * SER_NS + DELAY_NS for k in (1, 4, 5, 6)]   # the survivors keep their times
    assert p2["tx_packets"] == 6                           # sent by the port, lost on the link
    assert p2["faults"]["dropped_down"] == {"0": 2}        # no DSCP map given: all priority 0
    # and in the switch's raw events, drops.csv's source, with their reason
    rows = [line.split(",") for line in (tmp_path / "run" / "s1.events.csv").read_text().split()]
    assert [r for r in rows if r[3].startswith("drop")] == [
        [str(k * SER_NS), "2", "0", "drop_link_down", str(len(frames[0]))] for k in (2, 3)]


def test_a_degrade_slows_the_ports_serializer_from_its_exact_time(tmp_path, monkeypatch):
    # half the rate from SER (frame 1's start) until 5 SER (frame 2 ends there)
    frames, got, times, p2 = run_port(
        tmp_path, monkeypatch, {"rates": [{"at_ns": SER_NS, "rate_fraction": 0.5},
                                          {"at_ns": 5 * SER_NS, "rate_fraction": 1.0}]},
        4, 8 * SER_NS)
    assert got == frames
    assert times == [t + DELAY_NS for t in (SER_NS, 3 * SER_NS, 5 * SER_NS, 6 * SER_NS)]
    assert [c["applied_ns"] for c in p2["faults"]["rate_changes"]] == [SER_NS, 5 * SER_NS]


def test_a_switch_port_sends_a_corrupted_frame_as_its_bytes_on_the_wire(tmp_path, monkeypatch):
    frames, got, times, p2 = run_port(
        tmp_path, monkeypatch,
        {"bit_errors": [{"from_ns": 0, "until_ns": NEVER_NS, "ber": 1.0, "seed": 3}]}, 2, 3 * SER_NS)
    assert [bits_differing(g, f) for g, f in zip(got, frames)] == [1, 1]
    assert p2["faults"]["corrupted"] == {"0": 2}
    pcap = [bytes(p) for p in rdpcap(str(tmp_path / "run" / "s1-eth2.pcap"))]
    assert pcap == got                                     # the capture holds what went out


# -- a NIC's link -------------------------------------------------------------------------------
@pytest.mark.parametrize("fault", [
    {"down": [{"from_ns": T0_NS + 20_000, "until_ns": T0_NS + 60_000}]},
    {"loss": [{"from_ns": 0, "until_ns": NEVER_NS, "rate": 0.05, "seed": 2}]},
    {"bit_errors": [{"from_ns": 0, "until_ns": NEVER_NS, "ber": 2e-6, "seed": 2}]},
])
def test_a_nic_recovers_what_its_link_lost_or_corrupted(pairs, fault):
    """Both NICs send through the faults; the WRITE completes intact by
    go-back-N (NAKs, timeouts), and the receiver's ICRC check dropped the
    corrupted frames it saw."""
    ef = {"sender": "a", "receiver": "b", "dscp_priority": DSCP_PRIO, **fault}
    p = pairs(rate_bps=10_000_000_000, rto_ns=100_000, link_faults=ef)
    told = []                                              # the NICs' drop logs (drops.csv's rows)
    p.a.drop_log = lambda t_ns, c, reason, nbytes: told.append(("a", reason))
    p.b.drop_log = lambda t_ns, c, reason, nbytes: told.append(("b", reason))
    src, dst = write(p, 200)
    assert done(p)
    assert bytes(dst.buf) == bytes(src.buf)
    ours = p.a.stats.link_faults.stats()
    lost = sum(ours["dropped_down"].values()) + sum(ours["dropped_loss"].values())
    corrupted = sum(ours["corrupted"].values())
    assert p.qa.retransmits > 0
    if "bit_errors" in fault:
        # (these bits all fell under the ICRC's cover: without virtual time's
        # bad-FCS trailer, one in the Ethernet header would go unnoticed)
        assert lost == 0 and corrupted > 0 and p.b.stats.rx_icrc_errors == corrupted
        assert told.count(("b", "icrc_error")) == corrupted
    else:
        assert lost > 0 and corrupted == 0
        reason = "link_down" if "down" in fault else "random_loss"
        assert told.count(("a", reason)) == lost
    assert "link_faults" in p.a.stats.as_dict() and "rx_fcs_errors" in p.a.stats.as_dict()


# -- results ---------------------------------------------------------------------------------------
def test_frames_a_fault_took_are_the_experiments_losses_not_the_emulations():
    from emulator.experiment.fidelity import link_losses
    ports = [{"node": "leaf1", "peer": "h1", "port": 1, "rx_packets": 900, "tx_packets": 0,
              "priorities": []}]
    nics = {"h1": {"tx_packets": 1000}}
    assert [x["lost"] for x in link_losses(ports, nics)] == [100]
    assert link_losses(ports, nics, {("h1", "leaf1"): 100}) == []
    assert [x["lost"] for x in link_losses(ports, nics, {("h1", "leaf1"): 50})] == [50]
