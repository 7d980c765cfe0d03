"""``fabric-emu validate``, ``show`` and ``--set``: files checked and
described without building anything (click's runner, in process, no root)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from emulator.cli import main
from emulator.errors import ConfigError
from emulator.experiment.overrides import apply_sets, parse_set

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(str(p.relative_to(REPO)) for d in ("experiments", "topologies")
                 for p in (REPO / d).glob("*.yaml"))


@pytest.fixture
def cli(monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))   # no dilation cached
    runner = CliRunner()
    return lambda *args: runner.invoke(main, list(args), catch_exceptions=False)


def test_set_parses_yaml_values_and_paths():
    assert parse_set("nic.mtu_bytes=4096") == ("nic.mtu_bytes", 4096)
    assert parse_set("switch.ecn={enabled: false}") == ("switch.ecn", {"enabled": False})
    assert parse_set("dilation=auto") == ("dilation", "auto")
    data = {"traffic": [{"size_bytes": 1}], "nic": {"mtu_bytes": 1024}}
    out = apply_sets(data, ["traffic[0].size_bytes=65536", "nic.dscp=24", "limits.wall_s=30"])
    assert out == {"traffic": [{"size_bytes": 65536}], "nic": {"mtu_bytes": 1024, "dscp": 24},
                   "limits": {"wall_s": 30}}
    assert data["traffic"][0]["size_bytes"] == 1                 # the original is kept


@pytest.mark.parametrize("item, why", [
    ("nic.mtu_bytes", "expected key.path=value"),
    ("=3", "expected key.path=value"),
    ("nic..mtu=3", "empty component"),
    ("traffic[5].size_bytes=1", "no list item 5"),
    ("nic.mtu_bytes.x=1", "not a mapping"),
    ("nic.mtu_bytes=[1", "is not YAML"),
])
def test_set_errors_name_the_item(item, why):
    with pytest.raises(ConfigError, match=why) as e:
        apply_sets({"nic": {"mtu_bytes": 1024}, "traffic": []}, [item])
    assert str(e.value).startswith("--set: ")


def test_every_shipped_file_validates_without_root(cli, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)      # as a user would: nothing needs root
    r = cli("validate", "-q", *SHIPPED)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert len(lines) == len(SHIPPED) and all(": valid " in line for line in lines)


def test_validate_prints_the_plan(cli):
    r = cli("validate", "experiments/demo.yaml", "--set", "dilation=12000", "--set", "time=dilated")
    assert r.exit_code == 0, r.output
    out = r.output
    assert "valid experiment 'demo'" in out and "dilation: 12000" in out
    assert "\n  time: dilated\n" in out
    assert "traffic: 12 flows (12 x write 1,048,576 B)" in out
    assert "wall-time limit: 72 s" in out                      # 60 s x 12000 / 10000
    assert "10.0.1.1" in out and "2-way x1" in out             # addresses, routes summary
    r = cli("validate", "experiments/demo.yaml", "--set", "time=dilated")
    assert "dilation: auto, not measured here yet" in r.output


def test_validate_prints_the_clock(cli):
    """auto: virtual for the demo and a workload (no dilation, the wall
    budget as given), dilated on BMv2, saying why."""
    r = cli("validate", "experiments/demo.yaml", "--set", "dilation=12000")
    assert r.exit_code == 0, r.output
    assert "  time: virtual (auto: " in r.output and "dilation:" not in r.output
    assert "wall-time limit: 60 s\n" in r.output                # not stretched by a D
    r = cli("validate", "experiments/demo.yaml", "--target", "bmv2")
    assert "  time: dilated (auto: not virtual with target bmv2 (BMv2 keeps its own clock" in r.output
    r = cli("validate", "experiments/allreduce-rail.yaml")
    assert "  time: virtual (auto: " in r.output


def test_validate_reports_every_bad_file_in_one_line_and_exits_2(cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntopology: ../topologies/clos-2x2.yaml\nnic: {mtu_bytes: 1000}\n")
    r = cli("validate", str(bad), "experiments/demo.yaml", str(tmp_path))
    assert r.exit_code == 2
    errors = [line for line in r.output.splitlines() if line.startswith("fabric-emu: ")]
    assert len(errors) == 2
    assert errors[0].startswith(f"fabric-emu: {bad}: nic.mtu_bytes: ")
    assert "directory" in errors[1]
    assert "valid experiment 'demo'" in r.output
    r = cli("validate", "experiments/demo.yaml", "--set", "nic.mtu_bytes=4095")
    assert r.exit_code == 2 and "nic.mtu_bytes: must be one of" in r.output
    r = cli("validate", "topologies/clos-2x2.yaml", "--set", "clos.spines=3")
    assert r.exit_code == 2 and "applies to experiment files" in r.output


def test_show_prints_a_past_runs_summary(cli, tmp_path):
    summary = {"experiment": "demo", "target": "embedded", "dilation": 8000.0, "wall_s": 15.0,
               "fabric_ns": 300_000, "fell_behind": False, "complete": True,
               "fidelity": {"worst_ratio": 0.2},
               "flows": [{"flow_id": 0, "bytes": 1000, "delivered_bytes": 1000, "complete": True,
                          "fct_ns": 123_400, "retransmitted_packets": 0, "timeouts": 0,
                          "naks": 0}],
               "ports": [], "switches": [], "nics": []}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    r = cli("show", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert "123.4" in r.output and "demo" in r.output
    r = cli("show", str(tmp_path / "nothing"))
    assert r.exit_code == 2 and r.output.startswith("fabric-emu: ")
