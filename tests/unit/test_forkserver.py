"""The fork server (``emulator/net/forkserver.py``): a child forked warm is
what ``mnexec -da PID python -m MODULE ARGS`` would have started -- command
line, namespace, session, stdin, log, environment, exit status -- and
nothing outlives the server. Real processes, a real network namespace."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from emulator import prestart
from emulator.net import forkserver
from emulator.net.forkserver import ForkServer
from tests.polling import eventually

PROBE = "tests.forkserver_probe"


@pytest.fixture(scope="module")
def fs(tmp_path_factory):
    """One server for the tests that only spawn from it: its start (every
    entry point imported) costs ~1 s, and each test's child is its own."""
    server = ForkServer(tmp_path_factory.mktemp("fs"), {**os.environ, "PROBE": "from-the-runner"},
                        more_entry_points=(PROBE,))
    yield server
    server.close()


def report(log):
    """What the probe says of itself: the first line it writes to its log."""
    text = eventually(lambda: log.exists() and log.read_text().strip(),
                      f"the probe's report in {log}")
    return json.loads(text.splitlines()[0])


def test_child_looks_like_python_dash_m_and_returns_its_status(fs, tmp_path):
    log = tmp_path / "p.log"
    p = fs.spawn(PROBE, ["cfg.json"], log, stdin_pipe=True)
    me = report(log)
    # ps and `clean` see this (setproctitle writes it as one string)
    assert " ".join(c for c in me["cmdline"] if c) == f"{sys.executable} -m {PROBE} cfg.json"
    assert me["argv"] == ["cfg.json"] and me["env"] == "from-the-runner" and me["sid"]
    assert p.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        p.wait(timeout=0.1)
    p.stdin.write(b"7\n")
    p.stdin.close()
    assert p.wait(timeout=10) == 7 and p.returncode == 7


def test_children_start_with_grpc_loaded_and_the_server_holds_no_thread(fs, tmp_path):
    """The switches' gRPC servers are preloaded (``FIRST_PRELOADS``), yet a
    fork copies only the forking thread: the server must have no other."""
    log = tmp_path / "p.log"
    p = fs.spawn(PROBE, [], log, stdin_pipe=True)
    assert report(log)["preloaded"] == ["grpc", "emulator.dataplane.p4rt_server"]
    assert os.listdir(f"/proc/{fs.proc.pid}/task") == [str(fs.proc.pid)]
    p.stdin.close()
    assert p.wait(timeout=10) == 0


@pytest.mark.parametrize("line, status, in_log", [
    ("boom", 1, "RuntimeError: the probe was told to fail"),
    ("exit no config here", 1, "no config here"),
    ("", 0, ""),
])
def test_failures_reach_the_log_and_the_status(fs, tmp_path, line, status, in_log):
    log = tmp_path / "p.log"
    p = fs.spawn(PROBE, [], log, stdin_pipe=True)
    p.stdin.write(f"{line}\n".encode())
    p.stdin.close()
    assert p.wait(timeout=10) == status
    assert in_log in log.read_text()


def test_signals_reach_the_child_and_its_status_says_so(fs, tmp_path):
    p = fs.spawn(PROBE, [], tmp_path / "p.log", stdin_pipe=True)
    report(tmp_path / "p.log")
    p.stdin.write(b"sleep\n")
    p.stdin.flush()
    p.terminate()
    assert p.wait(timeout=10) == -signal.SIGTERM


def test_child_runs_in_the_namespace_of_the_node_it_is_given(fs, tmp_path):
    node = subprocess.Popen(["unshare", "--net", "sleep", "60"])   # a Mininet host's shell, in small
    try:
        mine = os.stat("/proc/self/ns/net").st_ino
        ns = eventually(lambda: (n := os.stat(f"/proc/{node.pid}/ns/net").st_ino) != mine and n,
                        "the node in a namespace of its own")
        p = fs.spawn(PROBE, [], tmp_path / "p.log", netns_pid=node.pid)   # stdin: /dev/null
        assert report(tmp_path / "p.log")["netns"] == ns
        assert p.wait(timeout=10) == 0
    finally:
        node.kill()
        node.wait()


def test_children_die_with_the_server(tmp_path):
    server = ForkServer(tmp_path, dict(os.environ), more_entry_points=(PROBE,))
    p = server.spawn(PROBE, [], tmp_path / "p.log", stdin_pipe=True)
    pid = report(tmp_path / "p.log")["ppid"]          # the server: its parent
    p.stdin.write(b"sleep\n")
    p.stdin.flush()
    os.kill(pid, signal.SIGKILL)                      # a crash, not close()
    assert p.wait(timeout=10) == -signal.SIGKILL
    eventually(lambda: _gone(p.pid), "the child gone with its fork server")
    server.close()


