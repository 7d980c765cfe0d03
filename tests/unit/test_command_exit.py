"""The fabric-emu command ends without the interpreter's teardown (``lifeline``), losing nothing."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from emulator.command_exit import is_the_command, without_teardown

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


def test_exit_keeps_threads_atexit_and_buffered_output(tmp_path):
    res = _python("""
        import atexit, sys, threading
        from pathlib import Path
        from emulator.command_exit import exit_without_teardown
        go = threading.Event()
        def late():
            go.wait()
            Path("thread.txt").write_text("joined")
        threading.Thread(target=late).start()
        atexit.register(lambda: Path("atexit.txt").write_text("ran"))
        sys.stdout.write("buffered, not flushed")   # a pipe: block-buffered
        go.set()
        exit_without_teardown(3)
        Path("after.txt").write_text("never")
    """, tmp_path)
    assert res.returncode == 3, res.stderr
    assert res.stdout == "buffered, not flushed"
    assert (tmp_path / "thread.txt").read_text() == "joined"
    assert (tmp_path / "atexit.txt").read_text() == "ran"
    assert not (tmp_path / "after.txt").exists()


def test_exit_with_an_executor_left_open_ends(tmp_path):
    """Its workers are non-daemon threads that leave only by threading's exit
    hook: joining them without it would hang the command for ever."""
    res = _python("""
        import concurrent.futures
        from emulator.command_exit import exit_without_teardown
        pool = concurrent.futures.ThreadPoolExecutor(2)
        pool.submit(print, "done").result()
        exit_without_teardown(0)
    """, tmp_path)
    assert (res.returncode, res.stdout) == (0, "done\n"), res.stderr


@pytest.mark.parametrize("code, status, err", [(None, 0, ""), ("bad input", 1, "bad input\n")])
def test_exit_status_as_sys_exit(tmp_path, code, status, err):
    res = _python(f"""
        from emulator.command_exit import exit_without_teardown
        exit_without_teardown({code!r})
    """, tmp_path)
    assert (res.returncode, res.stderr) == (status, err)


def test_in_a_test_process_system_exit_is_raised():
    """A CliRunner invokes the group in pytest's process: it must go on."""
    assert not is_the_command()

    def main():
        raise SystemExit(2)
    with pytest.raises(SystemExit) as e:
        without_teardown(main)()
    assert e.value.code == 2


def test_the_command_prints_and_exits_with_its_status(tmp_path):
    """``python -m emulator.cli`` is the command: its output reaches the pipe,
    its exit status is click's."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run([sys.executable, "-m", "emulator.cli", "--version"], cwd=tmp_path,
                        env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "version" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "emulator.cli", "no-such-command"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no-such-command" in bad.stderr
