"""``fabric-emu doctor``: does this machine have what the emulator needs?

One ``Finding`` per part, in the order a user fixes them: the venv's own
packages (never Debian's shadowing them), Mininet, tshark, then the BMv2
target's toolchain: p4c (``p4c-bm2-ss``) and its version, BMv2's
``simple_switch_grpc`` (built with PI, else it would not exist) and its
Thrift CLI, whether p4c's P4Info of fabric.p4 is the committed contract,
and whether ``simple_switch_grpc`` starts and takes fabric.p4's pipeline
over P4Runtime. The embedded target needs none of the BMv2 parts: without
them the BMv2 tests skip, which is a finding (``absent``), not a problem,
unless ``require=("bmv2",)`` (the lab's provisioning asks for it).

    findings = check()                    # list[Finding]
    print("\\n".join(f.line() for f in findings))
    for f in iter_check(): ...            # the same, each as its check ends
"""
from __future__ import annotations

# Deferred imports: each check imports what it probes: a machine missing a
# part still gets every other finding.

import importlib.metadata as md
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

OK, ABSENT, PROBLEM = "ok", "absent", "problem"
DIST = "ai-fabric-emulator"
PIPELINE_TIMEOUT_S = 20.0
PROBE_MAC = "02:00:00:00:00:fe"      # the my_station entry the pipeline check writes


@dataclass(frozen=True)
class Finding:
    part: str
    status: str          # OK | ABSENT | PROBLEM
    detail: str

    def line(self) -> str:
        return f"{self.status:<8} {self.part}: {self.detail}"


def _version_line(cmd: list[str]) -> str:
    """The first line of ``cmd``'s output with a dotted version number in it
    (p4c-bm2-ss prints its own name first), else its first line."""
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"({type(e).__name__})"
    out = [line.strip() for line in (res.stdout or res.stderr).strip().splitlines()]
    named = [line for line in out if re.search(r"\d+\.\d+", line)]
    return (named or out or ["(no version printed)"])[0]


# ---------------------------------------------------------------- Python side

def check_packages(requirements=None, prefix: str | None = None) -> list[Finding]:
    """Every requirement of the project (default: its installed metadata's) is
    installed under ``prefix`` (default: this interpreter's environment) at a
    version it asks for: Debian's python3-scapy 2.5 or python3-grpcio must not
    stand in, they would be found outside the venv."""
    from packaging.requirements import Requirement

    prefix = prefix or sys.prefix
    if requirements is None:
        try:
            requirements = [Requirement(r) for r in (md.requires(DIST) or [])]
        except md.PackageNotFoundError:
            return [Finding("venv", PROBLEM, f"{DIST} is not installed in {prefix}: run 'make setup'")]
    found, problems = [], []
    for req in requirements:
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            problems.append(f"{req.name} missing (wants {req})")
            continue
        if dist.version not in req.specifier:
            problems.append(f"{req.name} {dist.version} does not satisfy {req}")
            continue
        where = Path(dist.locate_file("")).resolve()
        if not where.is_relative_to(Path(prefix).resolve()):
            problems.append(f"{req.name} {dist.version} comes from {where}, outside the venv {prefix}")
            continue
        found.append(f"{req.name} {dist.version}")
    if problems:
        return [Finding("venv", PROBLEM, p) for p in problems]
    return [Finding("venv", OK, f"{prefix}: python {sys.version.split()[0]}, "
                                 + ", ".join(sorted(found, key=str.lower)))]


