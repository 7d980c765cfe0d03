"""The BMv2 target: a Mininet switch running ``simple_switch_grpc``.

``Bmv2Switch`` starts one ``simple_switch_grpc`` per fabric switch on its veth
ports, with 8 priority queues per port, its own device id, P4Runtime (gRPC)
on a 127.0.0.1 port, and the Thrift runtime on another port (BMv2's Thrift
server binds every address; nothing else on this machine is reachable, and
the lab VM is private). It starts without a program (``--no-p4``): the
controller pushes fabric.p4's P4Info and JSON with
SetForwardingPipelineConfig, as for any P4Runtime device.

BMv2 has no link rate: its egress queues drain as fast as the process runs
unless each is rate-limited. ``queue_commands`` sets every (port, priority)
queue to the port's dilated link rate and gives it a depth, over Thrift
(``simple_switch_CLI``); P4Runtime has no call for either. BMv2 counts queue
rate in packets per second and depth in packets, so both are converted
from bytes with the MTU-sized RoCE frame: a smaller packet (an ACK, a CNP)
takes a full frame's slot.
"""
from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from mininet.node import Switch

from emulator.errors import EnvironmentProblem, FabricEmuError
from emulator.wire import WIRE_OVERHEAD_BYTES
from emulator.lifeline import set_pdeathsig
from emulator.net.nodes import READY_TIMEOUT_S, StartedSideBySide, stop_process, wait_for_tcp
from emulator.rundir import RawDir
from emulator.p4.build import compile_unavailable_reason

SWITCH_BINARY = "simple_switch_grpc"
CLI_BINARY = "simple_switch_CLI"
SYSTEM_PYTHON = "/usr/bin/python3"   # Debian's: python3-thrift is its package
CPU_PORT = 255                 # fabric.p4's CPU_PORT
NUM_PRIORITIES = 8
CLI_TIMEOUT_S = 60.0
# Lossless queues on BMv2 hold this many switch buffers (see queue_commands).
LOSSLESS_DEPTH_FACTOR = 8


def bmv2_unavailable_reason() -> str | None:
    """Why the BMv2 target cannot run here (None: it can)."""
    if shutil.which(SWITCH_BINARY) is None:
        return (f"{SWITCH_BINARY} is not installed (BMv2 comes with the Vagrant lab: "
                f"p4lang's packaged releases); the embedded target runs everywhere")
    if shutil.which(CLI_BINARY) is None:
        return f"{CLI_BINARY} is not installed next to {SWITCH_BINARY} (BMv2's Thrift CLI sets queue rates)"
    if _cli_env().get("_missing"):
        return _cli_env()["_missing"]
    return compile_unavailable_reason()


@functools.lru_cache(maxsize=1)
def _cli_env_cached() -> tuple:
    return tuple(sorted(_probe_cli_env().items()))


def _cli_env() -> dict:
    """Environment of ``simple_switch_CLI``; its Python is ``_python``."""
    return dict(_cli_env_cached())


def _cli_interpreters() -> list[str]:
    """Pythons that may run ``simple_switch_CLI``, in order: its ``#!`` line's
    (an ``env python3`` line means the first python3 on PATH, which may be a
    pyenv or conda one without Thrift), then the system's python3, which sees
    Debian's python3-thrift. Never this venv's: it sees only its own packages."""
    found = []
    path = shutil.which(CLI_BINARY)
    try:
        with open(path or "", "rb") as f:
            first = f.readline(256).decode("utf-8", "replace")
    except OSError:
        first = ""
    if first.startswith("#!"):
        words = first[2:].split()
        if words and words[0].endswith("/env") and len(words) > 1:
            found.append(shutil.which(words[1]))
        elif words:
            found.append(words[0])
    found.append(SYSTEM_PYTHON)
    return [p for i, p in enumerate(found) if p and p not in found[:i]]


