"""Output directories (``emulator.experiment.outdir``): a run writes into a
new directory or an earlier run's, never a system directory, and never
deletes, moves or overwrites what it did not create."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from emulator.errors import OutputError
from emulator.experiment.outdir import MARKER, OutputDir, output_dir, read_marker

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a tmpfs")


def _tree(d) -> list[str]:
    """Every path under ``d``, relative, sorted (directories end with /)."""
    out = []
    for root, dirs, files in os.walk(d):
        rel = os.path.relpath(root, d)
        out += [os.path.normpath(os.path.join(rel, x)) + "/" for x in dirs]
        out += [os.path.normpath(os.path.join(rel, x)) for x in files]
    return sorted(out)


def _a_run(d, summary: str = "{}") -> None:
    """What a run writes: results, its raw directory."""
    with output_dir(d) as odir:
        (odir.path / "run").mkdir()
        (odir.path / "run" / "h1.result.json").write_text("{}")
        (odir.path / "summary.json").write_text(summary)
        (odir.path / "flow_rate.csv").write_text("time_ns\n")


def _refused(d, **kw) -> str:
    with pytest.raises(OutputError) as e:
        with output_dir(d, **kw):
            pytest.fail("opened")
    line = str(e.value)
    assert "\n" not in line
    return line


def test_a_new_directory_gets_a_marker_naming_what_the_run_created(tmp_path):
    d = tmp_path / "a" / "out"
    _a_run(d)
    m = read_marker(d)
    assert m["state"] == "closed" and m["foreign"] == []
    assert m["entries"] == ["flow_rate.csv", "run/", "run/h1.result.json", "summary.json"]


def test_a_rerun_into_our_earlier_run_removes_only_its_entries(tmp_path):
    d = tmp_path / "out"
    _a_run(d, summary='{"run": 1}')
    with output_dir(d) as odir:
        # the earlier run is gone before this one writes: its raw results
        # would read as this run's
        assert _tree(d) == [MARKER]
        (odir.path / "summary.json").write_text('{"run": 2}')
    assert _tree(d) == [MARKER, "summary.json"]
    assert read_marker(d)["entries"] == ["summary.json"]


def test_a_directory_with_someone_elses_files_is_refused_and_left_as_it_was(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    (d / "data").mkdir()
    (d / "data" / "x.csv").write_text("1")
    before = _tree(d)
    line = _refused(d)
    assert str(d) in line and "notes.txt" in line and "data" in line and "--force" in line, line
    assert "2 entries" in line and "no .fabric-emu-run marker" in line, line
    assert _tree(d) == before


def test_files_added_to_our_earlier_run_are_refused_then_kept_with_force(tmp_path):
    d = tmp_path / "out"
    _a_run(d)
    (d / "notes.txt").write_text("mine")
    (d / "run" / "notes.txt").write_text("mine too")
    line = _refused(d)
    assert "notes.txt" in line and "run/notes.txt" in line, line
    with output_dir(d, force=True) as odir:
        # the earlier run's entries are gone, the user's stay where they were
        assert _tree(d) == [MARKER, "notes.txt", "run/", "run/notes.txt"]
        (odir.path / "summary.json").write_text("{}")
    assert (d / "notes.txt").read_text() == "mine" and (d / "run" / "notes.txt").read_text() == "mine too"
    m = read_marker(d)
    assert m["foreign"] == ["notes.txt", "run/notes.txt"]
    assert m["entries"] == ["run/", "summary.json"]
    # the next run with --force: the user's files are still not ours to delete
    with output_dir(d, force=True):
        pass
    assert _tree(d) == [MARKER, "notes.txt", "run/", "run/notes.txt"]


def test_with_force_a_run_refuses_to_write_over_someone_elses_entry(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    (d / "summary.json").write_text("the user's")
    with output_dir(d, force=True) as odir:
        odir.claim("notes.txt", "fell-behind-D*")          # names nobody has: fine
        with pytest.raises(OutputError) as e:
            odir.claim("run", "summary.json")
        assert "summary.json" in str(e.value) and "not fabric-emu's" in str(e.value)
    assert (d / "summary.json").read_text() == "the user's"


def test_a_nested_run_inside_someone_elses_directory_is_refused(tmp_path):
    d = tmp_path / "out"
    (d / "calibration").mkdir(parents=True)
    (d / "calibration" / "mine.txt").write_text("x")
    with output_dir(d, force=True):
        with pytest.raises(OutputError, match="calibration"):
            with output_dir(d / "calibration" / "D=3000"):
                pass
    assert _tree(d) == ["calibration/", "calibration/mine.txt"]     # nothing written: no marker


def test_nested_runs_are_cleared_by_their_own_markers(tmp_path):
    """A sweep's points (and calibration runs) are run directories of their
    own: the parent's rerun clears them, but not a file a user put in one."""
    d = tmp_path / "sweep"
    with output_dir(d, what="sweep") as odir:
        for v in (1, 2):
            _a_run(odir.path / f"x={v}")
        (odir.path / "sweep.csv").write_text("value\n")
    assert "x=1/" in read_marker(d)["entries"] and read_marker(d / "x=1")["state"] == "closed"
    (d / "x=2" / "notes.txt").write_text("mine")
    assert "x=2/notes.txt" in _refused(d)
    with output_dir(d, force=True):
        pass
    assert _tree(d) == [MARKER, "x=2/", "x=2/notes.txt"]


