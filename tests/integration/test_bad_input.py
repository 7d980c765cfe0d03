"""Bad input: one line naming file, field and reason; exit 2; nothing built."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import FABRIC_EMU, REPO, leftovers, run_cli

GOOD_TOPO = """\
name: t
clos: {spines: 2, leaves: 2, hosts_per_leaf: 1,
       host_link: {rate_gbps: 100, delay_us: 1}, fabric_link: {rate_gbps: 100, delay_us: 1}}
"""


def _experiment(tmp_path, topo_text: str, extra: str = "") -> str:
    (tmp_path / "topo.yaml").write_text(topo_text)
    exp = tmp_path / "exp.yaml"
    exp.write_text("name: bad\ntopology: topo.yaml\n"
                   "traffic: [{pattern: all-to-all, size_bytes: 1000}]\n" + extra)
    return str(exp)


CASES = {
    "malformed-yaml": ("name: t\nclos: {spines: 2\n", "", "topo.yaml", "line"),
    "unknown-field": (GOOD_TOPO.replace("hosts_per_leaf: 1", "hosts_per_leaf: 1, colour: red"),
                      "", "topo.yaml", "clos.colour"),
    "zero-spines": (GOOD_TOPO.replace("spines: 2", "spines: 0"), "", "topo.yaml", "clos.spines"),
    "duplicate-names": ("name: t\nnodes: [{name: s1, role: spine}, {name: l1, role: leaf},"
                        " {name: l1, role: leaf}, {name: h1, role: host}]\n"
                        "links: [{a: h1, b: l1, rate_gbps: 1, delay_us: 1},"
                        " {a: l1, b: s1, rate_gbps: 1, delay_us: 1}]\n",
                        "", "topo.yaml", "nodes[2].name"),
    "experiment-unknown-field": (GOOD_TOPO, "dilaton: 10\n", "exp.yaml", "dilaton"),
    "experiment-unknown-host": (GOOD_TOPO, "", "exp.yaml", None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_file_gives_one_line_and_exit_2(tmp_path, case):
    topo, extra, bad_file, field = CASES[case]
    exp = _experiment(tmp_path, topo, extra)
    if case == "experiment-unknown-host":
        exp_path = tmp_path / "exp.yaml"
        exp_path.write_text("name: bad\ntopology: topo.yaml\n"
                            "traffic: [{src: h1, dst: h99, size_bytes: 1000}]\n")
        field = "traffic[0].dst"
    before = leftovers()
    res = run_cli("run", exp, "--out", tmp_path / "out")
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert bad_file in lines[0] and field in lines[0], lines[0]
    assert leftovers() == before
    assert not (tmp_path / "out" / "summary.json").exists()


def test_topo_show_bad_file(tmp_path):
    (tmp_path / "t.yaml").write_text(GOOD_TOPO.replace("leaves: 2", "leaves: -1"))
    res = run_cli("topo", "show", tmp_path / "t.yaml")
    assert res.returncode == 2 and "clos.leaves" in res.stderr and len(res.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_not_root_is_refused_cleanly(tmp_path):
    exp = _experiment(tmp_path, GOOD_TOPO)
    before = leftovers()
    # In a fresh user namespace we are uid 65534 (not root) but still own our files.
    res = subprocess.run(["unshare", "--user", *FABRIC_EMU, "run", exp, "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "root" in res.stderr, res.stderr
    assert leftovers() == before
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="needs root (the check after the root check)")
def test_bmv2_target_without_bmv2_is_refused_cleanly(tmp_path):
    """--target bmv2 where simple_switch_grpc is not on PATH: one line saying
    what is missing, exit 2, nothing built."""
    import os
    exp = _experiment(tmp_path, GOOD_TOPO)
    path = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                           if d and not os.path.exists(os.path.join(d, "simple_switch_grpc")))
    res = run_cli("run", exp, "--out", tmp_path / "out", "--target", "bmv2",
                  env={**os.environ, "PATH": path})
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "simple_switch_grpc" in lines[0] and "bmv2" in lines[0], res.stderr
    assert leftovers() == {"interfaces": [], "processes": []}
    # auto falls back to the embedded target there (not run here: it would build the fabric).
    from emulator.experiment.runner import resolve_target
    if "simple_switch_grpc" not in (__import__("shutil").which("simple_switch_grpc") or ""):
        assert resolve_target("auto") == "embedded"
