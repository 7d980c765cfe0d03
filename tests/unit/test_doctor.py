"""`fabric-emu doctor`: one line per part, problems and absences told apart.

The venv check is pure logic over the installed distributions' metadata; the
whole command runs for real on this machine: where BMv2 is absent (CI) it
must say so and report everything else present, and exit 0 unless BMv2 is
required; where BMv2 is installed (the lab) it must start it and push
fabric.p4's pipeline.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from packaging.requirements import Requirement

from emulator import doctor
from emulator.net.bmv2 import bmv2_unavailable_reason
from emulator.p4.build import p4c_path
from tests.conftest import REPO

FABRIC_EMU = [sys.executable, "-m", "emulator.cli"]


def test_the_venvs_packages_satisfy_the_projects_requirements():
    (finding,) = doctor.check_packages()
    assert finding.status == doctor.OK, finding.line()
    for name in ("scapy", "grpcio", "grpcio-tools", "protobuf"):
        assert f"{name} " in finding.detail


def test_a_package_outside_the_venv_is_a_problem_naming_it():
    """What Debian's python3-scapy in the venv's path would look like."""
    findings = doctor.check_packages(prefix="/nonexistent-venv")
    assert findings and all(f.status == doctor.PROBLEM for f in findings)
    assert any(f.detail.startswith("scapy ") and "outside the venv /nonexistent-venv" in f.detail
               for f in findings)


def test_a_version_the_project_does_not_ask_for_is_a_problem():
    findings = doctor.check_packages(requirements=[Requirement("scapy>=99"), Requirement("click>=8")])
    assert [f.status for f in findings] == [doctor.PROBLEM]
    assert "scapy" in findings[0].detail and "does not satisfy scapy>=99" in findings[0].detail


def test_a_missing_requirement_is_a_problem():
    (f,) = doctor.check_packages(requirements=[Requirement("surely-not-installed-pkg>=1")])
    assert f.status == doctor.PROBLEM and "surely-not-installed-pkg missing" in f.detail


def test_absent_bmv2_parts_become_problems_when_required(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")       # no p4c, no simple_switch_grpc
    from emulator.net import bmv2
    bmv2._cli_env_cached.cache_clear()
    try:
        plain = {f.part: f.status for f in doctor.check()}
        required = {f.part: f.status for f in doctor.check(require=("bmv2",))}
    finally:
        bmv2._cli_env_cached.cache_clear()
    assert plain["p4c"] == plain["bmv2"] == doctor.ABSENT and "pipeline" not in plain
    assert required["p4c"] == required["bmv2"] == doctor.PROBLEM
    assert doctor.exit_status([doctor.Finding("bmv2", doctor.ABSENT, "")]) == 0
    assert doctor.exit_status([doctor.Finding("bmv2", doctor.PROBLEM, "")]) == 1


def test_a_check_that_breaks_is_a_problem_of_its_part_and_the_others_still_report(monkeypatch):
    def broken():
        raise AttributeError("'ForwardingPipelineConfig' object has no attribute 'config'")
    monkeypatch.setattr(doctor, "check_tshark", broken)
    findings = {f.part: f for f in doctor.check()}
    assert findings["tshark"].status == doctor.PROBLEM
    assert "AttributeError" in findings["tshark"].detail and "'config'" in findings["tshark"].detail
    assert {"venv", "mininet", "p4c", "bmv2"} <= set(findings)


def test_the_version_line_is_the_one_naming_a_version():
    sh = [sys.executable, "-c", "print('p4c-bm2-ss'); print('Version 1.2.5.16 (SHA: x)')"]
    assert doctor._version_line(sh) == "Version 1.2.5.16 (SHA: x)"
    assert doctor._version_line([sys.executable, "-c", "print('1.15.5-693e69e6')"]) == "1.15.5-693e69e6"
    tshark = "print('TShark (Wireshark) 4.0.17.'); print('Licensed under GPL (version 2 or later).')"
    assert doctor._version_line([sys.executable, "-c", tshark]) == "TShark (Wireshark) 4.0.17."


@pytest.mark.skipif(os.geteuid() != 0, reason="Mininet's check needs root (make test runs as root)")
def test_doctor_on_this_machine():
    res = subprocess.run([*FABRIC_EMU, "doctor"], capture_output=True, text=True, cwd=REPO, timeout=120)
    lines = res.stdout.splitlines()
    status = {line.split()[1].rstrip(":"): line.split()[0] for line in lines}
    assert set(status) >= {"venv", "mininet", "tshark", "p4c", "bmv2"}
    for part in ("venv", "mininet", "tshark"):           # make test installs all three
        assert status[part] == "ok", res.stdout
    have_bmv2, have_p4c = bmv2_unavailable_reason() is None, p4c_path() is not None
    assert status["bmv2"] == ("ok" if have_bmv2 else "absent"), res.stdout
    assert status["p4c"] == ("ok" if have_p4c else "absent"), res.stdout
    assert res.returncode == 0, res.stdout
    if have_bmv2 and have_p4c:                           # the lab: BMv2 must really work
        assert status["contract"] == status["pipeline"] == "ok", res.stdout
        assert "Version " in next(line for line in lines if line.split()[1] == "p4c:")
    else:                                                # CI: absent is a problem only when required
        required = subprocess.run([*FABRIC_EMU, "doctor", "--require", "bmv2"], capture_output=True,
                                  text=True, cwd=REPO, timeout=120)
        assert required.returncode == 1
        if not have_bmv2:       # not installed, or no p4c to compile fabric.p4 for it
            assert "problem  bmv2: " in required.stdout
        if not have_p4c:
            assert "problem  p4c: p4c-bm2-ss" in required.stdout