def _gone(pid: int) -> bool:
    """No process ``pid``, or a zombie (dead, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_an_unknown_module_is_refused_before_anything_starts(fs, tmp_path):
    with pytest.raises(ValueError, match="not emulator.nope"):
        fs.spawn("emulator.nope", [], tmp_path / "p.log")


# ---------------------------------------------------------------- prestarted (the CLI's)

def _cmdline(pid: int) -> str:
    return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()


def test_a_server_started_before_its_run_is_adopted_by_it(tmp_path):
    server = ForkServer(None, {**os.environ, "PROBE": "at-prestart"}, more_entry_points=(PROBE,))
    try:
        assert server.proc.args[3] == prestart.UNADOPTED       # python -m MODULE RUN_DIR FD
        server.adopt(tmp_path, {**os.environ, "PROBE": "the-run's"})
        p = server.spawn(PROBE, [], tmp_path / "p.log")
        assert report(tmp_path / "p.log")["env"] == "the-run's"
        assert p.wait(timeout=10) == 0
        # ps, `clean` and the run's leftover checks see which run it serves
        assert f"emulator.net.forkserver {tmp_path} " in _cmdline(server.proc.pid)
        assert f"fork server for {tmp_path}: adopted" in (tmp_path / "forkserver.log").read_text()
    finally:
        server.close()


def test_a_prestarted_server_that_cannot_import_says_why(tmp_path):
    server = ForkServer(None, dict(os.environ), more_entry_points=("tests.no_such_probe",))
    try:
        server.adopt(tmp_path, dict(os.environ))
        with pytest.raises(OSError, match="did not start(.|\n)*No module named 'tests.no_such_probe'"):
            server.spawn("tests.no_such_probe", [], tmp_path / "p.log")
    finally:
        server.close()


def test_the_prestarted_server_serves_one_run_and_a_dead_one_none(tmp_path, monkeypatch):
    env = dict(os.environ)
    first = prestart.start_server(None, env)
    monkeypatch.setattr(prestart, "_prestarted", first)
    for d in "abc":
        (tmp_path / d).mkdir()
    servers = [forkserver.for_run(tmp_path / "a", env)]
    try:
        assert servers[0].proc is first.proc and prestart._prestarted is None
        assert servers[0].log_path == tmp_path / "a" / "forkserver.log"
        servers.append(forkserver.for_run(tmp_path / "b", env))       # none left: a new one
        assert servers[1].proc is not first.proc
        assert servers[1].log_path == tmp_path / "b" / "forkserver.log"
        dead = prestart.start_server(None, env)
        dead.proc.kill()
        dead.proc.wait()
        monkeypatch.setattr(prestart, "_prestarted", dead)
        servers.append(forkserver.for_run(tmp_path / "c", env))
        assert servers[2].proc is not dead.proc and servers[2].proc.poll() is None
        assert dead.ctl.fileno() == -1           # the dead one's socket closed
    finally:
        for s in servers:
            s.close()


def test_a_refused_run_ends_the_server_it_prestarted(tmp_path):
    """``fabric-emu run`` starts the fork server before it checks its input:
    a refusal ends it (killed and reaped) before its one line."""
    (tmp_path / "bad.yaml").write_text("name: bad\n")
    code = ("import sys, emulator.cli, emulator.prestart as p\n"
            "started = []\n"
            "start = p.start_server\n"
            "p.start_server = lambda *a, **k: started.append(start(*a, **k)) or started[-1]\n"
            "try:\n"
            "    emulator.cli.main(['run', 'bad.yaml', '--out', 'out'])\n"
            "except SystemExit as e:\n"
            "    print(e.code, len(started), p._prestarted, started[0].proc.returncode)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.split() == ["2", "1", "None", str(-signal.SIGKILL)], out.stderr
    assert "bad.yaml" in out.stderr and not (tmp_path / "out").exists()


def test_a_child_profiles_itself_where_FABRIC_EMU_PROFILE_says(tmp_path):
    import pstats
    out = tmp_path / "prof"
    server = ForkServer(tmp_path, {**os.environ, forkserver.PROFILE_ENV: str(out)},
                        more_entry_points=(PROBE,))
    try:
        p = server.spawn(PROBE, ["cfg.json"], tmp_path / "p.log", stdin_pipe=True)
        report(tmp_path / "p.log")
        p.stdin.write(b"3\n")
        p.stdin.close()
        assert p.wait(timeout=10) == 3                 # the status goes through the profiler
        [prof] = out.glob(f"{PROBE}.cfg.{p.pid}.prof")
        assert "main" in {fn for _, _, fn in pstats.Stats(str(prof)).stats}
    finally:
        server.close()
