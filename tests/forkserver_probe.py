"""A process for the fork server's tests (``tests/unit/test_forkserver.py``):
reports what it finds itself to be, then does what its stdin says."""
from __future__ import annotations

import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    me = {"argv": argv, "cmdline": open("/proc/self/cmdline", "rb").read().split(b"\0")[:-1],
          "netns": os.stat("/proc/self/ns/net").st_ino, "sid": os.getsid(0) == os.getpid(),
          "env": os.environ.get("PROBE"), "ppid": os.getppid(),
          "preloaded": [m for m in ("grpc", "emulator.dataplane.p4rt_server") if m in sys.modules]}
    me["cmdline"] = [c.decode() for c in me["cmdline"]]
    print(json.dumps(me), flush=True)
    line = sys.stdin.readline().strip()
    if line == "boom":
        raise RuntimeError("the probe was told to fail")
    if line == "sleep":
        time.sleep(60)
    if line.startswith("exit "):
        raise SystemExit(line[5:])          # a message: status 1
    return int(line or 0)
