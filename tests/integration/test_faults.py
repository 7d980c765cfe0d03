"""Scripted link faults end to end (docs/faults.md) on a small fabric in
virtual time: h1 - leaf1 - spine1 - leaf2 - h2, one RDMA WRITE.

* a down interval, random loss and bit errors: the flow completes by
  retransmission; every frame a fault took is accounted for (the sender's
  tx minus the receiver's rx), none is an emulator loss; the receivers
  dropped the corrupted frames (a switch's FCS check, the NIC's ICRC), and
  the capture holds a RoCE frame whose ICRC fails;
* a rerun is the same run (summary.json but its wall fields, CSVs, pcaps);
* a degrade to half the rate of h1's link lengthens the lone flow's FCT by
  its wire bytes at the full rate, as predicted;
* drops.csv holds every frame the faults took, with its reason, as many
  as summary.json counts;
* a link that never comes back: the flow's QP fails with RETRY_EXC_ERR
  after retry_cnt + 1 ACK timeouts (backed off: 1, 2, 4, 8 x rto) and the
  run ends (its exact times and counts pinned; the faults' one rerun is
  the first run's, which holds every kind of fault)."""
from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest
from scapy.utils import rdpcap

from emulator.experiment.dilation import run_with_dilation
from emulator.experiment.ideal_fct import frame_sizes
from emulator.experiment.model import load_experiment
from emulator.nic.roce import parse_roce, verify_icrc
from tests.reruns import without_wall

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]

SIZE = 262_144
HEAD = f"""\
topology:
  name: tiny
  clos: {{spines: 1, leaves: 2, hosts_per_leaf: 1, host_link: {{rate_gbps: 10, delay_us: 1}},
         fabric_link: {{rate_gbps: 10, delay_us: 1}}}}
  addressing: {{host_prefix: 10.0.0.0/16}}
time: virtual
nic: {{rto_us: 50}}
traffic:
  - {{src: h1, dst: h2, size_bytes: {SIZE}}}
limits: {{wall_s: 60}}
"""
FAULTS = HEAD + """\
name: faults
faults:
  - {kind: link_down, at_us: 50, link: "leaf1:spine1", direction: a_to_b}
  - {kind: link_up, at_us: 70, link: "leaf1:spine1", direction: a_to_b}
  - {kind: random_loss, link: "spine1:leaf2", rate: 0.02, seed: 4}
  - {kind: bit_errors, link: "h2:leaf2", ber: 2.0e-5, seed: 5}
  - {kind: bit_errors, link: "h1:leaf1", ber: 5.0e-6, seed: 6, direction: a_to_b}
"""
# h1's link never carries a frame to leaf1: the one-packet WRITE times out
# retry_cnt + 1 times, and its QP fails
DOWN = HEAD.replace("nic: {rto_us: 50}", "nic: {rto_us: 50, retry_cnt: 3}").replace(
    f"size_bytes: {SIZE}", "size_bytes: 1024") + """\
name: down
faults:
  - {kind: link_down, at_us: 0, link: "h1:leaf1", direction: a_to_b}
"""
DEGRADE = HEAD + """\
name: degrade
faults:
  - {kind: link_degrade, at_us: 0, link: "h1:leaf1", rate_fraction: 0.5, direction: a_to_b}
"""


def _run(tmp_path: Path, text: str, name: str) -> tuple[dict, Path]:
    (tmp_path / name).mkdir()
    path = tmp_path / name / "exp.yaml"
    path.write_text(text)
    out = tmp_path / name / "out"
    return run_with_dilation(load_experiment(path), out, pcap=True, plots=False), out


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*")
            if p.suffix in (".csv", ".pcap", ".pcapng")}


@pytest.fixture(scope="module")
def faulted(tmp_path_factory) -> tuple[dict, Path]:
    return _run(tmp_path_factory.mktemp("faults"), FAULTS, "first")


def _port(s: dict, node: str, peer: str) -> dict:
    return next(p for p in s["ports"] if p["node"] == node and p["peer"] == peer)


