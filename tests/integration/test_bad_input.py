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
    assert ours(tmp_path, before) == []
    assert not (tmp_path / "out" / "summary.json").exists()


EXP = "name: bad\ntopology: topo.yaml\ntraffic: [{pattern: all-to-all, size_bytes: 1000}]\n"


def _flows_past_memory() -> bytes:
    """An experiment whose flows' buffers (2 GiB messages, sender + receiver copies) exceed this machine's budget."""
    from emulator.schema.limits import MAX_MESSAGE_BYTES, memory_budget_bytes
    n = memory_budget_bytes() // (2 * MAX_MESSAGE_BYTES) + 1
    flow = f"  - {{src: h1, dst: h2, size_bytes: {MAX_MESSAGE_BYTES}}}\n"
    return ("name: bad\ntopology: topo.yaml\ntraffic:\n" + flow * n).encode()


# name -> (files to write (bytes), the CLI's arguments ({d}: the directory), what the line names)
INPUT_CASES = {
    "not-utf8": ({"exp.yaml": EXP.encode() + b"# caf\xe9\n"}, ["run", "{d}/exp.yaml"],
                 ["exp.yaml", "line 4", "not UTF-8"]),
    "not-utf8-cli": ({"exp.yaml": EXP.encode() + b"# caf\xe9\n"}, ["cli", "{d}/exp.yaml"],
                     ["exp.yaml", "line 4", "not UTF-8"]),
    "binary": ({"exp.yaml": bytes(range(256)) * 4}, ["run", "{d}/exp.yaml"], ["exp.yaml", "not UTF-8"]),
    "nul-byte": ({"exp.yaml": EXP.encode() + b"\x00\n"}, ["run", "{d}/exp.yaml"], ["exp.yaml", "line 4", "U+0000"]),
    "utf16": ({"exp.yaml": EXP.encode("utf-16")}, ["run", "{d}/exp.yaml"], ["exp.yaml", "not UTF-8"]),
    "experiment-is-dir": ({}, ["run", "{d}"], ["is a directory, not a regular file"]),
    "experiment-is-dir-cli": ({}, ["cli", "{d}"], ["is a directory, not a regular file"]),
    "topology-is-dir": ({"exp.yaml": EXP.replace("topo.yaml", ".").encode()}, ["run", "{d}/exp.yaml"],
                        ["exp.yaml", "topology", "is a directory"]),
    "topo-show-dir": ({}, ["topo", "show", "{d}"], ["is a directory, not a regular file"]),
    "huge-flow": ({"exp.yaml": EXP.replace("1000}", "100000000000000000000}").encode()},
                  ["run", "{d}/exp.yaml"], ["traffic[0].size_bytes", "2**31"]),
    "flows-exceed-memory": ({"exp.yaml": _flows_past_memory()},
                            ["run", "{d}/exp.yaml"], ["exp.yaml", "traffic", "flows need", "this machine"]),
    "rate-out-of-range": ({"topo.yaml": GOOD_TOPO.replace("rate_gbps: 100,", "rate_gbps: 1.0e+300,", 1).encode(),
                           "exp.yaml": EXP.encode()}, ["run", "{d}/exp.yaml"],
                          ["topo.yaml", "clos.host_link.rate_gbps", "100 Tbit/s"]),
    "delay-out-of-range": ({"topo.yaml": GOOD_TOPO.replace("delay_us: 1}", "delay_us: 5000000}", 1).encode(),
                            "exp.yaml": EXP.encode()}, ["run", "{d}/exp.yaml"],
                           ["clos.host_link.delay_us", "at most"]),
    "start-out-of-range": ({"exp.yaml": EXP.replace("1000}", "1000, start_us: 1.0e+20}").encode()},
                           ["run", "{d}/exp.yaml"], ["traffic[0].start_us", "a day"]),
    "billion-servers": ({"topo.yaml": b"name: t\nservers: {count: 1000000000, gpus_per_server: 1,"
                                      b" nic_link: {rate_gbps: 100, delay_us: 1}}\n"
                                      b"rail_optimized: {spines: 1, fabric_link: {rate_gbps: 100, delay_us: 1}}\n"},
                        ["topo", "show", "{d}/topo.yaml"], ["servers.count", "64262"]),
}


@pytest.mark.parametrize("case", sorted(INPUT_CASES))
def test_bad_input_gives_one_line_and_exit_2(tmp_path, case):
    """Files that are not UTF-8 YAML, directories where a file belongs, values
    past what the machine or the wire can hold: one line naming the file, the
    field and the limit; exit 2; nothing built, nothing written."""
    files, args, expected = INPUT_CASES[case]
    (tmp_path / "topo.yaml").write_text(GOOD_TOPO)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    before = leftovers()
    args = [a.format(d=tmp_path) for a in args] + (["--out", str(tmp_path / "out")] if args[0] == "run" else [])
    res = run_cli(*args, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    assert not (tmp_path / "out").exists()
    assert ours(tmp_path, before) == [], "processes of this run were left behind"


def ours(tmp_path, before) -> list[int]:
    """Emulator processes started since ``before`` by a run of ``tmp_path``'s files (their
    configs live there): other runs on the machine may build fabrics meanwhile."""
    from pathlib import Path
    out = []
    for pid in set(leftovers()["processes"]) - set(before["processes"]):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(tmp_path) in cmdline:
            out.append(pid)
    return out


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
