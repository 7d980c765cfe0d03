"""Every YAML snippet of README.md and docs/**/*.md is valid, through the schema layer.

Snippets are fenced ```yaml blocks, and indented (4-space) blocks that parse
as a mapping of known keys. Each is decided by content:

* a topology (``name`` + a fabric form) -> ``fabric_from_dict``; a topology
  fragment (fabric keys only) gets a ``name`` first;
* an experiment (``name`` + ``topology``) -> ``experiment_from_dict``, as if
  the file were in ``experiments/`` (so ``../topologies/...`` resolves);
* an experiment fragment (experiment keys only, e.g. just ``qos:``) is put
  into a minimal valid experiment (all-to-all traffic unless it brings
  traffic or a workload) on each of the repo's topologies in turn: it is
  valid when one of them takes it (a snippet naming ``s1n0`` needs servers).

A snippet that is deliberately invalid says so in its first line,
``# invalid: why``; it must fail.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from emulator.errors import ConfigError
from emulator.experiment.model import experiment_from_dict
from emulator.schema.experiment import ExperimentSpec
from emulator.schema.topology import FabricSpec
from emulator.topo import fabric_from_dict

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
TOPOLOGIES = sorted((REPO / "topologies").glob("*.yaml"))
FABRIC_KEYS = set(FabricSpec.model_fields)
EXPERIMENT_KEYS = set(ExperimentSpec.model_fields)
FABRIC_FORMS = FABRIC_KEYS - {"name", "addressing"}
INVALID = re.compile(r"^\s*#\s*invalid\b", re.IGNORECASE)
_FENCE = re.compile(r"^(\s*)(```|~~~)\s*([\w+-]*)")


def snippets(path: Path) -> list[tuple[str, str]]:
    """``(where, text)`` of every YAML snippet of one Markdown file."""
    out, lines = [], path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(m.group(2))),
                       len(lines))
            if m.group(3).lower() in ("yaml", "yml"):
                out.append((f"{_name(path)}:{i + 1}", "\n".join(lines[i + 1:end])))
            i = end + 1
            continue
        if lines[i].startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            end = i
            while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
                end += 1
            text = "\n".join(ln[4:] for ln in lines[i:end])
            if _looks_like_config(text):
                out.append((f"{_name(path)}:{i + 1}", text))
            i = end
            continue
        i += 1
    return out


def _name(path: Path) -> str:
    """A doc's name in test ids: its path in the repo (docs/ has subdirectories)."""
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return path.name


def _looks_like_config(text: str) -> bool:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return isinstance(data, dict) and bool(set(map(str, data)) & (FABRIC_KEYS | EXPERIMENT_KEYS))


ALL = [s for doc in DOCS for s in snippets(doc)]


def check(text: str, where: str) -> None:
    """Validate one snippet; ConfigError (or AssertionError: unrecognized) if it is not valid."""
    data = yaml.safe_load(text)
    assert isinstance(data, dict), f"{where}: not a mapping"
    keys = set(map(str, data))
    source = REPO / "experiments" / "doc-snippet.yaml"
    if keys <= FABRIC_KEYS and keys & FABRIC_FORMS:
        fabric_from_dict({"name": "doc-snippet", **data}, source=where)
    elif keys <= EXPERIMENT_KEYS and {"name", "topology"} <= keys:
        experiment_from_dict(data, source)
    elif keys <= EXPERIMENT_KEYS:
        errors = []
        for topo in TOPOLOGIES:
            exp = {"name": "doc-snippet", "topology": f"../topologies/{topo.name}"}
            if "traffic" not in data and "workload" not in data:
                exp["traffic"] = [{"pattern": "all-to-all", "size_bytes": 4096}]
            exp.update(data)
            try:
                experiment_from_dict(exp, source)
                return
            except ConfigError as e:
                errors.append(f"{topo.name}: {e}")
        raise ConfigError(where, "", "no topology of the repo takes this fragment: " + " | ".join(errors))
    else:
        raise AssertionError(f"{where}: neither a topology nor an experiment (keys {sorted(keys)})")


def test_the_docs_have_snippets():
    assert len(ALL) >= 5, ALL   # docs/how-to: topologies, experiment, workload, endpoints


@pytest.mark.parametrize("where,text", ALL, ids=[w for w, _ in ALL])
def test_snippet(where, text):
    if INVALID.match(text):
        with pytest.raises(ConfigError):
            check(text, where)
    else:
        check(text, where)


def test_invalid_marker_is_honoured():
    """The marker's test: a snippet marked invalid must fail, one that fails must be marked."""
    bad = "# invalid: no such field\nname: x\nclos: {spines: 1, leaves: 1, hosts_per_leaf: 1, colour: red,\n" \
          "  host_link: {rate_gbps: 1, delay_us: 1}, fabric_link: {rate_gbps: 1, delay_us: 1}}\n"
    assert INVALID.match(bad)
    with pytest.raises(ConfigError, match="colour"):
        check(bad, "inline")
    with pytest.raises(ConfigError, match="nic.dscp"):   # the README's old example
        check("nic: {mtu_bytes: 1024, dscp: 26}", "inline")


def test_indented_blocks_are_found(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("Text.\n\n    qos: {roce_dscp: 26}\n\nMore text.\n\n    not: yaml: config\n\n"
                   "```yaml\nname: x\n```\n```sh\nls\n```\n")
    assert [t for _, t in snippets(doc)] == ["qos: {roce_dscp: 26}\n", "name: x"]
