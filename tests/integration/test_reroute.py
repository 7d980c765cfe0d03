"""The controller's reroute end to end (docs/faults.md, "The controller's
reroute") in virtual time on clos-2x2: leaf1-spine1 goes down under an
all-to-all; both ends report it a link delay later, the controller's writes
take effect ``controller.reaction_us`` after that on leaf1, leaf2 and
spine1, the flows complete over spine2. A reroute's rerun is the same run:
the race of two links' reports within a window, rerun packed otherwise
(the family's one rerun; the other runs' fabric times are pinned exactly)."""
from __future__ import annotations

from pathlib import Path

import pytest

from emulator.experiment.dilation import run_with_dilation
from emulator.experiment.model import load_experiment
from tests.conftest import REPO
from tests.reruns import without_wall

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]

REACTION_US = 100
DOWN_AT_US = 20
EXP = f"""\
name: reroute
topology: {REPO / "topologies" / "clos-2x2.yaml"}
time: virtual
nic: {{rto_us: 100}}
controller: {{reaction_us: {REACTION_US}}}
traffic:
  - {{pattern: all-to-all, op: write, size_bytes: 262144}}
faults:
  - {{kind: link_down, at_us: {DOWN_AT_US}, link: "leaf1:spine1"}}
limits: {{wall_s: 60}}
"""


def _run(tmp_path: Path, name: str) -> tuple[dict, Path]:
    (tmp_path / name).mkdir()
    path = tmp_path / name / "exp.yaml"
    path.write_text(EXP)
    out = tmp_path / name / "out"
    return run_with_dilation(load_experiment(path), out, plots=False), out


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.suffix == ".csv"}


@pytest.fixture(scope="module")
def rerouted(tmp_path_factory) -> tuple[dict, Path]:
    return _run(tmp_path_factory.mktemp("reroute"), "first")


def test_a_link_down_is_rerouted_at_detection_plus_reaction_and_the_flows_complete(rerouted):
    s, _ = rerouted
    assert s["complete"] and not s["fell_behind"] and s["link_losses"] == []
    f = s["faults"]
    detected = (DOWN_AT_US + 1) * 1000          # the link's 1 us delay later
    assert f["reaction_ns"] == REACTION_US * 1000
    assert [(r["switch"], r["peer"], r["oper_status"], r["detected_ns"]) for r in f["port_reports"]] \
        == [("leaf1", "spine1", "DOWN", detected), ("spine1", "leaf1", "DOWN", detected)]
    (rr,) = f["reroutes"]
    assert rr["detected_ns"] == detected and rr["converged_ns"] == detected + REACTION_US * 1000
    assert rr["programmed"] == ["leaf1", "leaf2", "spine1"] and rr["links_down"] == [["leaf1", "spine1"]]
    (entry,) = f["faults"]
    (t,) = entry["reroute"]
    assert (t["at_ns"], t["detected_ns"], t["converged_ns"]) == (DOWN_AT_US * 1000, detected,
                                                                 detected + REACTION_US * 1000)
    ends = {e["direction"]: e for e in f["ends"]}
    assert t["lost_frames"] == sum(ends[d]["dropped_down_frames"]
                                   for d in ("leaf1->spine1", "spine1->leaf1")) > 0
    assert f["blackholed_frames"] == 0      # spine1 reaches leaf1 through leaf2 and spine2


SPINE_DOWN = REPO / "experiments" / "spine-down-incast.yaml"


@pytest.fixture(scope="module")
def spine_down(tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("spine-down") / "out"
    return run_with_dilation(load_experiment(SPINE_DOWN), out, plots=False), out


def test_a_spine_down_is_routed_around_then_programmed_again_and_nothing_is_left(spine_down):
    s, _ = spine_down
    assert s["complete"] and not s["fell_behind"] and s["link_losses"] == []
    f = s["faults"]
    reaction = f["reaction_ns"]
    down, up = f["faults"]
    (t,) = down["reroute"]
    assert (t["at_ns"], t["detected_ns"], t["converged_ns"]) == (50_000, 51_000, 51_000 + reaction)
    assert t["programmed"] == ["leaf1", "leaf2"] and t["lost_frames"] > 0
    assert up["reprogrammed_ns"] == 200_000 + reaction       # before its links come up
    (back,) = up["reroute"]
    # the leaves hear spine1's remote fault until a round trip after its links are back
    assert back["at_ns"] == 200_000 + reaction and back["detected_ns"] == back["at_ns"] + 2_000
    reroutes = [(r["detected_ns"], r.get("reinstalled")) for r in f["reroutes"]]
    assert reroutes[:2] == [(51_000, None), (200_000, "spine1")]


# Two links' faults 1 ns apart, inside one window (lookahead ~1 us): leaf1
# loses spine1's signal at 21.000 us, spine1 leaf2's at 21.001 us. A
# controller that handled them in wall order could reroute for the second
# first, and leave the first link in the routes (docs/virtual-time.md).
RACE = f"""\
name: race
topology: {REPO / "topologies" / "clos-2x2.yaml"}
time: virtual
controller: {{reaction_us: 5}}
traffic:
  - {{src: h1, dst: h2, op: write, size_bytes: 262144}}
  - {{src: h3, dst: h1, op: write, size_bytes: 65536}}
  - {{src: h4, dst: h2, op: write, size_bytes: 65536}}
faults:
  - {{kind: link_down, at_us: 20, link: "leaf1:spine1", direction: b_to_a}}
  - {{kind: link_down, at_us: 20.001, link: "leaf2:spine1", direction: a_to_b}}
limits: {{wall_s: 60}}
"""


def _race(tmp_path: Path, per_process: int) -> tuple[dict, Path]:
    path = tmp_path / f"race-{per_process}.yaml"
    path.write_text(RACE + f"switch: {{per_process: {per_process}}}\n")
    out = tmp_path / f"out-{per_process}"
    return run_with_dilation(load_experiment(path), out, plots=False), out


def test_reports_of_two_links_within_a_window_reroute_in_fabric_order_however_packed(tmp_path):
    runs = [_race(tmp_path, n) for n in (1, 4)]
    s, out = runs[0]
    assert s["complete"] and s["link_losses"] == []
    f = s["faults"]
    assert [(r["detected_ns"], r["converged_ns"], r["links_down"]) for r in f["reroutes"]] == [
        (21_000, 26_000, [["leaf1", "spine1"]]),
        (21_001, 26_001, [["leaf1", "spine1"], ["leaf2", "spine1"]])]
    # each link's other end hears the remote fault a delay later: nothing more to write
    assert [(r["switch"], r["detected_ns"]) for r in f["port_reports"]] == [
        ("leaf1", 21_000), ("spine1", 21_001), ("spine1", 22_000), ("leaf2", 22_001)]
    files = _files(out)
    for other, other_out in runs[1:]:
        assert without_wall(_unpacked(other)) == without_wall(_unpacked(s))
        assert _files(other_out) == files


def _unpacked(summary: dict) -> dict:
    """A summary but the source file and how many processes the switches took."""
    out = {**summary, "source": ""}
    if isinstance(out.get("virtual_time"), dict):
        out["virtual_time"] = {k: v for k, v in out["virtual_time"].items() if k != "members"}
    return out
