"""The command line's output side, in process (click's runner, no root, no
fabric): ``show`` on damaged summaries, and ``run``/``compare`` refusing a
bad ``--out`` in one line, exit status 2, before anything is built."""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from emulator.cli import main
from emulator.experiment.summary_file import MAX_SUMMARY_BYTES

REPO = Path(__file__).resolve().parents[2]

GOOD = {"experiment": "demo", "target": "embedded", "dilation": 8000.0, "wall_s": 15.0,
        "fabric_ns": 300_000, "fell_behind": False, "complete": True,
        "fidelity": {"worst_ratio": 0.2, "behind": []},
        "flows": [{"flow_id": 0, "bytes": 1000, "delivered_bytes": 1000, "complete": True,
                   "fct_ns": 123_400, "retransmitted_packets": 0, "timeouts": 0, "naks": 0}],
        "ports": [{"node": "leaf1", "role": "leaf", "port": 1, "tx_packets": 3, "drops": 0,
                   "pipeline_drops": 0, "priorities": [{"priority": 3, "ecn_marks": 1,
                                                        "pause_tx": 0, "headroom_drops": 0,
                                                        "max_depth_bytes": 2048}]}],
        "switches": [], "nics": []}


@pytest.fixture
def cli(monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    runner = CliRunner()
    return lambda *args: runner.invoke(main, [str(a) for a in args], catch_exceptions=False)


def _one_line(r, *expected) -> str:
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fabric-emu: "), r.output
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def _damaged(summary: dict, **change) -> str:
    return json.dumps({**summary, **change})


DAMAGED = {
    "empty": ("", "empty (0 bytes)"),
    "blank": ("  \n", "empty"),
    "truncated": (json.dumps(GOOD, indent=1)[:200], "not JSON"),
    "list": ("[1, 2]", "a JSON list, not an object"),
    "string": ('"summary"', "a JSON str"),
    "no-flows": (json.dumps({k: v for k, v in GOOD.items() if k != "flows"}), "flows: Field required"),
    "flows-not-a-list": (_damaged(GOOD, flows={"a": 1}), "flows: Input should be a valid list"),
    "flow-wrong-type": (_damaged(GOOD, flows=[{**GOOD["flows"][0], "bytes": "many"}]),
                        "flows[0].bytes"),
    "flow-not-a-dict": (_damaged(GOOD, flows=[7]), "flows[0]"),
    "fct-a-list": (_damaged(GOOD, flows=[{**GOOD["flows"][0], "fct_ns": [1]}]), "flows[0].fct_ns"),
    "port-missing-drops": (_damaged(GOOD, ports=[{"node": "l", "role": "leaf", "tx_packets": 1,
                                                  "pipeline_drops": 0}]), "ports[0].drops"),
    "fidelity-null": (_damaged(GOOD, fidelity=None), "fidelity"),
    "wall-a-string": (_damaged(GOOD, wall_s="fast"), "wall_s"),
    "collectives-null": (_damaged(GOOD, collectives=None), "collectives"),
    "hosts-without-isolation": (_damaged(GOOD, hosts=[]), "isolation"),
    "queue-dist-no-percentiles": (_damaged(GOOD, queue_depth_dist={"samples": 5}),
                                  "queue_depth_dist"),
    "deep": ("[" * 100_000 + "]" * 100_000, "nested too deep"),
    "not-utf8": (b"\xff\xfe{\x00".decode("latin-1"), "not JSON"),
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_show_on_a_damaged_summary_is_one_line_naming_the_file(cli, tmp_path, case):
    text, why = DAMAGED[case]
    (tmp_path / "summary.json").write_bytes(text.encode("latin-1"))
    _one_line(cli("show", tmp_path), str(tmp_path / "summary.json"), why)


def test_show_does_not_read_a_huge_file(cli, tmp_path):
    p = tmp_path / "summary.json"
    with open(p, "wb") as f:                  # sparse: 8 GiB that take no disk
        f.truncate(8 << 30)
    _one_line(cli("show", p), str(p), f"{8 << 30:,} bytes", f"{MAX_SUMMARY_BYTES >> 20} MiB")


@pytest.mark.parametrize("path, why", [("/dev/zero", "not a regular file"),
                                       ("/nonexistent/summary.json", "No such file")])
def test_show_on_what_is_not_a_file_is_one_line(cli, path, why):
    _one_line(cli("show", path), why)


def test_show_prints_a_good_summary_with_numbers_given_as_text(cli, tmp_path):
    summary = _damaged(GOOD, wall_s="15.0")          # a number in a string is still one
    (tmp_path / "summary.json").write_text(summary)
    r = cli("show", tmp_path)
    assert r.exit_code == 0, r.output
    assert "123.4" in r.output and "demo" in r.output and "2,048" in r.output


@pytest.fixture
def no_fabric(monkeypatch):
    """What ``run``/``compare`` do before the output directory, made inert:
    the fork server not prestarted, the root check passed, no lock taken;
    a run that got past the checks fails the test."""
    import emulator.experiment.dilation as dilation
    import emulator.experiment.runner as runner
    import emulator.net.environment as environment
    import emulator.net.runlock as runlock
    import emulator.prestart as prestart
    monkeypatch.setattr(prestart, "prestart", lambda: None)
    monkeypatch.setattr(environment, "check_environment", lambda: None)
    monkeypatch.setattr(runlock.RunLock, "acquire",
                        classmethod(lambda cls, *a, **k: contextlib.nullcontext()))

    def no_run(*a, **k):
        pytest.fail("a run started")
    monkeypatch.setattr(dilation, "run_with_dilation", no_run)
    monkeypatch.setattr(runner, "fabric_net", no_run)      # ``cli``'s fabric


@pytest.fixture
def places(tmp_path):
    (tmp_path / "file").write_text("")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "notes.txt").write_text("mine")
    (tmp_path / "to-etc").symlink_to("/etc")
    return tmp_path


@pytest.mark.parametrize("out, why", [
    ("{d}/file/out", "which is a file, not a directory"),
    ("{d}/to-etc", "resolves to /etc"),
    ("/proc/out", "in /proc, a system directory"),
    ("/", "holds others' files"),
    ("{d}/theirs", "notes.txt"),
])
@pytest.mark.parametrize("command", ["run", "compare", "cli"])
def test_a_bad_out_is_one_line_and_nothing_is_written(cli, no_fabric, places, command, out, why):
    exps = ["experiments/incast-pfc.yaml", "experiments/incast-ib.yaml"] if command == "compare" \
        else ["experiments/demo.yaml"]
    before = sorted(str(p) for p in places.rglob("*"))
    _one_line(cli(command, *exps, "--out", out.format(d=places)), why)
    assert sorted(str(p) for p in places.rglob("*")) == before
    assert not os.path.exists("/etc/.fabric-emu-run")


def _fake_runs(monkeypatch) -> list:
    """``run_with_dilation`` and ``write_report`` faked: what each was asked, in turn."""
    import emulator.experiment.dilation as dilation
    seen = []

    def fake_run(exp, out, console, pcap=False, dilation=None, **kw):
        seen.append((Path(out), kw.get("force"), kw.get("plots")))
        return {"complete": True}
    monkeypatch.setattr(dilation, "run_with_dilation", fake_run)
    import emulator.report as report
    monkeypatch.setattr(report, "write_report",     # the fake run left nothing to draw
                        lambda out: seen.append((Path(out), "report")) or Path(__file__))
    return seen


def test_force_writes_beside_the_users_files(cli, no_fabric, places, monkeypatch):
    seen = _fake_runs(monkeypatch)
    r = cli("run", "experiments/demo.yaml", "--out", places / "theirs", "--force")
    assert r.exit_code == 0, r.output
    assert seen == [(places / "theirs", True, True), (places / "theirs", "report")]
    assert (places / "theirs" / "notes.txt").read_text() == "mine"


def test_no_plots_runs_without_figures_and_writes_no_report(cli, no_fabric, tmp_path, monkeypatch):
    seen = _fake_runs(monkeypatch)
    r = cli("run", "experiments/demo.yaml", "--out", tmp_path / "out", "--no-plots")
    assert r.exit_code == 0, r.output
    assert seen == [(tmp_path / "out", False, False)]


def test_a_comparisons_default_directory_is_one_valid_name_however_many_long_names():
    from emulator.cli import COMPARE_DIR_MAX_BYTES, comparison_dir_name
    assert comparison_dir_name(["incast-pfc", "incast-ib"]) == "compare-incast-pfc-incast-ib"
    labels = [f"{'x' * 60}-{i}" for i in range(6)]          # 6 names of 62 characters
    name = comparison_dir_name(labels)
    assert len(name.encode()) <= COMPARE_DIR_MAX_BYTES
    assert name.startswith(f"compare-{labels[0]}-{labels[1]}-") and name.endswith("-and-4-more")
