"""The run-fidelity verdict (``fell_behind``) on synthetic lateness: what
noise does (spikes on a few frames) is not a distortion, a process that
cannot keep up (lateness growing over the run) is; judged in fabric time."""
from __future__ import annotations

from emulator.collectives.report import collective_rows, training_summary
from emulator.experiment.fidelity import (
    LINK_LOSS_RATIO, LOST_LIMIT_FRACTION, NIC_MEAN_LIMIT_FRAMES, SWITCH_P99_LIMIT_FRAMES,
    SWITCH_P99_LIMIT_HOPS, add_collectives_fidelity, add_headroom_drops, add_link_losses,
    add_socket_drops, headroom_drops, hop_ns, link_losses, nic_verdict, percentile_ns, run_fidelity,
    socket_drops, switch_verdict,
)
from emulator.link import Wire
from tests.summaries import run_summary
from tests.unit.test_results import make_experiment

MS = 1_000_000                       # wall ns
HOP_FABRIC_NS = 1090                 # clos-2x2: 1102-byte frame (+24) at 100 Gbps + 1 us
FRAME_FABRIC_NS = 90                 # ... of which serialization


def port_stats(lateness_wall_ns: list[int], port: int = 1) -> dict:
    """A port's stats.json entry, from a Wire that released frames this late."""
    w = Wire(0)
    t = 0
    for late in lateness_wall_ns:
        t += 1_000_000                # a frame due every ms (wall)
        w.put(t, b"x")
        w.release(t + late, lambda f: None)
    return {"port": port, **w.lateness_stats()}


def noise(frames: int = 5000, every: int = 250, spike_ns: int = 20 * MS) -> list[int]:
    """Loop latency of ~80 us, and a scheduler hiccup of 20 ms on one frame in
    ``every`` (0.4 %): what a busy 2-core machine does to a keeping-up switch."""
    return [spike_ns if i % every == 0 else 80_000 for i in range(frames)]


