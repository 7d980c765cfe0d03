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
import shlex
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


SEPARATORS = {"|", ";", "&&", "||"}


def commands(steps: list[str]) -> list[list[str]]:
    """The simple commands of ``steps``, split as the shell splits them
    (quotes and escapes undone; a pipe, ``;``, ``&&`` or ``||`` ends one)."""
    out = []
    for step in steps:
        lex = shlex.shlex(step, posix=True, punctuation_chars="|;&")
        lex.whitespace_split = True
        current: list[str] = []
        for token in lex:
            if token in SEPARATORS:
                out.append(current)
                current = []
            else:
                current.append(token)
        out.append(current)
    return [c for c in out if c]


def _commands_or_none(line: str) -> list[list[str]]:
    """``commands`` of one line of ``make -n``; none of a line the shell
    would read with the next (a quote or ``{`` left open)."""
    try:
        return commands([line])
    except ValueError:
        return []


def index_of(cmds: list[list[str]], match) -> int:
    """Where the first command ``match(cmd)`` is true is, in the plan's order."""
    found = [i for i, c in enumerate(cmds) if match(c)]
    assert found, "no such step"
    return found[0]


def make_target(cmd: list[str]) -> tuple[str, dict[str, str]] | None:
    """(target, variables) of ``make -C /vagrant TARGET [VAR=value ...]``, else None."""
    if cmd[:3] != ["make", "-C", "/vagrant"] or len(cmd) < 4:
        return None
    return cmd[3], dict(a.split("=", 1) for a in cmd[4:] if "=" in a)


def makefile_default(name: str) -> str:
    return re.search(rf"^{name} \?= (\S+)$", (REPO / "Makefile").read_text(), re.M)[1]


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
    """p4lang's repository of that release, trusted by its own key only, then
    its packages; nothing built from source."""
    res = plan("ubuntu-22.04")
    assert res.returncode == 0, res.stderr
    cmds = commands(sections(res.stdout)["ubuntu-22.04"][1:])
    repo = "https://download.opensuse.org/repositories/home:/p4lang/xUbuntu_22.04"
    key_at = index_of(cmds, lambda c: c[0] == "curl" and f"{repo}/Release.key" in c)
    dearmor = cmds[key_at + 1]                  # the key, piped into the keyring
    assert dearmor[:2] == ["gpg", "--dearmor"]
    keyring = dearmor[dearmor.index("-o") + 1]
    source_at = index_of(cmds, lambda c: c[0] == "echo" and c[-2] == ">"
                         and c[-1].startswith("/etc/apt/sources.list.d/"))
    entry = cmds[source_at][1].split()
    assert entry[0] == "deb" and entry[1] == f"[signed-by={keyring}]"   # that key, no other
    assert entry[2].rstrip("/") == repo
    install_at = index_of(cmds, lambda c: c[:2] == ["apt-get", "install"] and "p4lang-bmv2" in c)
    assert {"p4lang-pi", "p4lang-bmv2", "p4lang-p4c"} <= set(cmds[install_at])
    # the package lists are read again once the repository is there, before the install
    assert any(c[:2] == ["apt-get", "update"] for c in cmds[source_at + 1:install_at])
    assert key_at < source_at < install_at
    assert not any(c[:2] == ["git", "clone"] or c[0] == "./configure" for c in cmds)


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
    project = commands(steps[steps.index("project (the lab):") + 1:])
    # The venv: set in the machine's make config, the file the Makefile reads,
    # outside the shared folder (the host's .venv is not the lab's).
    conf = next(c for c in project if c[0] == "echo" and c[1].startswith("VENV :="))
    venv = conf[1].split(":=", 1)[1].strip()
    assert conf[-2:] == [">", makefile_default("MAKE_CONF")]
    assert venv.startswith("/") and not (venv + "/").startswith("/vagrant/")
    targets = [t for t in map(make_target, project) if t is not None]
    names = [name for name, _ in targets]
    assert project.index(conf) < index_of(project, make_target)     # before any make
    # set up, then the doctor insisting on BMv2, then the tests, last
    assert names.index("setup") < names.index("doctor") < names.index("test") == len(names) - 1
    assert project[-1] == ["make", "-C", "/vagrant", "test"]
    assert shlex.split(dict(targets)["doctor"]["DOCTOR_ARGS"]) == ["--require", "bmv2"]
    # The toolchain's versions are printed whichever way it came.
    versions = {c[0] for c in commands([s for s in steps[1:] if not s.endswith(":")])
                if "--version" in c}
    assert {"p4c", "simple_switch_grpc"} <= versions


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
    venv = f"{tmp_path}/lab-venv"
    cmds = [c for line in res.stdout.splitlines() if not line.endswith("\\")
            for c in _commands_or_none(line)]
    # the tests run by the venv's python; its install stamps are kept in it
    assert any(c[:3] == [f"{venv}/bin/python", "-m", "pytest"] for c in cmds)
    assert any(c[0] == "touch" and c[1].startswith(venv + "/") for c in cmds)
    assert ".venv/" not in res.stdout