def check_bindings() -> Finding:
    """P4Runtime's and gNMI's Python bindings: generated from proto/
    (``emulator.p4.bindings``) into this venv, up to date, on protobuf's C runtime."""
    from emulator.p4.bindings import FAMILIES, installed_digest, proto_digest, site_packages
    from google.protobuf.internal import api_implementation
    for family in FAMILIES:
        stamp = installed_digest(site_packages(), family)
        if stamp is None:
            return Finding("p4runtime", PROBLEM, f"{family.title} bindings not generated: run "
                                                 "make setup (python -m emulator.p4.bindings)")
        if stamp != proto_digest(family=family):
            return Finding("p4runtime", PROBLEM, f"{family.title} bindings older than proto/: run "
                                                 "make setup (python -m emulator.p4.bindings)")
    titles = " and ".join(f.title for f in FAMILIES)
    return Finding("p4runtime", OK, f"bindings of proto/ ({titles}), protobuf "
                                    f"{api_implementation.Type()} runtime")


def check_mininet() -> Finding:
    from emulator.net.environment import environment_problem
    problem = environment_problem()
    if problem:
        return Finding("mininet", PROBLEM, problem)
    import mininet.net
    return Finding("mininet", OK, f"{getattr(mininet.net, 'VERSION', '?')} "
                                  f"({Path(mininet.net.__file__).resolve().parent})")


def check_tshark() -> Finding:
    if shutil.which("tshark") is None:
        return Finding("tshark", ABSENT, "not installed (apt-get install tshark): pcaps are still "
                                         "written; the dissection tests skip")
    return Finding("tshark", OK, _version_line(["tshark", "--version"]))


# ---------------------------------------------------------------- BMv2 side

def check_p4c() -> Finding:
    from emulator.p4.build import p4c_path
    path = p4c_path()
    if path is None:
        return Finding("p4c", ABSENT, "p4c-bm2-ss is not installed (the Vagrant lab has it): "
                                      "the BMv2 target cannot compile fabric.p4")
    return Finding("p4c", OK, f"{_version_line([path, '--version'])} ({path})")


def check_bmv2() -> Finding:
    from emulator.net.bmv2 import CLI_BINARY, SWITCH_BINARY, bmv2_unavailable_reason
    path = shutil.which(SWITCH_BINARY)
    if path is None:
        return Finding("bmv2", ABSENT, f"{SWITCH_BINARY} is not installed (the Vagrant lab has it): "
                                       f"the BMv2 tests skip")
    reason = bmv2_unavailable_reason()
    if reason:
        from emulator.p4.build import compile_unavailable_reason
        if reason == compile_unavailable_reason():    # installed, but p4c (absent above) is not
            return Finding("bmv2", ABSENT, f"{reason}: the BMv2 tests skip")
        return Finding("bmv2", PROBLEM, reason)
    return Finding("bmv2", OK, f"{SWITCH_BINARY} {_version_line([path, '--version'])} with PI "
                               f"(P4Runtime) and Thrift ({CLI_BINARY} imports its modules)")


def check_contract() -> Finding:
    """p4c's P4Info of fabric.p4 against the committed contract (compiles if stale)."""
    from emulator.errors import FabricEmuError
    from emulator.p4.build import bmv2_json
    try:
        out = bmv2_json()
    except FabricEmuError as e:
        return Finding("contract", PROBLEM, str(e))
    return Finding("contract", OK, f"p4c's P4Info of fabric.p4 matches the committed contract ({out})")


