"""Files the emulator must refuse, each in one line with exit status 2, by
``fabric-emu validate`` and ``fabric-emu run`` alike (``tests/unit/test_refusals.py``,
``tests/integration/test_refusals.py``: most cases in a few processes,
``tests/refusal_driver.py``).

Reader cases are files that once hung, exhausted or crashed the reader (a
50 MB file, /dev/zero, a FIFO, deep nesting, aliases repeating themselves);
the rest were read, said valid, and could not run (an infinite dilation,
thresholds out of order, a workload without GPUs, a sweep of nothing)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from emulator.schema.reading import MAX_CONFIG_BYTES_ENV
from tests.conftest import REPO

CLOS = ("name: t\nclos: {spines: 1, leaves: 2, hosts_per_leaf: 2,\n"
        "       host_link: {rate_gbps: 100, delay_us: 1}, fabric_link: {rate_gbps: 100, delay_us: 1}}\n")
ONE_GPU = ("name: one\nservers: {count: 1, gpus_per_server: 1, nic_link: {rate_gbps: 100, delay_us: 1}}\n"
           "rail_optimized: {spines: 1, fabric_link: {rate_gbps: 100, delay_us: 1}}\n")
HEAD = "name: bad\ntopology: topo.yaml\n"
EXP = HEAD + "traffic: [{pattern: all-to-all, size_bytes: 1000}]\n"
FLOW = "  - {src: h1, dst: h4, size_bytes: 1000}\n"
WORKLOAD = "workload: {tests: [{collective: all_reduce, sizes: [65536]}]}\n"


def _laughs() -> str:
    """Ten aliases of ten aliases ... nine deep: 10**9 values in 600 bytes."""
    out = "description: [&a0 [x, x, x, x, x, x, x, x, x, x]"
    for i in range(1, 10):
        out += f", &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]"
    return EXP + out + "]\n"


# name -> (files: name -> text, or ("link", target) / ("fifo",) / ("socket",) / ("sparse", bytes);
#          extra CLI arguments; what the one line names; a reader case (refused within 1 s))
CASES = {
    # the reader
    "50-mb-file": ({"exp.yaml": ("sparse", 50 << 20)}, [], ["exp.yaml", "52,428,800 bytes", "1,048,576",
                                                            MAX_CONFIG_BYTES_ENV], True),
    "400k-flows": ({"exp.yaml": HEAD + "traffic:\n" + FLOW * 400_000}, [],
                   ["exp.yaml", "16,400,0", "more than the limit"], True),
    "dev-zero": ({"exp.yaml": ("link", "/dev/zero")}, [], ["exp.yaml", "character device (/dev/zero)"], True),
    "dev-urandom": ({"exp.yaml": ("link", "/dev/urandom")}, [], ["exp.yaml", "character device"], True),
    "fifo": ({"exp.yaml": ("fifo",)}, [], ["exp.yaml", "is a FIFO (named pipe), not a regular file"], True),
    "socket": ({"exp.yaml": ("socket",)}, [], ["exp.yaml", "is a socket"], True),
    "directory": ({"exp.yaml": ("dir",)}, [], ["exp.yaml", "is a directory"], True),
    "topology-dev-zero": ({"exp.yaml": EXP, "topo.yaml": ("link", "/dev/zero")}, [],
                          ["exp.yaml: topology: ", "topo.yaml", "character device (/dev/zero)"], True),
    "nested-100": ({"exp.yaml": EXP + "description: " + "[" * 100 + "]" * 100 + "\n"}, [],
                   ["exp.yaml: line 4: ", "nested more than 64 levels"], True),
    "nested-100000": ({"exp.yaml": "name: " + "[" * 100_000 + "]" * 100_000 + "\n"}, [],
                      ["exp.yaml: line 1: ", "nested more than 64 levels"], True),
    "billion-laughs": ({"exp.yaml": _laughs()}, [], ["exp.yaml: line 4: ", "more than 50,000 values"], True),
    "aliased-flows": ({"exp.yaml": HEAD + "traffic: [&f {src: h1, dst: h4, size_bytes: 1000}"
                                   + ", *f" * 200_000 + "]\n"}, [],
                      ["exp.yaml: line 3: ", "more than 50,000 values"], True),
    "set-nested": ({"exp.yaml": EXP}, ["--set", "description=" + "[" * 1000 + "]" * 1000],
                   ["--set: description: ", "is not YAML", "nested more than 64 levels"], True),
    # the schema
    "dilation-inf": ({"exp.yaml": EXP + "dilation: .inf\n"}, [], ["exp.yaml: dilation: ", "(got inf)"], False),
    "dilation-nan": ({"exp.yaml": EXP + "dilation: .nan\n"}, [], ["exp.yaml: dilation: ", "(got nan)"], False),
    "rto-inf": ({"exp.yaml": EXP + "nic: {rto_us: .inf}\n"}, [],
                ["exp.yaml: nic.rto_us: must be a finite number"], False),
    "rate-inf": ({"exp.yaml": EXP, "topo.yaml": CLOS.replace("rate_gbps: 100,", "rate_gbps: .inf,", 1)},
                 [], ["topo.yaml: clos.host_link.rate_gbps: must be a finite number"], False),
    "name-10000": ({"exp.yaml": EXP.replace("name: bad", "name: " + "a" * 10_000)}, [],
                   ["exp.yaml: name: is 10,000 characters long: at most 63"], False),
    "name-dotdot": ({"exp.yaml": EXP.replace("name: bad", "name: '..'")}, [],
                    ["exp.yaml: name: '..' must match"], False),
    "name-slash": ({"exp.yaml": EXP.replace("name: bad", "name: a/b")}, [],
                   ["exp.yaml: name: 'a/b' must match"], False),
    "ecn-kmin-above-kmax": ({"exp.yaml": EXP + "qos: {ecn: {kmin_bytes: 300000, kmax_bytes: 200000}}\n"}, [],
                            ["exp.yaml: qos.ecn.kmin_bytes: must be <= kmax_bytes (200000)"], False),
    "ecn-kmin-above-buffer": ({"exp.yaml": EXP + "switch: {buffer_bytes: 100000}\n"
                                                 "qos: {ecn: {kmin_bytes: 150000, kmax_bytes: 200000}}\n"},
                              [], ["exp.yaml: qos.ecn.kmin_bytes: 150000 is not below switch.buffer_bytes"],
                              False),
    "pfc-xoff-above-buffer": ({"exp.yaml": EXP + "switch: {buffer_bytes: 100000}\n"
                                                 "qos: {pfc: {xoff_bytes: 200000}}\n"}, [],
                              ["exp.yaml: qos.pfc.xoff_bytes: 200000 is above switch.buffer_bytes"], False),
    "pfc-xon-above-xoff": ({"exp.yaml": EXP + "qos: {pfc: {xoff_bytes: 20000, xon_bytes: 30000}}\n"}, [],
                           ["exp.yaml: qos.pfc.xon_bytes: must be below xoff_bytes (20000)"], False),
    "pfc-default-xon": ({"exp.yaml": EXP + "qos: {pfc: {xoff_bytes: 500}}\n"}, [],
                        ["exp.yaml: qos.pfc.xon_bytes: the default", "not below xoff_bytes (500)"], False),
    "pfc-headroom": ({"exp.yaml": EXP + "switch: {buffer_bytes: 100000}\n"
                                        "qos: {pfc: {headroom_bytes: 30000}}\n"}, [],
                     ["exp.yaml: qos.pfc.headroom_bytes: 30000 on each of a switch's 3 ports"], False),
    "set-xoff-above-buffer": ({"exp.yaml": EXP}, ["--set", "qos.pfc.xoff_bytes=5000000"],
                              ["exp.yaml: qos.pfc.xoff_bytes: 5000000 is above"], False),
    "workload-one-gpu": ({"exp.yaml": HEAD + WORKLOAD, "topo.yaml": ONE_GPU}, [],
                         ["exp.yaml: workload: 1 server x 1 GPU = 1 rank"], False),
    "workload-no-gpu-servers": ({"exp.yaml": HEAD + WORKLOAD}, [],
                                ["exp.yaml: workload: needs GPU servers: topology 't' has none"], False),
    "sweep-no-such-parameter": ({"exp.yaml": EXP + "sweep: {parameter: qos.ecn.nosuch, values: [1, 2]}\n"},
                                [], ["exp.yaml: sweep.parameter: qos.ecn.nosuch: unknown field"], False),
    "sweep-no-such-section": ({"exp.yaml": EXP + "sweep: {parameter: nosuch.x, values: [1]}\n"},
                              [], ["exp.yaml: sweep.parameter: nosuch: unknown field"], False),
    "sweep-wrong-type": ({"exp.yaml": EXP + "sweep: {parameter: qos.ecn.kmax_bytes, values: [20000, lots]}\n"},
                         [], ["exp.yaml: sweep.values[1]: qos.ecn.kmax_bytes='lots': ", "must be an integer"],
                         False),
    "sweep-value-refused": ({"exp.yaml": EXP + "sweep: {parameter: dilation, values: [1000, .inf]}\n"},
                            [], ["exp.yaml: sweep.values[1]: ", "(got inf)"], False),
    # the clock: time: virtual where it cannot be kept (emulator/experiment/time_mode.py)
    "time-bogus": ({"exp.yaml": EXP + "time: wall\n"}, [],
                   ["exp.yaml: time: must be one of auto, virtual or dilated (got 'wall')"], False),
    "time-virtual-bmv2": ({"exp.yaml": EXP + "time: virtual\n"}, ["--target", "bmv2"],
                          ["exp.yaml: time: virtual is not possible with target bmv2",
                           "cannot be held"], False),
    # scripted link faults (emulator/schema/faults.py, emulator/experiment/faults.py)
    "fault-kind": ({"exp.yaml": EXP + "faults: [{kind: cable_cut, link: 'h1:leaf1', at_us: 1}]\n"}, [],
                   ["exp.yaml: faults[0].kind: must be one of link_down, ", "(got 'cable_cut')"], False),
    "fault-no-link": ({"exp.yaml": EXP + "faults: [{kind: link_down, link: 'h1:spine1', at_us: 1}]\n"}, [],
                      ["exp.yaml: faults[0].link: no link joins h1 and spine1"], False),
    "fault-no-node": ({"exp.yaml": EXP + "faults: [{kind: link_down, link: 'h1:leaf9', at_us: 1}]\n"}, [],
                      ["exp.yaml: faults[0].link: 'leaf9' is not a node"], False),
    "fault-link-form": ({"exp.yaml": EXP + "faults: [{kind: link_down, link: h1, at_us: 1}]\n"}, [],
                        ["exp.yaml: faults[0].link: must name the two nodes a link joins, as 'A:B'"], False),
    "fault-negative-time": ({"exp.yaml": EXP + "faults: [{kind: link_down, link: 'h1:leaf1', at_us: -1}]\n"},
                            [], ["exp.yaml: faults[0].at_us: must be >= 0"], False),
    "fault-up-not-down": ({"exp.yaml": EXP + "faults: [{kind: link_down, link: 'h1:leaf1', at_us: 5},\n"
                                             "  {kind: link_up, link: 'h1:leaf1', at_us: 3}]\n"}, [],
                          ["exp.yaml: faults[1].at_us: h1->leaf1 is not down at 3 us"], False),
    "fault-loss-rate": ({"exp.yaml": EXP + "faults: [{kind: random_loss, link: 'h1:leaf1', rate: 1.5}]\n"},
                        [], ["exp.yaml: faults[0].rate: must be <= 1"], False),
    "fault-ber-window": ({"exp.yaml": EXP + "faults: [{kind: bit_errors, link: 'h1:leaf1', ber: 1.0e-6,"
                                            " from_us: 10, until_us: 5}]\n"}, [],
                         ["exp.yaml: faults[0].until_us: must be after from_us (10)"], False),
    "fault-degrade-fraction": ({"exp.yaml": EXP + "faults: [{kind: link_degrade, link: 'h1:leaf1', at_us: 0,"
                                                  " rate_fraction: 0}]\n"}, [],
                               ["exp.yaml: faults[0].rate_fraction: must be > 0"], False),
    "fault-degrade-overlap": ({"exp.yaml": EXP + "faults: [{kind: link_degrade, link: 'h1:leaf1', at_us: 0,"
                                                 " rate_fraction: 0.5, until_us: 10},\n"
                                                 "  {kind: link_degrade, link: 'leaf1:h1', at_us: 5,"
                                                 " rate_fraction: 0.5}]\n"}, [],
                              ["exp.yaml: faults[1].at_us: ", "is degraded then already (faults[0])"], False),
    "fault-flap-form": ({"exp.yaml": EXP + "faults: [{kind: link_flap, link: 'h1:leaf1', at_us: 0, count: 2,"
                                           " down_us: 5}]\n"}, [], ["exp.yaml: faults[0].up_us: required"],
                        False),
    "fault-dilated": ({"exp.yaml": EXP + "time: dilated\nfaults: [{kind: link_down, link: 'h1:leaf1',"
                                         " at_us: 1}]\n"}, [],
                      ["exp.yaml: faults: need the embedded target in virtual time (this slice)"], False),
    "fault-bmv2": ({"exp.yaml": EXP + "faults: [{kind: link_down, link: 'h1:leaf1', at_us: 1},"
                                      " {kind: random_loss, link: 'h1:leaf1', rate: 0.1}]\n"},
                   ["--target", "bmv2"],
                   ["exp.yaml: faults[1].kind: random_loss is not possible on target bmv2: BMv2 has "
                    "no per-frame hook"], False),
    "fault-bmv2-direction": ({"exp.yaml": EXP + "faults: [{kind: link_down, link: 'h1:leaf1', at_us: 1,"
                                                " direction: a_to_b}]\n"}, ["--target", "bmv2"],
                             ["exp.yaml: faults[0].direction: link_down on target bmv2: a veth pair "
                              "goes down and up as a whole"], False),
    "fault-bmv2-host-degrade": ({"exp.yaml": EXP + "faults: [{kind: link_degrade, link: 'h1:leaf1', at_us: 1,"
                                                   " rate_fraction: 0.5}]\n"}, ["--target", "bmv2"],
                                ["exp.yaml: faults[0].direction: link_degrade on target bmv2: h1's NIC "
                                 "sends on it"], False),
    # PFC storms and the PFC watchdog (schema/switch.py, dataplane/pfcwd.py)
    "storm-not-a-host": ({"exp.yaml": EXP + "faults: [{kind: pfc_storm, host: leaf1, at_us: 1}]\n"}, [],
                         ["exp.yaml: faults[0].host: 'leaf1' is not a host of fabric"], False),
    "storm-window": ({"exp.yaml": EXP + "faults: [{kind: pfc_storm, host: h1, at_us: 10, until_us: 5}]\n"},
                     [], ["exp.yaml: faults[0].until_us: must be after at_us (10)"], False),
    "storm-priority": ({"exp.yaml": EXP + "faults: [{kind: pfc_storm, host: h1, priority: 8, at_us: 1}]\n"},
                       [], ["exp.yaml: faults[0].priority: must be <= 7"], False),
    "stall-not-a-host": ({"exp.yaml": EXP + "faults: [{kind: cpu_stall, host: spine1, at_us: 1,"
                                            " duration_us: 5}]\n"}, [],
                         ["exp.yaml: faults[0].host: 'spine1' is not a host of fabric"], False),
    "stall-duration": ({"exp.yaml": EXP + "faults: [{kind: cpu_stall, host: h1, at_us: 1, duration_us: 0}]\n"},
                       [], ["exp.yaml: faults[0].duration_us: must be > 0"], False),
    "pfcwd-action": ({"exp.yaml": EXP + "switch: {pfc_watchdog: {enabled: true, action: alert}}\n"}, [],
                     ["exp.yaml: switch.pfc_watchdog.action: "], False),
    "pfcwd-detection": ({"exp.yaml": EXP + "switch: {pfc_watchdog: {enabled: true, detection_time_us: 0}}\n"},
                        [], ["exp.yaml: switch.pfc_watchdog.detection_time_us: must be > 0"], False),
    "pfcwd-bmv2": ({"exp.yaml": EXP + "switch: {pfc_watchdog: {enabled: true}}\n"}, ["--target", "bmv2"],
                   ["exp.yaml: switch.pfc_watchdog.enabled: is a feature of the embedded target's traffic "
                    "manager"], False),
}


def write_case(d: Path, files: dict) -> None:
    """A case's files in ``d`` (with ``topo.yaml``, a plain CLOS, unless it has its own)."""
    if "topo.yaml" not in files:
        (d / "topo.yaml").write_text(CLOS)
    for name, what in files.items():
        p = d / name
        if isinstance(what, str):
            p.write_text(what)
        elif what[0] == "link":
            p.symlink_to(what[1])
        elif what[0] == "fifo":
            os.mkfifo(p)
        elif what[0] == "dir":
            p.mkdir()
        elif what[0] == "sparse":
            with open(p, "wb") as f:
                f.truncate(what[1])
        elif what[0] == "socket":
            s = socket.socket(socket.AF_UNIX)
            s.bind(str(p))
            s.close()


