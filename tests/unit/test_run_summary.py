"""summary.json's model (``RunSummary``) and the run directory that names every
file (``RunDir``): what a run writes is what they say, and nothing else."""
from __future__ import annotations

import fnmatch
import json

import pytest
from pydantic import ValidationError

from emulator.api import Result
from emulator.experiment.capture import write_captures
from emulator.experiment.results import build_run_summary, write_run_results
from emulator.experiment.summary_file import RunSummary, read_summary
from emulator.rundir import RawDir, RunDir
from tests.summaries import run_summary
from tests.unit.test_capture import _run_pcaps
from tests.unit.test_results import T0, make_experiment, make_run
from tests.unit.test_results_summary import agent_results


def test_the_file_is_the_model_s_keys_in_its_order_and_reads_back_the_same(tmp_path):
    exp, rd = make_experiment(), RunDir(tmp_path / "out")
    make_run(rd.raw.path)
    summary = build_run_summary(exp, "embedded", agent_results(20_000), {}, rd, wall_s=2.5)
    summary.start_unix_ns = 10**18
    write_run_results(exp, rd, T0, summary, plots=False)
    text = rd.summary.read_text()
    on_disk = json.loads(text)
    fields = list(RunSummary.model_fields)
    assert list(on_disk) == [f for f in fields if f in on_disk]          # the fields' order
    # keys never set are absent, not null; one set to None is there, as null
    assert "aborted" not in on_disk and "dilation_chosen_by" not in on_disk
    assert "hosts" not in on_disk                  # no endpoints: section
    assert on_disk["queue_depth_dist"] is not None and on_disk["start_unix_ns"] == 10**18
    again = RunSummary.model_validate(on_disk)
    assert json.dumps(again.as_dict(), indent=1) == text                 # byte for byte
    assert read_summary(rd.path)["fabric_ns"] == on_disk["fabric_ns"]
    assert Result.load(rd.path).summary["flows"] == on_disk["flows"]


def test_a_value_of_another_type_is_refused_not_converted():
    s = run_summary()
    with pytest.raises(ValidationError, match="fabric_ns"):
        s.fabric_ns = 1.5                       # a count of ns, never a fraction
    with pytest.raises(ValidationError, match="complete"):
        s.complete = 1                          # not made True
    with pytest.raises(ValidationError, match="time"):
        s.time = "wall"
    with pytest.raises(ValidationError, match="no_such_key"):
        RunSummary.model_validate(s.as_dict() | {"no_such_key": 1})
    s.dilation = 3000                           # a number as computed: 3000 stays an int
    assert json.dumps(s.as_dict()["dilation"]) == "3000"


def test_every_entry_a_run_writes_is_one_its_directory_names(tmp_path):
    exp, rd = make_experiment(), RunDir(tmp_path / "out")
    make_run(rd.raw.path)
    t0_unix_ns = _run_pcaps(rd.raw.path)
    summary = build_run_summary(exp, "embedded", agent_results(20_000), {}, rd, wall_s=2.5)
    files = write_run_results(exp, rd, T0, summary)
    files.update(write_captures(rd, t0_unix_ns, exp.dilation))
    written = {p.name for p in rd.path.iterdir()}
    assert written == set(files) | {RunDir.RAW}
    assert written <= set(RunDir.ENTRIES)
    assert files[RunDir.CAPTURE] == rd.capture and files[RunDir.SUMMARY] == rd.summary
    # the raw directory's files by the names the switches and agents write
    assert RawDir(rd.raw.path).pcaps() == {"s1-eth1": rd.raw.port_pcap("s1-eth1"),
                                           "s1-eth2": rd.raw.port_pcap("s1-eth2")}
    assert rd.raw.log("leaf2", "qdepth").exists() and rd.raw.stats("leaf2").exists()


def test_a_name_the_run_directory_does_not_know_is_refused(tmp_path):
    rd = RunDir(tmp_path)
    assert rd.file(RunDir.FLOW_RATE_CSV) == tmp_path / "flow_rate.csv"
    with pytest.raises(ValueError, match="flow_rates.csv"):
        rd.file("flow_rates.csv")
    assert not any(fnmatch.fnmatchcase(n, RunDir.BEHIND_GLOB) for n in RunDir.ENTRIES)
    assert RunDir.behind_name(2000.0) == "fell-behind-D2000"
    assert rd.calibration(1500.0).path == tmp_path / "calibration" / "D=1500"
    assert rd.point("kmax=2").summary == tmp_path / "kmax=2" / "summary.json"