def test_the_faults_lose_and_corrupt_frames_and_the_flow_recovers(faulted):
    s, out = faulted
    assert s["complete"] and not s["fell_behind"] and s["link_losses"] == []
    f = s["faults"]
    ends = {e["direction"]: e for e in f["ends"]}
    assert sorted(ends) == ["h1->leaf1", "h2->leaf2", "leaf1->spine1", "leaf2->h2",
                            "leaf2->spine1", "spine1->leaf2"]
    assert all(e["reported"] for e in ends.values())
    down = ends["leaf1->spine1"]
    assert down["dropped_down_frames"] > 0 and down["dropped_loss_frames"] == 0
    assert ends["spine1->leaf2"]["dropped_loss_frames"] > 0
    # every frame a switch sent on a faulted link and its peer switch never
    # counted was taken by a fault, none by the emulation
    for a, b in (("leaf1", "spine1"), ("spine1", "leaf2"), ("leaf2", "spine1")):
        e = ends[f"{a}->{b}"]
        gone = e["dropped_down_frames"] + e["dropped_loss_frames"] + e["corrupted_frames"]
        sent = _port(s, a, b)["tx_packets"] + sum(q["pause_tx"] for q in _port(s, a, b)["priorities"])
        assert sent - _port(s, b, a)["rx_packets"] == gone, (a, b)
    # the receivers dropped what the bit errors hit: a switch port as FCS
    # errors, a NIC by its ICRC check (or its MAC's FCS check, a bit the ICRC
    # does not cover)
    up = {h: ends[f"{h}->{leaf}"]["corrupted_frames"] for h, leaf in (("h1", "leaf1"), ("h2", "leaf2"))}
    assert up["h1"] > 0
    for h, leaf in (("h1", "leaf1"), ("h2", "leaf2")):
        assert _port(s, leaf, h)["rx_fcs_errors"] == up[h]
    assert f["switch_fcs_errors"] == sum(up.values())
    to_nic = ends["leaf2->h2"]["corrupted_frames"]
    h2 = next(n for n in s["nics"] if n["node"] == "h2")
    assert to_nic > 0 and h2["rx_icrc_errors"] + h2["rx_fcs_errors"] == to_nic
    assert h2["rx_icrc_errors"] == f["nic_icrc_errors"] > 0
    assert f["lost_frames"] == sum(e["dropped_down_frames"] + e["dropped_loss_frames"]
                                   for e in ends.values())
    flow = s["flows"][0]
    assert flow["retransmitted_packets"] > 0 and flow["delivered_bytes"] == SIZE
    assert [e["applied_ns"] for e in f["faults"][:2]] == [[50_000], [70_000]]
    # the capture of leaf2's port to h2 holds the corrupted bytes: ICRCs that fail
    frames = [bytes(p) for p in rdpcap(str(out / "pcap" / "leaf2-eth1.pcap"))]
    bad = [fr for fr in frames if parse_roce(fr) is not None and not verify_icrc(fr)]
    assert len(bad) == h2["rx_icrc_errors"]


def test_a_rerun_with_faults_is_the_same_run(faulted, tmp_path):
    s1, out1 = faulted
    s2, out2 = _run(tmp_path, FAULTS, "second")
    assert without_wall({**s2, "source": ""}) == without_wall({**s1, "source": ""})
    f1, f2 = _files(out1), _files(out2)
    assert sorted(f1) == sorted(f2) and any(n.endswith(".pcap") for n in f1)
    for name in f1:
        assert f1[name] == f2[name], name


def test_a_degrade_to_half_the_rate_lengthens_a_lone_flow_as_predicted(tmp_path):
    s, _ = _run(tmp_path, DEGRADE, "degrade")
    (flow,) = s["flows"]
    assert s["complete"] and flow["retransmitted_packets"] == 0
    n, a, b, c = frame_sizes(SIZE, 1024)
    wire_ns = (a + b * (n - 2) + c) * 8e9 / 10e9
    # h1 serializes every frame at half the rate: the last one leaves
    # wire_ns later than alone; the hops after it run at the full rate
    predicted = flow["standalone_fct_ns"] + wire_ns
    assert abs(flow["fct_ns"] - predicted) / predicted < 0.01, (flow["fct_ns"], predicted)
    (end,) = s["faults"]["ends"]
    assert end["direction"] == "h1->leaf1" and end["rate_changes"] == [
        {"at_ns": 0, "rate_fraction": 0.5, "applied_ns": 0}]


def _drop_reasons(out: Path) -> Counter:
    with (out / "drops.csv").open(newline="") as fh:
        return Counter(r["reason"] for r in csv.DictReader(fh))


def test_drops_csv_holds_what_the_faults_took_with_its_reason(faulted):
    s, out = faulted
    f = s["faults"]
    ends = f["ends"]
    assert _drop_reasons(out) == Counter({k: v for k, v in {
        "link_down": sum(e["dropped_down_frames"] for e in ends),
        "random_loss": sum(e["dropped_loss_frames"] for e in ends),
        "fcs_error": f["switch_fcs_errors"] + f["nic_fcs_errors"],
        "icrc_error": f["nic_icrc_errors"]}.items() if v})


def test_a_link_that_stays_down_fails_the_qp_at_the_predicted_time_and_the_run_ends(tmp_path):
    s, out = _run(tmp_path, DOWN, "down")
    (flow,) = s["flows"]
    assert not s["complete"] and not flow["complete"]
    assert flow["failed"] and flow["status"] == "RETRY_EXC_ERR"
    assert (flow["timeouts"], flow["retransmitted_packets"]) == (4, 3)
    # ACK timeouts of 50, 100, 200 and 400 us, each from a (re)sent frame;
    # the timer starts as the frame goes on the wire (a NIC that started it
    # at the frame's last bit would be a frame time later each time)
    _, wire_bytes, _, _ = frame_sizes(1024, 1024)
    frame_ns = wire_bytes * 8 / 10
    assert 750_000 <= flow["failed_ns"] <= 750_000 + 4 * frame_ns, flow["failed_ns"]
    h1 = next(n for n in s["nics"] if n["node"] == "h1")
    assert (h1["qp_errors"], h1["retry_exc_errors"], h1["wr_flush_errors"]) == (1, 1, 0)
    (end,) = s["faults"]["ends"]
    assert end["dropped_down_frames"] == 4 == _drop_reasons(out)["link_down"]