def check_pipeline() -> Finding:
    """Start ``simple_switch_grpc`` without ports on 127.0.0.1, push fabric.p4's
    pipeline over P4Runtime, read it back, stop the switch."""
    from emulator.control.p4rt_client import P4RuntimeError, SwitchConnection
    from emulator.errors import FabricEmuError
    from emulator.net.bmv2 import SWITCH_BINARY
    from emulator.lifeline import set_pdeathsig
    from emulator.net.nodes import free_tcp_ports, stop_process, wait_for_tcp
    from emulator.p4.build import bmv2_json
    from emulator.p4.p4info import P4Info

    grpc_port, thrift_port = free_tcp_ports(2)
    with tempfile.TemporaryDirectory(prefix="fabric-emu-doctor-") as tmp:
        log_path = Path(tmp) / "bmv2.log"
        cmd = [shutil.which(SWITCH_BINARY) or SWITCH_BINARY, "--device-id", "1", "--no-p4",
               "--thrift-port", str(thrift_port), "--",
               "--grpc-server-addr", f"127.0.0.1:{grpc_port}"]
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, preexec_fn=set_pdeathsig)
        try:
            wait_for_tcp(grpc_port, proc, PIPELINE_TIMEOUT_S, SWITCH_BINARY, log_path)
            contract = P4Info.load()
            with SwitchConnection(f"127.0.0.1:{grpc_port}", device_id=1) as conn:
                conn.set_pipeline(contract, device_config=bmv2_json().read_bytes())
                got = conn.get_pipeline()       # ForwardingPipelineConfig, or None if unset
                # One entry written and read back: the program's tables are there.
                conn.insert([conn.codec.table_entry("my_station", {"eth_dst": PROBE_MAC}, "NoAction")])
                entries = conn.read_table_entries("my_station")
            if got is None:
                return Finding("pipeline", PROBLEM, f"{SWITCH_BINARY} accepted fabric.p4's pipeline "
                                                    f"but reports none set")
            diffs = contract.differences(got.p4info)
            if diffs:
                return Finding("pipeline", PROBLEM, f"{SWITCH_BINARY} took fabric.p4 but reads back a "
                                                    f"different P4Info: {diffs[0]}")
            if len(entries) != 1:
                return Finding("pipeline", PROBLEM, f"{SWITCH_BINARY} took fabric.p4 but read back "
                                                    f"{len(entries)} my_station entries after writing 1")
        except FabricEmuError as e:               # did not start: the log's path is in the message
            return Finding("pipeline", PROBLEM, f"{SWITCH_BINARY} did not start: {str(e).splitlines()[0]}")
        except (P4RuntimeError, OSError) as e:
            return Finding("pipeline", PROBLEM, f"{SWITCH_BINARY} did not take fabric.p4's "
                                                f"pipeline: {e} (its log ends: {_tail(log_path)})")
        finally:
            stop_process(proc)
    return Finding("pipeline", OK, f"{SWITCH_BINARY} started, took fabric.p4's pipeline over "
                                   f"P4Runtime and a table entry")


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "none"
    return lines[-1] if lines else "empty"


def _guarded(part: str, check_fn, *args) -> list[Finding]:
    """A check that fails in a way it did not foresee is a problem of its part,
    named with the exception, never a traceback that hides the other parts."""
    try:
        out = check_fn(*args)
    except Exception as e:                       # noqa: BLE001 -- reported, not swallowed
        return [Finding(part, PROBLEM, f"the check itself failed: {type(e).__name__}: {e}")]
    return out if isinstance(out, list) else [out]


def iter_check(require: tuple[str, ...] = ()):
    """Every finding, in order, each as soon as its check ends (the pipeline
    check takes seconds). With ``"bmv2"`` in ``require`` a missing BMv2
    toolchain is a problem, not an absence."""
    def required(f: Finding) -> Finding:
        if "bmv2" in require and f.status == ABSENT:
            return Finding(f.part, PROBLEM, f.detail)
        return f

    yield from _guarded("venv", check_packages)
    yield from _guarded("p4runtime", check_bindings)
    yield from _guarded("mininet", check_mininet)
    yield from _guarded("tshark", check_tshark)
    bmv2 = [required(f) for part, fn in (("p4c", check_p4c), ("bmv2", check_bmv2))
            for f in _guarded(part, fn)]
    yield from bmv2
    if all(f.status == OK for f in bmv2):
        (contract,) = _guarded("contract", check_contract)
        yield contract
        if contract.status == OK:
            yield from _guarded("pipeline", check_pipeline)


def check(require: tuple[str, ...] = ()) -> list[Finding]:
    return list(iter_check(require))


def exit_status(findings: list[Finding]) -> int:
    return 1 if any(f.status == PROBLEM for f in findings) else 0

