"""``fabric-emu clean``: remove what a crashed run left behind.

A run owns three kinds of things: processes (switches, host agents, Mininet's
per-node shells), veth pairs named ``<node>-eth<N>`` and Mininet's
namespaces (which die with their shells). Mininet's own ``mn -c`` does this
too, but also wipes /tmp/*.log and drives Open vSwitch; this does only what
the emulator creates. ``run_processes``, ``kill_processes`` and
``delete_interfaces`` are the pieces scoped to one run, for its teardown
and its watchdog (``emulator.net.watchdog``).
"""
from __future__ import annotations

import glob
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

from emulator.net.idle_cpu import out_of_idle, remove_idle_cgroup

# Command lines of the processes a run starts.
PLOTTER = re.compile(r"-m emulator\.experiment\.plotter\b")
OWN_PROCESS_PATTERNS = (
    re.compile(r"-m emulator\.dataplane\b"),          # one switch, or several (.pack)
    re.compile(r"-m emulator\.ib\.(switch|pack)\b"),   # InfiniBand switches (emulator/ib/switch.py, pack.py)
    re.compile(r"-m emulator\.agents\.(host|pack)\b"),   # one NIC, or several (agents/pack.py)
    re.compile(r"-m emulator\.collectives\.(agent|storage)\b"),   # server agents
    PLOTTER,                                              # the run's plots (experiment/plotter.py)
    re.compile(r"-m emulator\.net\.inband\b"),      # in-band management reports (net/inband.py)
    re.compile(r"-m emulator\.net\.forkserver\b"),   # what forks the above (emulator/net/forkserver.py)
    re.compile(r"-m emulator\.net\.remote_exec\b"),  # what runs them on another server (cluster)
    re.compile(r"^ssh .*-o Tunnel=Ethernet -w 9:9 "),    # a link between servers (cluster)
    re.compile(r"\bmininet:"),           # Mininet's node shells: "bash ... mininet:h1"
    re.compile(r"\bsimple_switch_grpc\b.*--device-id"),   # the BMv2 target's switches
)
# Interfaces named like Mininet's: node name, "-eth", number.
FABRIC_IFNAME = re.compile(r"^[a-z][a-z0-9]*-eth\d+$")


def _cmdlines():
    """(pid, command line) of every process but this one."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        yield int(entry), cmdline


def _own_processes(containing: str | None = None) -> list[int]:
    return [pid for pid, cmdline in _cmdlines()
            if (containing is None or containing in cmdline)
            and any(p.search(cmdline) for p in OWN_PROCESS_PATTERNS)]


def run_processes(run_dir: str, nodes) -> list[int]:
    """One run's processes: switches and agents (their command lines name
    its run directory) and the Mininet shells of its ``nodes``."""
    shells = {f"mininet:{n}" for n in nodes}
    return [pid for pid, cmdline in _cmdlines()
            if (run_dir in cmdline and any(p.search(cmdline) for p in OWN_PROCESS_PATTERNS))
            or (cmdline.split() or [""])[-1] in shells]


def plotter_processes(results_dir: str) -> list[int]:
    """The plotter drawing into ``results_dir`` (its command line names the
    results directory, not the run directory the fabric's teardown clears)."""
    return [pid for pid, cmdline in _cmdlines()
            if PLOTTER.search(cmdline) and (cmdline.split() or [""])[-1] == results_dir]


def kill_processes(find, grace_s: float = 2.0) -> int:
    """SIGTERM the processes ``find()`` lists, SIGKILL those left after
    ``grace_s`` (at once with 0); returns how many there were."""
    pids = find()
    out_of_idle(pids)        # the plotter: its exit must not wait for an idle CPU
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and find():
        time.sleep(0.05)
    for pid in find():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


def kill_fabric_processes(containing: str | None = None, grace_s: float = 2.0) -> int:
    """SIGTERM the processes runs started (only those whose command line
    names ``containing``, e.g. one run's directory), SIGKILL what is left."""
    return kill_processes(lambda: _own_processes(containing), grace_s)


def delete_interfaces(names) -> int:
    """Delete those of ``names`` that exist in this namespace, in one ``ip``
    call; deleting one end of a veth removes its peer (in any namespace)."""
    present = [n for n in names if os.path.exists(f"/sys/class/net/{n}")]
    if present:
        subprocess.run(["ip", "-force", "-batch", "-"], capture_output=True,
                       input="".join(f"link del {n}\n" for n in present), text=True)
    return sum(not os.path.exists(f"/sys/class/net/{n}") for n in present)


def fabric_interfaces() -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = []
    for line in out.splitlines():
        name = line.split(":", 2)[1].strip().split("@", 1)[0]
        if FABRIC_IFNAME.match(name):
            names.append(name)
    return names


def stale_vtime_sockets() -> list[str]:
    """Virtual time's coordinator sockets that nothing listens on: a killed
    runner's own (``emulator.vtime.coordinator``) and, on a cluster's
    server, the end of its forward there (``emulator.net.cluster``). A
    live run's are kept (a connection to it is taken and closed unused)."""
    # deferred: net.cluster brings the schema layer (pydantic): ``fabric-emu clean``
    # and the watchdog's reaper stay light
    from emulator.net.cluster import REMOTE_SOCKET_DIR
    paths = sorted({*glob.glob(f"{REMOTE_SOCKET_DIR}/fabric-emu-vt-*.sock"),
                    *glob.glob(os.path.join(tempfile.gettempdir(), "fabric-emu-vt-*", "coordinator"))})
    stale = []
    for path in paths:
        try:
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                continue
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(path)
        except ConnectionRefusedError:
            stale.append(path)
        except OSError:
            pass
    return stale


def remove_stale_vtime_sockets() -> int:
    """``stale_vtime_sockets`` removed (a coordinator's directory with its socket)."""
    n = 0
    for path in stale_vtime_sockets():
        try:
            os.unlink(path)
            n += 1
            if os.path.basename(path) == "coordinator":
                os.rmdir(os.path.dirname(path))
        except OSError:
            pass
    return n


def clean() -> dict[str, int]:
    """Remove leftover processes and interfaces (and the plotter's idle
    cgroup, ``emulator.net.idle_cpu``, once its processes are gone, and
    virtual time's sockets nothing listens on); returns what was removed."""
    killed = kill_fabric_processes()
    removed = {"processes": killed, "interfaces": delete_interfaces(fabric_interfaces())}
    remove_idle_cgroup()
    removed["sockets"] = remove_stale_vtime_sockets()
    return removed


def main(argv: list[str] | None = None) -> int:
    """``python -m emulator.net.clean RUN_DIR NODES IFNAMES`` (comma-separated):
    one run's part on one server of a cluster, removed by the runner over
    ssh (``emulator.net.cluster``) -- only that run's, never another's."""
    run_dir, nodes, ifnames = (sys.argv[1:] if argv is None else argv)
    kill_processes(lambda: run_processes(run_dir, [n for n in nodes.split(",") if n]))
    delete_interfaces([n for n in ifnames.split(",") if n])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