def growing(frames: int = 5000, end_ns: int = 50 * MS) -> list[int]:
    """A switch that cannot keep up: each frame later than the one before."""
    return [end_ns * i // frames for i in range(frames)]


def test_hop_time_is_mtu_serialization_plus_link_delay():
    exp = make_experiment()                 # clos-2x2: 100 Gbps, 1 us; MTU 1024
    assert hop_ns(exp, "leaf1") == (90, HOP_FABRIC_NS)
    assert hop_ns(exp, "h1") == (90, HOP_FABRIC_NS)


def test_noise_spikes_are_not_behind_even_when_each_spike_is_many_hops():
    d = 3000
    v = switch_verdict({"ports": [port_stats(noise())]}, d, HOP_FABRIC_NS, FRAME_FABRIC_NS)
    assert v["max_lateness_fabric_ns"] == round(20 * MS / d)   # 6.7 us: six hops, on 0.4 %
    assert v["p99_lateness_fabric_ns"] < HOP_FABRIC_NS / 10
    assert v["late_fraction"] == 0.004 and not v["behind"] and v["ratio"] < 0.1


def test_growing_lateness_is_behind():
    d = 3000
    v = switch_verdict({"ports": [port_stats(growing())]}, d, HOP_FABRIC_NS, FRAME_FABRIC_NS)
    # p99: 49.5 ms wall = 16.5 us fabric, ~15 hops
    assert v["p99_lateness_fabric_ns"] >= 49 * MS // d
    assert v["behind"] and v["ratio"] > 5
    assert v["late_fraction"] > 0.9


def test_the_same_wall_lateness_is_harmless_at_a_higher_dilation():
    """Lateness is judged in fabric time: 50 ms wall at D = 200000 is 250 ns."""
    v = switch_verdict({"ports": [port_stats(growing())]}, 200_000, HOP_FABRIC_NS, FRAME_FABRIC_NS)
    assert not v["behind"] and v["p99_lateness_fabric_ns"] <= 250 * 9 // 8


def test_limit_is_p99_against_six_frames_or_two_hops_whichever_is_smaller():
    """Just under and just over the limit: 2 % of the frames late by a bit less
    or more than it. With clos-2x2's 1 us links six frames (540 ns) is the
    smaller; on a link without delay two hops (two frames) is."""
    d = 1000
    for hop, frame, limit in ((HOP_FABRIC_NS, FRAME_FABRIC_NS, SWITCH_P99_LIMIT_FRAMES * 90),
                              (90, 90, SWITCH_P99_LIMIT_HOPS * 90)):
        for share, behind in ((0.9, False), (1.2, True)):
            lat = [10_000] * 980 + [int(share * limit * d)] * 20
            v = switch_verdict({"ports": [port_stats(lat)]}, d, hop, frame)
            assert v["behind"] is behind, (hop, share, v)
            assert v["limit_fabric_ns"] == limit
    assert (SWITCH_P99_LIMIT_FRAMES, SWITCH_P99_LIMIT_HOPS) == (6, 2)


def test_ports_are_merged_per_switch():
    d = 3000
    st = {"ports": [port_stats(noise(), 1), port_stats(growing(), 2)]}
    v = switch_verdict(st, d, HOP_FABRIC_NS, FRAME_FABRIC_NS)
    assert v["released_frames"] == 10_000 and v["behind"]


def test_percentile_is_the_top_of_its_bucket():
    hist = [[10, 10, 98], [1000, 1124, 1], [2000, 2249, 1]]
    assert percentile_ns(hist, 0.5) == 10
    assert percentile_ns(hist, 0.99) == 1124
    assert percentile_ns(hist, 1.0) == 2249
    assert percentile_ns([], 0.99) is None


def test_a_switch_of_few_frames_is_not_behind_on_its_one_worst_frame():
    # 68 frames (a super-spine of pods-incast), one of them 1 ms late: its p99
    # by rank would be that frame; two late frames are 3 % and count
    d = 3000
    late = FRAME_FABRIC_NS * 20 * d
    one = {"ports": [{"lateness_hist": [[100, 100, 67], [late, late, 1]], "max_lateness_ns": late}]}
    two = {"ports": [{"lateness_hist": [[100, 100, 66], [late, late, 2]], "max_lateness_ns": late}]}
    assert not switch_verdict(one, d, HOP_FABRIC_NS, FRAME_FABRIC_NS)["behind"]
    assert switch_verdict(two, d, HOP_FABRIC_NS, FRAME_FABRIC_NS)["behind"]
    hist = [[10, 10, 99], [2000, 2249, 1]]              # 100 frames: p99 is the 99th, spared or not
    assert percentile_ns(hist, 0.99, spare=1) == percentile_ns(hist, 0.99) == 10
    assert percentile_ns([[10, 10, 1]], 0.99, spare=1) == 10


def test_nic_mean_lag_against_mtu_frame_time():
    frame_fabric_ns, d = 90, 3000
    quiet = {"tx_packets": 1100, "tx_lag_frames": 1000, "tx_lag_sum_ns": 1000 * 54_000,
             "tx_lag_max_ns": 1_077_000}
    busy = {"tx_packets": 1100, "tx_lag_frames": 1000, "tx_lag_sum_ns": 1000 * 90_000,
            "tx_lag_max_ns": 1_077_000}
    q, b = nic_verdict(quiet, d, frame_fabric_ns), nic_verdict(busy, d, frame_fabric_ns)
    assert q["mean_lateness_fabric_ns"] == 18 and not q["behind"]          # 0.2 frame
    assert b["mean_lateness_fabric_ns"] == 30 and b["behind"]              # 0.33 frame
    assert q["max_lateness_fabric_ns"] == 359                              # its catch-up cap
    assert b["ratio"] == round(30 / (NIC_MEAN_LIMIT_FRAMES * frame_fabric_ns), 4)
    assert nic_verdict({}, d, frame_fabric_ns)["behind"] is False          # sent nothing
    # a receiver: 30 ACKs, one of them 20 ms late, and no data frame -- no mean to judge
    acks = {"tx_packets": 30, "tx_lag_frames": 0, "tx_lag_sum_ns": 0}
    assert nic_verdict(acks, d, frame_fabric_ns)["ratio"] == 0


def test_run_verdict_names_who_was_behind():
    exp = make_experiment()                                                # D = 1000
    stats = {"leaf1": {"ports": [port_stats(noise())]},
             "leaf2": {"ports": [port_stats(growing())]},
             "spine1": {}}                                   # BMv2-like: nothing measured
    nics = {"h1": {"tx_packets": 10, "tx_lag_sum_ns": 10 * 20_000}}
    v = run_fidelity(exp, stats, nics)
    assert v["fell_behind"] and v["behind"] == ["leaf2"]
    assert v["switches"]["spine1"]["ratio"] is None and not v["switches"]["spine1"]["behind"]
    assert v["worst_ratio"] == v["switches"]["leaf2"]["ratio"]
    assert set(v["nics"]) == {"h1"} and not v["nics"]["h1"]["behind"]
    calm = run_fidelity(exp, {"leaf1": {"ports": [port_stats(noise(spike_ns=2 * MS))]}}, nics)
    assert not calm["fell_behind"] and calm["behind"] == [] and calm["worst_ratio"] < 1


def _record(rank, lost_ns, span_ns=10 * MS, size=65536):
    return {"rank": rank, "collective": "all_reduce", "algorithm": "ring", "size_bytes": size,
            "nranks": 2, "iters": 10, "start_ns": 0, "end_ns": span_ns, "wrong": 0,
            "lost_ns": lost_ns}


def test_a_collective_row_is_as_distorted_as_its_worst_rank_lost():
    rows = collective_rows([_record(0, 0), _record(1, 400_000)], 1000.0)
    assert rows[0]["lost_fraction"] == 0.04              # 0.4 ms of a 10 ms loop
    steps = [{"step": i, "start_ns": i * MS, "collective_start_ns": i * MS, "end_ns": (i + 1) * MS}
             for i in range(4)]
    tr = training_summary([{"rank": 0, "collective": "all_reduce", "algorithm": "ring",
                            "nranks": 1, "size_bytes": 4, "compute_ns": 0, "steps": steps,
                            "wrong": 0, "lost_ns": 1 * MS}], 1000.0)
    assert tr["lost_fraction"] == 0.25                   # 1 ms of the 4 ms loop


def _summary(worst_ratio=0.3, behind=()):
    return run_summary(fidelity={"worst_ratio": worst_ratio, "behind": list(behind)})


def test_a_collective_that_lost_more_than_the_limit_makes_the_run_behind():
    ok, bad = _summary(), _summary()
    below = LOST_LIMIT_FRACTION * 0.9 * 10 * MS
    above = LOST_LIMIT_FRACTION * 1.2 * 10 * MS
    add_collectives_fidelity(ok, {"results": collective_rows([_record(0, below), _record(1, 0)],
                                                             1.0), "training": None})
    assert not ok.fell_behind and ok.fidelity.worst_ratio == 0.9
    assert ok.fidelity.lost_limit_fraction == LOST_LIMIT_FRACTION
    add_collectives_fidelity(bad, {"results": collective_rows(
        [_record(0, 0, size=4096), _record(1, 0, size=4096), _record(0, above), _record(1, 0)],
        1.0), "training": None})
    assert bad.fell_behind and bad.fidelity.worst_ratio == 1.2
    assert bad.fidelity.behind == ["collectives: all_reduce 65536 B"]


def _port(node, port, peer, tx, rx, pause_tx=0):
    return {"node": node, "port": port, "peer": peer, "tx_packets": tx, "rx_packets": rx,
            "priorities": [{"priority": 3, "pause_tx": pause_tx}]}


def test_frames_a_switch_never_read_are_link_losses_and_put_the_run_behind():
    # h1 -> leaf1 lost 100 of 5000 (BMv2's capture overflowing); leaf1 ->
    # spine1: 900 frames + 100 pauses sent, 1000 read; spine1 -> leaf1 lost 2
    # (under the tolerance: counters read while a frame or two is unread)
    ports = [_port("leaf1", 1, "h1", 4000, 4900), _port("leaf1", 2, "spine1", 900, 998, 100),
             _port("spine1", 1, "leaf1", 1000, 1000)]
    nics = {"h1": {"tx_packets": 5000}}
    losses = link_losses(ports, nics)
    assert losses == [{"from": "h1", "to": "leaf1", "port": 1, "sent": 5000, "received": 4900,
                       "lost": 100}]
    summary = _summary(0.2)
    add_link_losses(summary, losses)
    assert summary.fell_behind and summary.fidelity.worst_ratio == LINK_LOSS_RATIO
    assert summary.fidelity.behind == ["link h1->leaf1"]
    clean = _summary(0.2)
    add_link_losses(clean, link_losses(ports[1:], nics))
    assert not clean.fell_behind and clean.link_losses == []


def test_a_paused_lossless_class_dropped_beyond_its_headroom_puts_the_run_behind():
    ports = [{"node": "leaf1", "port": 2, "priorities": [{"priority": 3, "headroom_drops": 6},
                                                          {"priority": 6, "headroom_drops": 0}]},
             {"node": "leaf2", "port": 1, "priorities": [{"priority": 3, "headroom_drops": None}]}]
    drops = headroom_drops(ports)
    assert drops == [{"node": "leaf1", "port": 2, "priority": 3, "headroom_drops": 6}]
    summary = _summary(0.2)
    add_headroom_drops(summary, drops)
    assert summary.fell_behind and summary.fidelity.behind == ["headroom leaf1:2"]
    clean = _summary(0.2)
    add_headroom_drops(clean, headroom_drops(ports[1:]))
    assert not clean.fell_behind


def test_frames_the_kernel_dropped_at_a_socket_put_the_run_behind():
    """Not a tolerance: every frame a switch port's or a NIC's socket dropped
    unread is one the emulation lost, named by node and port (a NIC: its
    host's single port, 0); BMv2's ports (null: not counted) and clean ones
    are not."""
    ports = [{"node": "leaf1", "port": 1, "rx_socket_drops": 4224},
             {"node": "leaf1", "port": 2, "rx_socket_drops": 0},
             {"node": "spine1", "port": 1, "rx_socket_drops": None},
             {"node": "spine1", "port": 2, "rx_socket_drops": 1}]
    nics = {"h2": {"rx_socket_drops": 3}, "h1": {"rx_socket_drops": 0}, "h3": {}}
    drops = socket_drops(ports, nics)
    assert drops == [{"node": "leaf1", "port": 1, "rx_socket_drops": 4224},
                     {"node": "spine1", "port": 2, "rx_socket_drops": 1},
                     {"node": "h2", "port": 0, "rx_socket_drops": 3}]
    summary = _summary(0.2, ["leaf2"])
    add_socket_drops(summary, drops)
    assert summary.fell_behind and summary.fidelity.worst_ratio == LINK_LOSS_RATIO
    assert summary.fidelity.behind == ["leaf2", "socket h2:0", "socket leaf1:1",
                                       "socket spine1:2"]
    assert summary.socket_drops == drops
    clean = _summary(0.2)
    add_socket_drops(clean, socket_drops(ports[1:3], {"h1": nics["h1"]}))
    assert not clean.fell_behind and clean.socket_drops == []
    assert clean.fidelity == _summary(0.2).fidelity
    assert nic_verdict(nics["h2"], 1000.0, FRAME_FABRIC_NS)["rx_socket_drops"] == 3
