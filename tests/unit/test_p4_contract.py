"""The contract check that stands between p4c's output and the BMv2 target.

p4c versions write the same program's P4Info differently: p4c 1.2.5.x adds an
``initial_default_action`` to every table, 1.2.4.x does not (compare
``testdata/p4_16_samples_outputs/*.p4info.txtpb`` at p4c's tags v1.2.4.8 and
v1.2.5.16); a newer p4c may write fields our p4runtime protos do not know.
The committed contract is 1.2.5.16's. The check must pass both styles and
fail, naming the object, on anything the controller or a target uses.
"""
from __future__ import annotations

import re
import shutil

import pytest

from emulator.control.qos import PFC_SESSION_BASE
from emulator.p4.build import P4_SOURCE, contract_differences, read_p4info
from emulator.p4.p4info import DEFAULT_P4INFO

CONTRACT_TEXT = DEFAULT_P4INFO.read_text()
IPV4_LPM_ID = 33554434            # FabricIngress.ipv4_lpm's pinned @id


def old_style(text: str) -> str:
    """fabric.p4's P4Info as p4c 1.2.4.x writes it: no initial_default_action blocks."""
    out = re.sub(r"\n  initial_default_action \{\n    action_id: \d+\n  \}", "", text)
    assert out != text
    return out


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_committed_contract_is_new_style_and_passes():
    assert "initial_default_action" in CONTRACT_TEXT
    assert contract_differences(read_p4info(DEFAULT_P4INFO)) == []


def test_a_p4info_in_p4c_1_2_4_style_passes(tmp_path):
    text = old_style(CONTRACT_TEXT)
    generated = read_p4info(write(tmp_path, "old.txtpb", text))
    assert generated != read_p4info(DEFAULT_P4INFO)      # what the old equality check refused
    assert contract_differences(generated) == []


def test_fields_a_newer_p4c_adds_are_skipped(tmp_path):
    """A field our protos do not know (a future p4c's) and informational ones."""
    text = CONTRACT_TEXT.replace("  size: 256\n", "  size: 256\n  has_initial_entries: true\n"
                                                 "  some_future_field: 7\n", 1)
    assert contract_differences(read_p4info(write(tmp_path, "new.txtpb", text))) == []


@pytest.mark.parametrize("style", ["new", "old"])
def test_a_changed_table_id_fails_naming_the_table(tmp_path, style):
    text = CONTRACT_TEXT if style == "new" else old_style(CONTRACT_TEXT)
    text = text.replace(f"id: {IPV4_LPM_ID}\n", f"id: {IPV4_LPM_ID + 100}\n")
    diffs = contract_differences(read_p4info(write(tmp_path, "x.txtpb", text)))
    assert any("FabricIngress.ipv4_lpm" in d and str(IPV4_LPM_ID) in d and "missing" in d for d in diffs)
    assert any(d.startswith("unexpected table FabricIngress.ipv4_lpm") for d in diffs)


@pytest.mark.parametrize("change, expect", [
    # a match field's width, its kind, an action param's width, a table's size
    (("    name: \"ipv4_dst\"\n    bitwidth: 32\n    match_type: LPM",
      "    name: \"ipv4_dst\"\n    bitwidth: 32\n    match_type: TERNARY"), "match fields"),
    (("    name: \"dmac\"\n    bitwidth: 48", "    name: \"dmac\"\n    bitwidth: 47"), "params"),
    (("  size: 1024\n", "  size: 512\n"), "size"),
    (("    name: \"egress_port\"\n    bitwidth: 9", "    name: \"egress_port\"\n    bitwidth: 16"),
     "controller packet metadata"),
])
def test_what_targets_use_is_compared(tmp_path, change, expect):
    old, new = change
    assert old in CONTRACT_TEXT, old
    diffs = contract_differences(read_p4info(write(tmp_path, "x.txtpb", CONTRACT_TEXT.replace(old, new, 1))))
    assert diffs and any(expect in d for d in diffs), diffs


def test_the_clone_sessions_the_controller_installs_are_the_programs(tmp_path):
    source = write(tmp_path, "fabric.p4", P4_SOURCE.read_text())
    assert contract_differences(read_p4info(DEFAULT_P4INFO), source=source) == []
    source.write_text(P4_SOURCE.read_text().replace(f"#define PFC_SESSION_BASE {PFC_SESSION_BASE}",
                                                    f"#define PFC_SESSION_BASE {PFC_SESSION_BASE * 2}"))
    (diff,) = contract_differences(read_p4info(DEFAULT_P4INFO), source=source)
    assert diff.startswith("clone sessions:") and str(PFC_SESSION_BASE * 2) in diff


@pytest.mark.skipif(shutil.which("p4c-bm2-ss") is None,
                    reason="p4c-bm2-ss is not installed (the Vagrant lab has it)")
def test_bmv2_json_names_what_differs(tmp_path):
    """The build refuses a program whose P4Info drifted, saying what drifted."""
    from emulator.errors import EnvironmentProblem
    from emulator.p4 import build
    contract = write(tmp_path, "contract.txtpb",
                     CONTRACT_TEXT.replace(f"id: {IPV4_LPM_ID}\n", f"id: {IPV4_LPM_ID + 100}\n"))
    with pytest.raises(EnvironmentProblem, match=r"table FabricIngress\.ipv4_lpm \(id \d+\)"):
        build.bmv2_json(tmp_path / "build", contract=contract)
