"""``fabric-emu run`` and its output directory, for real (a 2-host fabric):
a user's files in it are refused, then kept with ``--force``; a full disk
is one line and never an empty summary.json; SIGTERM at the start is one
line and leaves nothing running or half-written."""
from __future__ import annotations

import contextlib
import fnmatch
import json
import signal
import subprocess
import time

import pytest

from emulator.experiment.outdir import MARKER, read_marker
from emulator.rundir import RunDir
from tests.conftest import FABRIC_EMU, REPO, run_cli
from tests.integration.test_run_lifecycle import (SHORT_BYTES, START_TIMEOUT_S, _experiment,
                                                  _lock_free, mine, wait_for)

pytestmark = pytest.mark.fabric


@pytest.fixture(autouse=True)
def _no_other_run():
    wait_for(_lock_free, 300, "the run lock free (another fabric is running)")


def _tree(d) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def _error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("fabric-emu:")]


def test_a_rerun_refuses_a_users_files_then_keeps_them_with_force(tmp_path):
    exp, out = _experiment(tmp_path, SHORT_BYTES), tmp_path / "out"
    first = run_cli("run", exp, "--out", out)
    assert first.returncode == 0, first.stderr
    created = {p.name for p in out.iterdir()} - {MARKER}
    # what a run writes is what it claims before it starts (OutputDir.claim)
    assert all(any(fnmatch.fnmatchcase(n, p) for p in RunDir.ENTRIES) for n in created), created
    # a rerun writes its own (not an inode number: the file system reuses the
    # one the rerun freed when it removed the first run's files)
    first_summary = (out / "summary.json").stat().st_mtime_ns
    (out / "notes.txt").write_text("mine")
    (out / "run" / "notes.txt").write_text("mine too")
    before = _tree(out)

    refused = run_cli("run", exp, "--out", out)
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert "notes.txt" in line and "run/notes.txt" in line and "--force" in line, line
    assert _tree(out) == before

    forced = run_cli("run", exp, "--out", out, "--force", "--no-plots")
    assert forced.returncode == 0, forced.stderr
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "run" / "notes.txt").read_text() == "mine too"
    assert (out / "summary.json").stat().st_mtime_ns > first_summary
    marker = read_marker(out)
    assert marker["state"] == "closed" and marker["foreign"] == ["notes.txt", "run/notes.txt"]
    assert mine() == {"interfaces": [], "processes": []}


@contextlib.contextmanager
def _tmpfs(path, size: str):
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_full_disk_is_one_line_and_never_an_empty_summary(tmp_path):
    """A 64 KiB file system: the raw logs fit, the results do not. Exit 1,
    one line naming the file that did not fit and why; no result file is
    left empty or cut short; a rerun into it clears the first and says so
    again."""
    exp = _experiment(tmp_path, SHORT_BYTES)
    with _tmpfs(tmp_path / "small", "64k") as small:
        out = small / "out"
        for _ in range(2):
            r = run_cli("run", exp, "--out", out)
            assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
            [line] = _error_lines(r.stderr)
            assert str(out) in line and "No space left on device" in line, line
            for p in out.iterdir():
                if p.is_file() and p.suffix in (".json", ".csv", ".txt"):
                    assert p.stat().st_size > 0, p
            if (out / "summary.json").exists():
                json.loads((out / "summary.json").read_text())
            assert mine() == {"interfaces": [], "processes": []}


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has its SIGTERM handler installed (/proc's SigCgt)."""
    try:
        status = open(f"/proc/{pid}/status").read()
    except OSError:
        return False
    caught = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:")), 16)
    return bool(caught & (1 << (signal.SIGTERM - 1)))


@pytest.mark.parametrize("when", ["started", "building"])
def test_sigterm_early_in_a_run_is_one_line_and_leaves_nothing(tmp_path, when):
    """SIGTERM as soon as the command can take it (its first tenth of a
    second), or while it builds the fabric: one line, exit 128 + 15, no
    process or interface left, and the directory either never made or a
    closed run directory the next run reuses."""
    exp, out = _experiment(tmp_path, SHORT_BYTES), tmp_path / "out"
    proc = subprocess.Popen([*FABRIC_EMU, "run", str(exp), "--out", str(out)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ready = ((lambda: _catches_sigterm(proc.pid)) if when == "started"
             else (lambda: (out / "run").is_dir()))
    wait_for(lambda: ready() or proc.poll() is not None, START_TIMEOUT_S, when)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err, err
    [line] = _error_lines(err)
    assert "interrupted (SIGTERM)" in line, line
    wait_for(lambda: mine() == {"interfaces": [], "processes": []}, 10, "the fabric gone")
    assert time.monotonic() - t0 < 30
    if out.exists():
        assert read_marker(out)["state"] == "closed", _tree(out)
        again = run_cli("run", exp, "--out", out, "--no-plots")
        assert again.returncode == 0, again.stderr
