"""The Vagrant lab's files, checked as far as a machine without a VM can.

The Vagrantfile must parse as Ruby and say what the lab is (boxes pinned per
provider, a two-way shared folder, provision.sh); the provisioning script
must pass shellcheck, and its plan (`provision.sh --plan`, which changes
nothing) must be consistent for every release it names: p4lang's packages
where they exist, pinned release tags built from source elsewhere, the
lab's venv outside the shared folder, the doctor before the tests. `make
test` installs ruby and shellcheck, so those checks skip only on a machine
set up by hand without them.
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.conftest import REPO

PROVISION = REPO / "vagrant/provision.sh"
needs_ruby = pytest.mark.skipif(shutil.which("ruby") is None,
                                reason="ruby is not installed (make test installs it)")


def plan(*releases: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(PROVISION), "--plan", *releases], capture_output=True, text=True)


def sections(out: str) -> dict[str, list[str]]:
    """The plan per release: its header line, then its steps."""
    got: dict[str, list[str]] = {}
    release = None
    for line in out.splitlines():
        m = re.match(r"^([a-z]+-[\d.]+): ", line)
        if m:
            release = m[1]
            got[release] = [line]
        elif release:
            got[release].append(line.strip())
    return got


def supported_releases() -> list[str]:
    return re.search(r'^SUPPORTED_RELEASES="([^"]+)"', PROVISION.read_text(), re.M)[1].split()


@needs_ruby
def test_vagrantfile_parses():
    res = subprocess.run(["ruby", "-c", str(REPO / "Vagrantfile")], capture_output=True, text=True)
    assert res.returncode == 0 and "Syntax OK" in res.stdout, res.stderr


@needs_ruby
def test_vagrantfile_pins_a_box_per_provider_of_a_release_provision_sh_supports():
    """Loaded with a recorder in place of Vagrant: every setting it makes."""
    res = subprocess.run(["ruby", str(REPO / "tests/data/vagrant_recorder.rb"), str(REPO / "Vagrantfile")],
                         capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    settings = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line.split("(")[0])
    calls = [line for line in res.stdout.splitlines() if "=" not in line.split("(")[0]]
    boxes = {"virtualbox": (settings["config.vm.box"], settings["config.vm.box_version"]),
             "libvirt": (settings["config.vm.provider.libvirt.override.vm.box"],
                         settings["config.vm.provider.libvirt.override.vm.box_version"])}
    releases = set()
    for provider, (box, version) in boxes.items():
        m = re.fullmatch(r'"[\w-]+/(ubuntu|debian)-([\d.]+)"', box)
        assert m, (provider, box)
        releases.add(f"{m[1]}-{m[2]}")
        assert re.fullmatch(r'"\d+(\.\d+)+"', version), (provider, version)   # pinned, not a range
    assert releases <= set(supported_releases())
    assert settings["config.vm.provider.virtualbox.cpus"] == "4"
    assert settings["config.vm.provider.virtualbox.memory"] == "8192"
    # Results reach the host: the project is shared two-way (never rsync's one way).
    shared = [c for c in calls if ".synced_folder(" in c]
    assert shared and all('".", "/vagrant"' in c and "rsync" not in c for c in shared)
    assert 'config.vm.provision("shell", name: "fabric-lab", privileged: true, ' \
           'path: "vagrant/provision.sh")' in calls


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck is not installed (make test installs it)")
@pytest.mark.parametrize("script", ["vagrant/provision.sh", ".ci/run"])
def test_provisioning_passes_shellcheck(script):
    res = subprocess.run(["shellcheck", "--shell=bash", str(REPO / script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_plan_covers_every_supported_release():
    res = plan()
    assert res.returncode == 0, res.stderr
    assert list(sections(res.stdout)) == supported_releases() == ["ubuntu-22.04", "ubuntu-24.04", "debian-12"]


def test_packaged_release_uses_p4langs_repository_for_that_release():
    res = plan("ubuntu-22.04")
    assert res.returncode == 0, res.stderr
    steps = "\n".join(sections(res.stdout)["ubuntu-22.04"])
    repo = "https://download.opensuse.org/repositories/home:/p4lang/xUbuntu_22.04"
    assert f"curl -fsSL '{repo}/Release.key'" in steps
    assert f"{repo}/ /' > /etc/apt/sources.list.d/home_p4lang.list" in steps
    assert "apt-get install -y -qq p4lang-pi p4lang-bmv2 p4lang-p4c" in steps
    assert "git clone" not in steps and "./configure" not in steps


@pytest.mark.parametrize("release", ["ubuntu-24.04", "debian-12"])
def test_source_releases_build_pinned_release_tags_in_order(release):
    res = plan(release)
    assert res.returncode == 0, res.stderr
    steps = sections(res.stdout)[release]
    text = "\n".join(steps)
    assert "home:p4lang" not in text and "p4lang-bmv2" not in text
    tags = {}
    for repo in ("PI", "behavioral-model", "p4c"):
        m = re.search(rf"--branch '([^']+)' .*'https://github.com/p4lang/{repo}.git'", text)
        assert m, repo
        tags[repo] = m[1]
    # Release tags, never a branch or a moving ref.
    assert re.fullmatch(r"v0\.\d+\.\d+", tags["PI"])
    assert re.fullmatch(r"1\.\d+\.\d+", tags["behavioral-model"])
    assert re.fullmatch(r"v1\.2\.\d+\.\d+", tags["p4c"])
    assert steps[0].endswith(f"p4c {tags['p4c']}, BMv2 {tags['behavioral-model']}, PI {tags['PI']}")
    # PI before BMv2 (simple_switch_grpc links it), BMv2 with PI and Thrift, p4c's BMv2 back end.
    order = [i for i, s in enumerate(steps) for key in ("PI-v", "behavioral-model-", "p4c-v")
             if s.startswith("cd ") and key in s]
    assert len(order) == 3 and order == sorted(order)
    assert "./configure --with-pi --with-thrift" in text
    assert "-DENABLE_BMV2=ON" in text
    for pkg in ("libgrpc++-dev", "libprotobuf-dev", "libthrift-dev", "thrift-compiler", "libnanomsg-dev",
                "libboost-graph-dev", "libgc-dev", "bison", "flex", "cmake"):
        assert re.search(rf"apt-get install .*\s{re.escape(pkg)}(\s|$)", text), pkg


@pytest.mark.parametrize("release", ["ubuntu-22.04", "ubuntu-24.04", "debian-12"])
def test_the_lab_keeps_its_venv_outside_the_shared_folder_and_checks_before_testing(release):
    steps = sections(plan(release).stdout)[release]
    project = steps[steps.index("project (the lab):") + 1:]
    assert project[0] == "echo 'VENV := /opt/fabric-emu/venv' > '/etc/fabric-emu.mk'"
    assert project[-2:] == ["make -C /vagrant doctor DOCTOR_ARGS=--require\\ bmv2",
                           "make -C /vagrant test"]
    # The toolchain's versions are printed whichever way it came.
    assert any(s.startswith("p4c --version") and "simple_switch_grpc --version" in s for s in steps)


def test_the_plan_refuses_an_unknown_release_in_one_line():
    res = plan("fedora-40")
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.strip() == ("provision.sh: --plan: fedora-40 is not a supported release "
                                  "(ubuntu-22.04 ubuntu-24.04 debian-12)")


def test_the_makefile_takes_the_venv_from_the_machines_config(tmp_path):
    """What provisioning writes to /etc/fabric-emu.mk moves the venv and its stamps."""
    conf = tmp_path / "fabric-emu.mk"
    conf.write_text(f"VENV := {tmp_path}/lab-venv\n")
    res = subprocess.run(["make", "-n", "-C", str(REPO), "test", f"MAKE_CONF={conf}"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert f"{tmp_path}/lab-venv/bin/python -m pytest -q tests" in res.stdout
    assert f"touch {tmp_path}/lab-venv/.pip-done" in res.stdout
    assert ".venv/" not in res.stdout
