"""fabric.p4 compiled for BMv2: the JSON that ``simple_switch_grpc`` runs.

The BMv2 target needs p4c's JSON of ``p4src/fabric.p4``. It is built into
``build/`` by ``p4c-bm2-ss`` (``make p4`` does the same) and rebuilt when the
source is newer. The P4Info p4c writes next to it must equal the committed
contract (``p4src/fabric.p4info.txtpb``): the controller and the embedded
target load that file, so a program that drifted from it is refused here.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from emulator.errors import EnvironmentProblem
from emulator.p4.p4info import DEFAULT_P4INFO, REPO_ROOT

P4_SOURCE = REPO_ROOT / "p4src" / "fabric.p4"
BUILD_DIR = REPO_ROOT / "build"
COMPILE_TIMEOUT_S = 600


def p4c_path() -> str | None:
    return shutil.which("p4c-bm2-ss")


def _p4info(path: Path) -> p4info_pb2.P4Info:
    return text_format.Parse(path.read_text(), p4info_pb2.P4Info())


def bmv2_json(build_dir: Path = BUILD_DIR) -> Path:
    """Path of fabric.p4's BMv2 JSON, compiled now if missing or stale."""
    out_json = build_dir / "fabric.json"
    out_p4info = build_dir / "fabric.p4info.txtpb"
    sources = [P4_SOURCE, DEFAULT_P4INFO]
    fresh = (out_json.exists() and out_p4info.exists()
             and all(out_json.stat().st_mtime >= s.stat().st_mtime for s in sources))
    if not fresh:
        p4c = p4c_path()
        if p4c is None:
            raise EnvironmentProblem(
                f"{out_json} is missing or older than {P4_SOURCE.name}, and p4c-bm2-ss is not "
                f"installed to compile it (the Vagrant lab has p4c; or run 'make p4' where it is)")
        build_dir.mkdir(parents=True, exist_ok=True)
        res = subprocess.run([p4c, "--arch", "v1model", "-o", str(out_json),
                              "--p4runtime-files", str(out_p4info), str(P4_SOURCE)],
                             capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        if res.returncode != 0:
            first = next((ln for ln in res.stderr.splitlines() if "error" in ln.lower()),
                         res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "no output")
            raise EnvironmentProblem(f"{P4_SOURCE}: p4c-bm2-ss failed: {first}")
    if _p4info(out_p4info) != _p4info(DEFAULT_P4INFO):
        raise EnvironmentProblem(
            f"{out_p4info}: p4c's P4Info differs from the committed contract {DEFAULT_P4INFO} "
            f"(the program changed: copy p4c's P4Info over it after checking the pinned @ids)")
    return out_json
