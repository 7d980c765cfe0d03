"""fabric.p4 compiled for BMv2: the JSON that ``simple_switch_grpc`` runs.

The BMv2 target needs p4c's JSON of ``p4src/fabric.p4``. It is built into
``build/`` by ``p4c-bm2-ss`` (``make p4`` does the same) and rebuilt when the
source is newer. The P4Info p4c writes next to it must realize the committed
contract (``p4src/fabric.p4info.txtpb``): the controller and the embedded
target load that file, so a program that drifted from it is refused here,
naming what differs (``contract_differences``). What p4c versions write
differently and nothing uses (``initial_default_action``, ``has_initial_entries``,
annotations, fields newer than our p4runtime protos) is not compared.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from emulator.errors import EnvironmentProblem
from emulator.p4.p4info import DEFAULT_P4INFO, PFC_SESSION_BASE, REPO_ROOT, P4Info

P4_SOURCE = REPO_ROOT / "p4src" / "fabric.p4"
BUILD_DIR = REPO_ROOT / "build"
COMPILE_TIMEOUT_S = 600


def p4c_path() -> str | None:
    return shutil.which("p4c-bm2-ss")


def read_p4info(path: Path) -> p4info_pb2.P4Info:
    """A P4Info p4c wrote, in text format. Fields our p4runtime protos do not know
    (a newer p4c's) are skipped: the contract check compares what targets use."""
    return text_format.Parse(path.read_text(), p4info_pb2.P4Info(), allow_unknown_field=True)


def contract_differences(generated: p4info_pb2.P4Info, source: Path = P4_SOURCE,
                         contract: Path = DEFAULT_P4INFO) -> list[str]:
    """What p4c's P4Info of ``source`` differs in from the committed contract,
    one line each (empty: it is the contract): ids, names, match fields (widths,
    kinds), actions and params, table sizes, action profiles, counters and
    packet-I/O metadata (``P4Info.differences``), plus the clone sessions the
    controller installs for PFC, which P4Info does not describe: the program's
    ``PFC_SESSION_BASE`` must be ``p4info``'s, which the controller installs."""
    committed = P4Info.load(contract)
    diffs = committed.differences(generated)
    if not any(t.preamble.alias == "pfc_config" for t in committed.proto.tables):
        return diffs          # a program without PFC (p4src/ib.p4) has no clone sessions
    m = re.search(r"^#define PFC_SESSION_BASE (\d+)", source.read_text(), re.M)
    if m is None or int(m[1]) != PFC_SESSION_BASE:
        diffs.append(f"clone sessions: {source.name}'s PFC_SESSION_BASE is "
                     f"{m[1] if m else 'not defined'}, the controller installs {PFC_SESSION_BASE}")
    return diffs


def _json_fresh(build_dir: Path, program: str, contract: Path | None = None) -> bool:
    """Is ``build_dir``'s compiled ``program`` newer than its source and contract?"""
    source = P4_SOURCE.with_name(f"{program}.p4")
    contract = contract or source.with_name(f"{program}.p4info.txtpb")
    out_json = build_dir / f"{program}.json"
    out_p4info = build_dir / f"{program}.p4info.txtpb"
    return (out_json.exists() and out_p4info.exists()
            and all(out_json.stat().st_mtime >= s.stat().st_mtime for s in (source, contract)))


def compile_unavailable_reason(build_dir: Path = BUILD_DIR, program: str = "fabric") -> str | None:
    """Why ``bmv2_json`` could not give ``program``'s JSON here (None: it can):
    no compiled copy as new as the source, and no p4c to compile one."""
    if _json_fresh(build_dir, program) or p4c_path() is not None:
        return None
    return (f"p4c-bm2-ss is not installed and {build_dir / (program + '.json')} is missing or "
            f"older than {program}.p4 (the Vagrant lab has p4c)")


def bmv2_json(build_dir: Path = BUILD_DIR, contract: Path | None = None,
              program: str = "fabric") -> Path:
    """Path of ``p4src/<program>.p4``'s BMv2 JSON (fabric.p4; ib.p4 for the
    InfiniBand switch), compiled now if missing or stale, after checking
    p4c's P4Info against ``contract`` (default: the program's committed
    P4Info; EnvironmentProblem if it differs)."""
    source = P4_SOURCE.with_name(f"{program}.p4")
    contract = contract or source.with_name(f"{program}.p4info.txtpb")   # beside its source
    out_json = build_dir / f"{program}.json"
    out_p4info = build_dir / f"{program}.p4info.txtpb"
    if not _json_fresh(build_dir, program, contract):
        p4c = p4c_path()
        if p4c is None:
            raise EnvironmentProblem(
                f"{out_json} is missing or older than {source.name}, and p4c-bm2-ss is not "
                f"installed to compile it (the Vagrant lab has p4c; or run 'make p4' where it is)")
        build_dir.mkdir(parents=True, exist_ok=True)
        res = subprocess.run([p4c, "--arch", "v1model", "-o", str(out_json),
                              "--p4runtime-files", str(out_p4info), str(source)],
                             capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        if res.returncode != 0:
            first = next((ln for ln in res.stderr.splitlines() if "error" in ln.lower()),
                         res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "no output")
            raise EnvironmentProblem(f"{source}: p4c-bm2-ss failed: {first}")
    diffs = contract_differences(read_p4info(out_p4info), source=source, contract=contract)
    if diffs:
        more = f" (and {len(diffs) - 1} more)" if len(diffs) > 1 else ""
        raise EnvironmentProblem(
            f"{out_p4info}: p4c's P4Info is not the committed contract {contract.name}: "
            f"{diffs[0]}{more} (if the program changed on purpose, check the pinned @ids and "
            f"copy p4c's P4Info over the contract)")
    return out_json