def _probe_cli_env() -> dict:
    """Environment in which ``simple_switch_CLI`` finds its Python modules,
    and the Python (``_python``) that imports them.

    The CLI needs Apache Thrift's Python package and BMv2's generated
    ``bm_runtime``/``sswitch_runtime``; a packaged BMv2 installs them into the
    system's dist-packages, a source build under ``<prefix>/lib/python3*/``.
    """
    env = dict(os.environ)
    prefix = Path(shutil.which(SWITCH_BINARY) or "/usr/bin/x").resolve().parent.parent
    extra = sorted(glob.glob(str(prefix / "lib" / "python3*" / "site-packages")))
    if extra:
        env["PYTHONPATH"] = os.pathsep.join([*extra, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    errors = []
    for python in _cli_interpreters():
        probe = subprocess.run([python, "-c", "import thrift, sswitch_runtime"], env=env,
                               capture_output=True, text=True)
        if probe.returncode == 0:
            env["_python"] = python
            return env
        last = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "thrift"
        errors.append(f"{python}: {last}")
    env["_missing"] = (f"BMv2's Thrift CLI cannot import its modules ({'; '.join(errors)}): "
                       "apt-get install python3-thrift")
    return env


def queue_rate_pps(rate_bps: int, mtu_frame_bytes: int) -> int:
    """BMv2 queue rate (packets/s) for a port of ``rate_bps`` (already dilated)."""
    return max(1, round(rate_bps / ((mtu_frame_bytes + WIRE_OVERHEAD_BYTES) * 8)))


def queue_depth_packets(buffer_bytes: int, mtu_frame_bytes: int) -> int:
    """BMv2 queue depth (packets) holding ``buffer_bytes`` of MTU-sized frames."""
    return max(1, buffer_bytes // mtu_frame_bytes)


def queue_commands(port_links: dict[int, tuple[int, int]], mtu_frame_bytes: int,
                   buffer_bytes: int, lossless_priorities: tuple[int, ...] = ()) -> list[str]:
    """``simple_switch_CLI`` commands: every (port, priority) queue at its
    port's rate, each as deep as the switch buffer (BMv2 has no shared
    buffer), the lossless priorities' LOSSLESS_DEPTH_FACTOR times deeper.

    Why deeper: a BMv2 switch cannot stop a paused queue, so fabric.p4
    relays the pause to the senders and what the upstream hops had queued
    still drains into the congested queue (docs/lossless.md, "BMv2 target").
    Its depth stands for the buffer the upstream hops would have held.
    """
    depth = queue_depth_packets(buffer_bytes, mtu_frame_bytes)
    cmds = []
    for port_no, (rate_bps, _delay_ns) in sorted(port_links.items()):
        pps = queue_rate_pps(rate_bps, mtu_frame_bytes)
        for prio in range(NUM_PRIORITIES):
            deep = depth * (LOSSLESS_DEPTH_FACTOR if prio in lossless_priorities else 1)
            cmds.append(f"set_queue_rate {pps} {port_no} {prio}")
            cmds.append(f"set_queue_depth {deep} {port_no} {prio}")
    return cmds


def run_cli(thrift_port: int, commands: list[str], log: Path) -> str:
    """Run commands through BMv2's Thrift CLI; raise on any error it prints."""
    env = _cli_env()
    if env.get("_missing"):
        raise EnvironmentProblem(env["_missing"])
    env.pop("_missing", None)
    res = subprocess.run([env.pop("_python"), shutil.which(CLI_BINARY), "--thrift-port", str(thrift_port)],
                         input="\n".join(commands) + "\n", capture_output=True, text=True,
                         env=env, timeout=CLI_TIMEOUT_S)
    with open(log, "a") as f:
        f.write(f"$ {CLI_BINARY} --thrift-port {thrift_port} < {len(commands)} commands\n")
        f.write(res.stdout[-4000:] + res.stderr[-4000:])
    bad = [ln for ln in (res.stdout + res.stderr).splitlines()
           if "Error" in ln or "Invalid" in ln or "Traceback" in ln]
    if res.returncode != 0 or bad:
        raise FabricEmuError(f"{CLI_BINARY} on Thrift port {thrift_port} failed: "
                             f"{bad[0] if bad else res.stderr.strip()[-300:]} (see {log})")
    return res.stdout


class Bmv2Switch(StartedSideBySide, Switch):
    """A fabric switch running fabric.p4 on BMv2's simple_switch_grpc."""

    def __init__(self, name, device_id: int, grpc_port: int, thrift_port: int, run_dir: str,
                 port_links: dict, options: dict, **params):
        """port_links: port_no -> (rate_bps, delay_ns), dilated; options: buffer_bytes,
        mtu_frame_bytes, lossless_priorities, pcap, log_level (BMv2's; default warn)."""
        super().__init__(name, dpid=f"{device_id:x}", **params)
        self.device_id = device_id
        self.grpc_port = grpc_port
        self.thrift_port = thrift_port
        self.run_dir = Path(run_dir)
        self.port_links = port_links
        self.options = options
        self.proc: subprocess.Popen | None = None
        self.log_path = RawDir(run_dir).process_log(name)

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def command(self) -> list[str]:
        cmd = [shutil.which(SWITCH_BINARY) or SWITCH_BINARY, "--device-id", str(self.device_id),
               "--thrift-port", str(self.thrift_port), "--no-p4",
               "--log-file", str(RawDir(self.run_dir).bmv2_log(self.name)),
               "--log-level", self.options.get("log_level", "warn"), "--log-flush"]
        for port_no, intf in sorted(self.intfs.items()):
            if intf.name != "lo":
                cmd += ["-i", f"{port_no}@{intf.name}"]
        if self.options.get("pcap"):
            # BMv2 writes RUN/<ifname>_in.pcap and RUN/<ifname>_out.pcap.
            cmd += ["--pcap", str(self.run_dir)]
        cmd += ["--", "--grpc-server-addr", self.grpc_address, "--cpu-port", str(CPU_PORT),
                "--priority-queues", str(NUM_PRIORITIES)]
        return cmd

    def start(self, controllers) -> None:
        with open(self.log_path, "w") as log:
            log.write(" ".join(self.command()) + "\n")
            log.flush()
            # Not our program: it gets PR_SET_PDEATHSIG before exec, to die with the runner.
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, preexec_fn=set_pdeathsig)

    def wait_started(self) -> None:
        what = f"switch {self.name} ({SWITCH_BINARY})"
        wait_for_tcp(self.grpc_port, self.proc, READY_TIMEOUT_S, what, self.log_path)
        try:
            wait_for_tcp(self.thrift_port, self.proc, 5.0, what, self.log_path)
        except FabricEmuError:
            raise EnvironmentProblem(f"{SWITCH_BINARY} did not open its Thrift port {self.thrift_port}: "
                                     f"it was built without Thrift (queue rates need it; see {self.log_path})") from None
        run_cli(self.thrift_port, queue_commands(
            self.port_links, self.options["mtu_frame_bytes"], self.options["buffer_bytes"],
            tuple(self.options.get("lossless_priorities", ()))), self.log_path)

    def stop(self, deleteIntfs=True) -> None:
        stop_process(self.proc)
        self.proc = None
        super().stop(deleteIntfs)