# A reader that regressed to reading /dev/zero whole stops at this much address
# space, not at the machine's memory. Set by prlimit(1) around the command, not
# by a preexec_fn: Python code in the child between fork and exec, while this
# pytest process has threads (gRPC's, from earlier tests), aborted it at times
# (SIGABRT within 0.05 s, before the CLI ran).
MEMORY_LIMIT_BYTES = 4 << 30
LIMIT_MEMORY = ["prlimit", f"--as={MEMORY_LIMIT_BYTES}", "--"]


PYTHON_M = [sys.executable, "-m", "emulator.cli"]
# the console script beside this interpreter (the venv's), else python -m
CONSOLE_SCRIPT = ([str(Path(sys.executable).with_name("fabric-emu"))]
                  if Path(sys.executable).with_name("fabric-emu").is_file() else PYTHON_M)


def _env() -> dict[str, str]:
    """The commands' environment: this repository's code, the default size limit."""
    env = {k: v for k, v in os.environ.items() if k != MAX_CONFIG_BYTES_ENV}
    return {**env, "PYTHONPATH": str(REPO)}


def cli(args: list[str], cwd: Path, cache: Path, command: list[str] = PYTHON_M
        ) -> tuple[subprocess.CompletedProcess, float]:
    """``fabric-emu ARGS`` (by ``command``) in ``cwd`` (its default results/
    would go there), with the default size limit and its own cache; (result, seconds)."""
    t0 = time.monotonic()
    res = subprocess.run([*LIMIT_MEMORY, *command, *args], cwd=cwd,
                         capture_output=True, text=True, timeout=60,
                         env={**_env(), "XDG_CACHE_HOME": str(cache)})
    return res, time.monotonic() - t0


