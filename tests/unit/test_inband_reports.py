"""The in-band progress reports' processes (``emulator.net.inband``) on
loopback: a reporter sends its agents' progress files, the head counts
them per server, the reporter's last word carries what was written before it
stopped, and a datagram that is not a report is counted apart."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from emulator.net.nodes import free_tcp_ports

PY = [sys.executable, "-m", "emulator.net.inband"]


def _start(args, log):
    return subprocess.Popen([*PY, *args], stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            env={**os.environ})


def _wait_for(text: str, log, proc, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.01)


def test_reports_reach_the_head_and_the_last_one_is_what_was_written(tmp_path):
    (port,) = free_tcp_ports(1)           # free for TCP; the head binds UDP on it
    out = tmp_path / "head.json"
    head = _start(["head", str(port), str(out)], tmp_path / "head.log")
    _wait_for("listening", tmp_path / "head.log", head)
    p1 = tmp_path / "h1.progress.json"
    p1.write_text(json.dumps({"host": "h1", "delivered_bytes": 10, "done": False}))
    rep = _start(["report", f"127.0.0.1:{port}", "server1", "5", str(p1),
                  str(tmp_path / "h9.progress.json")], tmp_path / "rep.log")
    _wait_for("reporting", tmp_path / "rep.log", rep)
    p1.write_text(json.dumps({"host": "h1", "delivered_bytes": 99, "done": True}))
    rep.send_signal(signal.SIGTERM)         # its last report is sent as it stops
    assert rep.wait(10) == 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"not json", ("127.0.0.1", port))
    head.send_signal(signal.SIGTERM)
    assert head.wait(10) == 0
    seen = json.loads(out.read_text())
    assert seen["server1"]["reports"] >= 1 and seen["server1"]["bytes"] > 0
    # the file not (yet) written is left out; the last report is the last write
    assert seen["server1"]["last"] == {"h1": {"host": "h1", "delivered_bytes": 99, "done": True}}
    assert seen["(malformed)"]["reports"] == 1


def test_bad_arguments_are_a_usage_line_and_status_2():
    r = subprocess.run([*PY, "sideways"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "usage:" in r.stderr