def test_set_aside_moves_only_what_this_run_wrote(tmp_path):
    d = tmp_path / "out"
    _a_run(d)
    (d / "notes.txt").write_text("mine")
    (d / "run" / "notes.txt").write_text("mine too")
    with output_dir(d, force=True) as odir:
        (d / "calibration").mkdir()
        (d / "summary.json").write_text("{}")
        (d / "run" / "h1.log").write_text("")
        kept = odir.set_aside("fell-behind-D2000", keep=("calibration", "fell-behind-*"))
        assert kept == d / "fell-behind-D2000"
        assert _tree(d) == [MARKER, "calibration/", "fell-behind-D2000/",
                            "fell-behind-D2000/run/", "fell-behind-D2000/run/h1.log",
                            "fell-behind-D2000/summary.json", "notes.txt", "run/",
                            "run/notes.txt"]
        odir.remove("run")              # the rerun's fresh raw directory: the user's file stays
        assert (d / "run" / "notes.txt").read_text() == "mine too"


@pytest.mark.parametrize("where, why", [
    ("/etc/fabric-emu-test", "in /etc, a system directory"),
    ("/usr", "in /usr, a system directory"),
    ("/proc/self", "in /proc, a system directory"),
    ("/sys/kernel", "in /sys, a system directory"),
    ("/var/lib/x", "in /var, a system directory"),
    ("/", "holds others' files"),
    ("/tmp", "holds others' files"),
    ("/home/someone", "holds others' files"),
    ("~", "holds others' files"),
])
def test_system_directories_are_refused_in_one_line(where, why):
    line = _refused(where, force=True)
    assert why in line and line.startswith(where), line


def test_a_symlink_to_a_system_directory_is_refused_where_it_points(tmp_path):
    (tmp_path / "out").symlink_to("/etc")
    line = _refused(tmp_path / "out", force=True)
    assert "resolves to /etc" in line and "system directory" in line, line
    assert not os.path.exists("/etc/" + MARKER)


def test_var_tmp_and_a_symlink_to_a_directory_of_ones_own_are_fine(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    _a_run(tmp_path / "link")
    assert (tmp_path / "real" / "summary.json").exists()
    assert OutputDir("/var/tmp/fabric-emu-test-x").path.parts[:3] == ("/", "var", "tmp")


def test_a_path_under_a_regular_file_is_refused_and_nothing_is_created(tmp_path):
    (tmp_path / "f").write_text("")
    line = _refused(tmp_path / "f" / "a" / "b")
    assert f"lies under {tmp_path / 'f'}, which is a file" in line, line
    line = _refused(tmp_path / "f")
    assert "is a file, not a directory" in line
    assert _tree(tmp_path) == ["f"]


def test_a_directory_no_run_wrote_into_is_removed_with_the_parents_it_created(tmp_path):
    with output_dir(tmp_path / "a" / "b" / "c"):
        pass
    assert _tree(tmp_path) == []
    (tmp_path / "given").mkdir()
    with output_dir(tmp_path / "given"):
        pass
    assert _tree(tmp_path) == ["given/"]          # the user's empty directory stays


def test_a_damaged_marker_is_not_ours(tmp_path):
    """A marker that names paths outside the directory (or is not one of
    ours) makes nothing deletable: the directory is someone else's."""
    outside = tmp_path / "precious.txt"
    outside.write_text("keep")
    d = tmp_path / "out"
    d.mkdir()
    (d / "a.csv").write_text("1")
    (d / MARKER).write_text(json.dumps({"tool": "fabric-emu", "state": "closed", "foreign": [],
                                        "entries": ["a.csv", "../precious.txt"]}))
    line = _refused(d)
    assert "damaged" in line and "a.csv" in line, line
    with output_dir(d, force=True):
        pass
    assert outside.read_text() == "keep" and (d / "a.csv").read_text() == "1"
    (d / MARKER).write_bytes(b"\xff" * 100)
    assert "not JSON" in _refused(d)


def test_a_killed_runs_directory_is_its_own_but_for_what_was_there_before(tmp_path):
    """A run killed before it closed its directory left an open marker: what
    it names as there before is kept, all else was the killed run's."""
    d = tmp_path / "out"
    (d / "run").mkdir(parents=True)
    (d / "notes.txt").write_text("mine")
    (d / "run" / "h1.result.json").write_text("{}")
    (d / "summary.json").write_text("")
    (d / MARKER).write_text(json.dumps({"tool": "fabric-emu", "state": "open", "pid": 1 << 22,
                                        "pid_start": 1, "foreign": ["notes.txt"], "entries": []}))
    with output_dir(d, force=True):
        pass
    assert _tree(d) == [MARKER, "notes.txt"]


def test_a_directory_a_live_run_has_open_is_refused(tmp_path):
    d = tmp_path / "out"
    ready = tmp_path / "ready"
    code = ("import sys, time, pathlib; from emulator.experiment.outdir import output_dir\n"
            f"with output_dir({str(d)!r}):\n"
            f"    pathlib.Path({str(ready)!r}).write_text('')\n"
            "    sys.stdin.read()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, env=env)
    try:
        for _ in range(600):
            if ready.exists() or proc.poll() is not None:
                break
            __import__("time").sleep(0.05)
        assert ready.exists()
        line = _refused(d, force=True)
        assert f"pid {proc.pid}" in line and "still going" in line, line
    finally:
        proc.communicate(b"", timeout=30)
    with output_dir(d):               # closed: ours
        pass


@pytest.mark.netns
@needs_root
def test_a_read_only_mount_is_refused_in_one_line(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(ro)], check=True)
    try:
        for d in (ro, ro / "sub"):
            line = _refused(d)
            assert "not writable: Read-only file system" in line, line
    finally:
        subprocess.run(["umount", "-l", str(ro)], check=False)