def start_driver(jobs: list[dict], jobs_file: Path) -> subprocess.Popen:
    """``tests/refusal_driver.py`` running ``jobs`` ({"case", "args", "cwd",
    "cache"}, written to ``jobs_file``) in one process, under ``cli``'s limits
    and environment."""
    jobs_file.write_text(json.dumps(jobs))
    return subprocess.Popen([*LIMIT_MEMORY, sys.executable, "-m", "tests.refusal_driver",
                             str(jobs_file)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())


def driver_results(proc: subprocess.Popen, jobs: list[dict], timeout_s: float) -> dict[str, dict]:
    """Case -> the driver's line for it; a case it gave none (it hung, or the
    driver died) has ``status`` None and an ``error`` saying so."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
        why = f"the driver ended with status {proc.returncode}"
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        why = f"the driver did not end within {timeout_s:.0f} s"
    out = {r["case"]: r for r in map(json.loads, stdout.splitlines())}
    left = [j["case"] for j in jobs if j["case"] not in out]
    for case in left:
        out[case] = {"case": case, "status": None, "stdout": "", "stderr": "", "seconds": None,
                     "error": f"no result: {why}, at case {left[0]!r}; its stderr: {stderr[-2000:]}"}
    return out


def listing(d: Path) -> list[str]:
    """Every path under ``d``, relative: what a refused command must not change."""
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))
