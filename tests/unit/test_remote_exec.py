"""A process on a cluster's remote server (``emulator.net.remote_exec``,
``remote_process.RemoteProcess``, ``ClusterServer.spawn``/``wait_ports``),
run here: the runner's own server ("localhost") runs the same commands
without ssh, so the session's framing of the config files, the start
gate's line after them, signals and the port probe are the real ones."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from emulator.errors import FabricEmuError
from emulator.net.cluster import ClusterServer
from emulator.net.remote_exec import parse, put_frames, receive_files
from emulator.schema.cluster import ClusterServerSpec

HERE = ClusterServerSpec(name="a", address="localhost")


def test_argv_names_the_log_the_files_to_put_and_the_module():
    assert parse(["L", "--", "m", "x"]) == ("L", [], "m", ["x"])
    assert parse(["L", "--put", "/p/a", "--put", "/p/b", "--", "m"]) == ("L", ["/p/a", "/p/b"], "m", [])
    assert parse(["L", "--put", "/p/a", "m"]) is None       # no "--"
    assert parse(["L", "--"]) is None and parse([]) is None


def test_put_files_are_written_whole_and_the_rest_of_stdin_left_unread(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.bin"
    a.write_text('{"x": 1}\n')
    b.write_bytes(bytes(range(256)) * 300)          # over a pipe's 64 KiB
    r, w = os.pipe()
    writer = threading.Thread(target=_write_all, args=(w, put_frames([a, b]) + b"GATE\n"))
    writer.start()
    dest = tmp_path / "there" / "deep"
    receive_files([str(dest / "a.json"), str(dest / "b.bin")], r)
    assert (dest / "a.json").read_bytes() == a.read_bytes()
    assert (dest / "b.bin").read_bytes() == b.read_bytes()
    with open(r, "rb") as rest:
        assert rest.read() == b"GATE\n"
    writer.join()


def _write_all(fd: int, data: bytes) -> None:
    with open(fd, "wb") as sink:
        sink.write(data)


def test_a_cut_short_file_is_refused_and_not_written(tmp_path):
    r, w = os.pipe()
    with open(w, "wb") as sink:
        sink.write(b"10\nshort")
    with pytest.raises(EOFError):
        receive_files([str(tmp_path / "cfg.json")], r)
    assert not (tmp_path / "cfg.json").exists()


def test_the_session_carries_the_config_then_the_gate_line_to_the_process(tmp_path):
    """``json.tool`` with no file argument echoes its stdin: the gate line
    reaches the child whole after remote_exec read the config's frame."""
    from emulator.net.remote_process import RemoteProcess
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"k": "v"}))
    there = tmp_path / "there" / "cfg.json"         # the path on the other server
    argv = [sys.executable, "-m", "emulator.net.remote_exec", str(tmp_path / "p.log"),
            "--put", str(there), "--", "json.tool"]
    proc = RemoteProcess(ClusterServer(HERE, [], tmp_path), argv, stdin_pipe=True, files=[cfg])
    proc.stdin.write(b'{"go": 1}\n')
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    assert json.loads(there.read_text()) == {"k": "v"}
    assert json.loads((tmp_path / "p.log").read_text()) == {"go": 1}
    assert proc.pid is not None and proc.pid > 0


def test_spawn_puts_its_files_unless_the_run_directory_is_shared(tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text("{}")
    srv = ClusterServer(HERE, [], tmp_path)
    proc = srv.spawn("json.tool", [str(cfg)], tmp_path / "p.log", files=[cfg])
    assert proc.wait(timeout=30) == 0 and proc.stdin is None
    assert proc.args[3:] == [str(tmp_path / "p.log"), "--put", str(cfg), "--", "json.tool", str(cfg)]
    srv.shared_run_dir = True
    proc = srv.spawn("json.tool", [str(cfg)], tmp_path / "p.log", files=[cfg])
    assert proc.wait(timeout=30) == 0
    assert proc.args[3:] == [str(tmp_path / "p.log"), "--", "json.tool", str(cfg)]


def test_a_put_that_cannot_be_written_ends_the_process_with_exit_2_and_says_why(tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text("{}")
    blocker = tmp_path / "file"
    blocker.write_text("")
    argv = [sys.executable, "-m", "emulator.net.remote_exec", str(tmp_path / "p.log"),
            "--put", str(blocker / "cfg.json"), "--", "json.tool"]
    out = subprocess.run(argv, input=put_frames([cfg]), capture_output=True, timeout=30)
    lines = out.stdout.decode().split("\n")
    assert lines[0].isdigit() and lines[1] == "exit 2"
    assert "remote_exec: --put: " in (tmp_path / "p.log").read_text()


def test_signals_reach_the_process_and_its_exit_status_comes_back(tmp_path, monkeypatch):
    srv = ClusterServer(HERE, [], tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    script = tmp_path / "fe_trap.py"
    script.write_text("import signal,sys,time\n"
                      "signal.signal(signal.SIGUSR1, lambda *_: print('usr1', flush=True))\n"
                      "print('up', flush=True)\n"
                      "time.sleep(60)\n")
    log = tmp_path / "p.log"
    proc = srv.spawn("fe_trap", [], log)
    _until(lambda: log.exists() and "up" in log.read_text())
    proc.send_signal(signal.SIGUSR1)
    _until(lambda: "usr1" in log.read_text())
    proc.terminate()
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert log.read_text().split() == ["up", "usr1"]


def _until(cond, timeout_s: float = 30):
    import time
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end
        time.sleep(0.01)


def test_wait_ports_waits_for_every_port_in_one_probe_and_names_a_closed_one(tmp_path):
    srv = ClusterServer(HERE, [], tmp_path)
    with socket.socket() as s1, socket.socket() as s2, socket.socket() as closed:
        for s in (s1, s2, closed):
            s.bind(("127.0.0.1", 0))
        s1.listen()
        s2.listen()
        alive = subprocess.Popen(["sleep", "60"])
        try:
            starting = [(s.getsockname()[1], alive, f"switch s{i}", tmp_path / f"s{i}.log")
                        for i, s in enumerate((s1, s2))]
            srv.wait_ports(starting, timeout_s=5)
            with pytest.raises(FabricEmuError) as e:
                srv.wait_ports([*starting, (closed.getsockname()[1], alive, "switch s9",
                                            tmp_path / "s9.log")], timeout_s=0.5)
        finally:
            alive.kill()
            alive.wait()
    assert str(e.value) == (f"switch s9 on cluster server a did not open its port while "
                            f"starting; see {tmp_path / 's9.log'} there")
