"""P4Runtime's and gNMI's Python bindings are generated from the .proto files in
proto/ (``emulator.p4.bindings``), into the venv at setup, and run on
protobuf's C runtime (upb): the ones imported are those, and up to date."""
from __future__ import annotations

import shutil
from pathlib import Path

from google.protobuf.internal import api_implementation

from emulator import doctor
from emulator.p4.bindings import (GNMI, PROTO_DIR, PROTOS, generate, installed_digest,
                                  proto_digest, site_packages)


def test_the_imported_bindings_are_the_generated_ones_on_the_c_runtime():
    import p4.config.v1.p4info_pb2
    import p4.v1.p4runtime_pb2
    import p4.v1.p4runtime_pb2_grpc
    site = site_packages().resolve()
    for mod in (p4.v1.p4runtime_pb2, p4.v1.p4runtime_pb2_grpc, p4.config.v1.p4info_pb2):
        assert Path(mod.__file__).resolve().is_relative_to(site), mod.__file__
    assert installed_digest(site) == proto_digest(), "bindings older than proto/: make setup"
    assert api_implementation.Type() == "upb"
    assert doctor.check_bindings().status == doctor.OK


def test_the_gnmi_bindings_are_generated_too_and_speak_gnmi_0_10_0():
    import gnmi.gnmi_ext_pb2
    import gnmi.gnmi_pb2
    import gnmi.gnmi_pb2_grpc
    site = site_packages().resolve()
    for mod in (gnmi.gnmi_pb2, gnmi.gnmi_pb2_grpc, gnmi.gnmi_ext_pb2):
        assert Path(mod.__file__).resolve().is_relative_to(site), mod.__file__
    assert installed_digest(site, GNMI) == proto_digest(family=GNMI), "make setup"
    opts = gnmi.gnmi_pb2.DESCRIPTOR.GetOptions()
    assert opts.Extensions[gnmi.gnmi_pb2.gnmi_service] == "0.10.0"
    service = gnmi.gnmi_pb2.DESCRIPTOR.services_by_name["gNMI"]
    assert [m.name for m in service.methods] == ["Capabilities", "Get", "Set", "Subscribe"]
    # the wire numbers clients (gnmic, pygnmi) use
    f = gnmi.gnmi_pb2.TypedValue.DESCRIPTOR.fields_by_name
    assert (f["uint_val"].number, f["json_ietf_val"].number, f["double_val"].number) == (3, 11, 14)


def test_generating_writes_the_same_bindings_once_and_again_after_a_proto_change(tmp_path):
    out = tmp_path / "site"
    out.mkdir()
    assert generate(out) is True
    for name in PROTOS:
        mod = name.replace(".proto", "_pb2.py")
        assert (out / mod).read_bytes() == (site_packages() / mod).read_bytes(), mod
    assert (out / "p4" / "v1" / "__init__.py").exists()
    assert (out / "gnmi" / "gnmi_pb2.py").read_bytes() == (site_packages() / "gnmi" / "gnmi_pb2.py").read_bytes()
    assert generate(out) is False                       # up to date: nothing done
    protos = tmp_path / "proto"
    shutil.copytree(PROTO_DIR, protos)
    path = protos / "p4" / "v1" / "p4data.proto"
    path.write_text(path.read_text() + "\n// a changed file\n")
    assert proto_digest(protos) != proto_digest()
    gnmi_made_ns = (out / "gnmi" / "gnmi_pb2.py").stat().st_mtime_ns
    assert generate(out, protos) is True
    assert installed_digest(out) == proto_digest(protos)
    # the other family's bindings are left alone
    assert (out / "gnmi" / "gnmi_pb2.py").stat().st_mtime_ns == gnmi_made_ns


def test_a_venv_without_bindings_is_a_problem_the_doctor_names(monkeypatch, tmp_path):
    monkeypatch.setattr("emulator.p4.bindings.site_packages", lambda: tmp_path)
    f = doctor.check_bindings()
    assert f.status == doctor.PROBLEM and "make setup" in f.detail
