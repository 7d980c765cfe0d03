"""``fabric-emu clean``: remove what a crashed run left behind.

A run owns three kinds of things: processes (switches, host agents, Mininet's
per-node shells), veth pairs named ``<node>-eth<N>`` and Mininet's
namespaces (which die with their shells). Mininet's own ``mn -c`` does this
too, but also wipes /tmp/*.log and drives Open vSwitch; this does only what
the emulator creates.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time

# Command lines of the processes a run starts.
OWN_PROCESS_PATTERNS = (
    re.compile(r"-m emulator\.dataplane\b"),
    re.compile(r"-m emulator\.agents\.host\b"),
    re.compile(r"\bmininet:"),           # Mininet's node shells: "bash ... mininet:h1"
    re.compile(r"\bsimple_switch_grpc\b.*--device-id"),   # the BMv2 target's switches
)
# Interfaces named like Mininet's: node name, "-eth", number.
FABRIC_IFNAME = re.compile(r"^[a-z][a-z0-9]*-eth\d+$")


def _own_processes(containing: str | None = None) -> list[int]:
    pids = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if containing is not None and containing not in cmdline:
            continue
        if any(p.search(cmdline) for p in OWN_PROCESS_PATTERNS):
            pids.append(int(entry))
    return pids


def kill_fabric_processes(containing: str | None = None, grace_s: float = 2.0) -> int:
    """SIGTERM the processes runs started (only those whose command line
    names ``containing``, e.g. one run's directory), SIGKILL what is left."""
    pids = _own_processes(containing)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _own_processes(containing):
        time.sleep(0.05)
    for pid in _own_processes(containing):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


def fabric_interfaces() -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = []
    for line in out.splitlines():
        name = line.split(":", 2)[1].strip().split("@", 1)[0]
        if FABRIC_IFNAME.match(name):
            names.append(name)
    return names


def clean() -> dict[str, int]:
    """Remove leftover processes and interfaces; returns what was removed."""
    killed = kill_fabric_processes()
    removed = 0
    for name in fabric_interfaces():
        # Deleting one end of a veth removes its peer too: it may be gone already.
        if subprocess.run(["ip", "link", "del", name], capture_output=True).returncode == 0:
            removed += 1
    return {"processes": killed, "interfaces": removed}
