"""The Vagrant lab's files, checked as far as this machine can (no VM here).

The Vagrantfile must parse as Ruby and the provisioning script must pass
shellcheck; `make test` installs both tools (ruby, shellcheck), so these
only skip on a machine set up by hand without them.
"""
from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import REPO


@pytest.mark.skipif(shutil.which("ruby") is None, reason="ruby is not installed (make test installs it)")
def test_vagrantfile_parses():
    res = subprocess.run(["ruby", "-c", str(REPO / "Vagrantfile")], capture_output=True, text=True)
    assert res.returncode == 0 and "Syntax OK" in res.stdout, res.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck is not installed (make test installs it)")
@pytest.mark.parametrize("script", ["vagrant/provision.sh", ".ci/run"])
def test_provisioning_passes_shellcheck(script):
    res = subprocess.run(["shellcheck", "--shell=bash", str(REPO / script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_lab_installs_packaged_p4_tools_and_ends_with_the_tests():
    """The lab installs p4c and BMv2 from p4lang's packages (never a source
    build) and its last step runs the test suite."""
    text = (REPO / "vagrant/provision.sh").read_text()
    assert "p4lang-bmv2" in text and "p4lang-p4c" in text
    assert "git clone" not in text and "./configure" not in text and "cmake" not in text
    steps = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert steps[-1] == "make test"
    vf = (REPO / "Vagrantfile").read_text()
    assert 'config.vm.box = "bento/ubuntu-24.04"' in vf
    assert "vb.cpus = 4" in vf and "vb.memory = 8192" in vf
