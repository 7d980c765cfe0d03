"""The committed P4Info is exactly what p4c generates from p4src/fabric.p4.

Runs where p4c is installed (the Vagrant lab; or point P4C_BM2_SS at a
p4c-bm2-ss binary); skips with the reason elsewhere.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

REPO = Path(__file__).resolve().parents[2]
P4C = os.environ.get("P4C_BM2_SS") or shutil.which("p4c-bm2-ss")

pytestmark = pytest.mark.skipif(P4C is None, reason="p4c-bm2-ss is not installed (the Vagrant lab has it; "
                                                    "or set P4C_BM2_SS)")


def test_generated_p4info_equals_the_committed_contract(tmp_path):
    res = subprocess.run([P4C, "--arch", "v1model", "-o", str(tmp_path / "fabric.json"),
                          "--p4runtime-files", str(tmp_path / "fabric.p4info.txtpb"),
                          str(REPO / "p4src/fabric.p4")], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "error" not in res.stderr.lower(), res.stderr
    generated = text_format.Parse((tmp_path / "fabric.p4info.txtpb").read_text(), p4info_pb2.P4Info())
    committed = text_format.Parse((REPO / "p4src/fabric.p4info.txtpb").read_text(), p4info_pb2.P4Info())
    assert generated == committed
    assert (tmp_path / "fabric.json").stat().st_size > 10_000
