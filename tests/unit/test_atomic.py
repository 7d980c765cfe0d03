"""Result files written whole or not at all (``emulator.atomic``): a write
that fails leaves the earlier file as it was, no temporary file, and one
line naming the file, its size and why."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess

import pytest

from emulator.atomic import atomic_open, atomic_savefig, atomic_write_text, is_temp_name
from emulator.errors import WriteFailed
from emulator.experiment.results_io import write_csv

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a tmpfs")


def _entries(d) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_a_write_replaces_the_file_whole(tmp_path):
    p = tmp_path / "summary.json"
    atomic_write_text(p, json.dumps({"a": 1}))
    atomic_write_text(p, json.dumps({"a": 2}))
    assert json.loads(p.read_text()) == {"a": 2} and _entries(tmp_path) == ["summary.json"]


def test_a_failed_rename_keeps_the_earlier_file_and_says_which_how_big_and_why(tmp_path, monkeypatch):
    p = tmp_path / "summary.json"
    p.write_text('{"earlier": true}')

    def full(src, dst):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(WriteFailed) as e:
        atomic_write_text(p, "x" * 12345)
    line = str(e.value)
    assert "\n" not in line and str(p) in line and "12,345 bytes" in line, line
    assert "No space left on device" in line and "earlier file is kept" in line, line
    assert e.value.exit_status == 1 and e.value.oserror.errno == errno.ENOSPC
    assert p.read_text() == '{"earlier": true}' and _entries(tmp_path) == ["summary.json"]


def test_a_streamed_writer_that_raises_leaves_nothing_half_written(tmp_path):
    p = tmp_path / "flow_rate.csv"
    p.write_text("time_ns\n1\n")
    with pytest.raises(ValueError):
        with atomic_open(p, "w") as f:
            f.write("time_ns\n")
            raise ValueError("a row that cannot be formatted")
    assert p.read_text() == "time_ns\n1\n" and _entries(tmp_path) == ["flow_rate.csv"]


def test_a_csv_into_a_directory_that_is_not_writable_is_one_line(tmp_path, monkeypatch):
    real_open = open

    def refusing(path, *a, **k):
        if is_temp_name(os.path.basename(str(path))):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, *a, **k)
    monkeypatch.setattr("builtins.open", refusing)
    with pytest.raises(WriteFailed) as e:
        write_csv(tmp_path / "drops.csv", ("time_ns",), [{"time_ns": 1}])
    assert "drops.csv" in str(e.value) and "Permission denied" in str(e.value)
    assert "no file was left in its place" in str(e.value)
    assert _entries(tmp_path) == []


@contextlib.contextmanager
def _tmpfs(path, options: str):
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.netns
@needs_root
def test_a_full_disk_keeps_the_earlier_summary_intact(tmp_path):
    """A real full file system (a 64 KiB tmpfs): the new summary.json does
    not fit; the earlier one is still whole JSON, no temporary file is left,
    and the error is one line with the size that did not fit."""
    with _tmpfs(tmp_path / "small", "size=64k") as d:
        p = d / "summary.json"
        earlier = json.dumps({"flows": [], "note": "earlier"})
        atomic_write_text(p, earlier)
        with contextlib.suppress(OSError):        # fill what is left
            with open(d / "filler", "wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        new = json.dumps({"flows": [{"flow_id": i} for i in range(4000)]})
        with pytest.raises(WriteFailed) as e:
            atomic_write_text(p, new)
        assert f"{len(new):,} bytes" in str(e.value) and "No space left" in str(e.value)
        assert p.read_text() == earlier
        assert _entries(d) == ["filler", "summary.json"]


@pytest.mark.netns
@needs_root
def test_a_plot_on_a_read_only_file_system_is_one_line(tmp_path):
    from matplotlib.figure import Figure
    with _tmpfs(tmp_path / "ro", "ro,size=64k") as d:
        with pytest.raises(WriteFailed) as e:
            atomic_savefig(Figure(), d / "queue_depth.png")
        assert "queue_depth.png" in str(e.value) and "Read-only file system" in str(e.value)
        assert _entries(d) == []
