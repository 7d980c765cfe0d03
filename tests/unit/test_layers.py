"""The package's layers (``[tool.importlinter]`` in pyproject.toml) hold:
``lint-imports`` finds no import -- at module level or inside a function --
from a package to one of a higher layer, and every module of ``emulator``
is in some layer, so a new package cannot slip past the contract. The NIC
model (``emulator.nic``) imports only wire, clock, link, link_faults and int_md: its
``forbidden`` contract names every other module of the package."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import REPO


NIC_MAY_IMPORT = {"nic", "wire", "clock", "link", "link_faults", "int_md"}


def _contract(kind: str) -> dict:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == kind
                   and (kind != "forbidden" or c["source_modules"] == ["emulator.nic"])]
    return contract


def _layers() -> list[str]:
    contract = _contract("layers")
    return [m.strip() for layer in contract["layers"] for m in layer.replace(":", "|").split("|")]


def _top_modules() -> set[str]:
    top = {p.stem for p in (REPO / "emulator").glob("*.py") if p.stem != "__init__"}
    return top | {p.parent.name for p in (REPO / "emulator").glob("*/__init__.py")}


def test_every_package_is_in_a_layer():
    top = _top_modules()
    named = {m.removeprefix("emulator.") for m in _layers()}
    assert sorted(top - named) == [], "modules of emulator in no layer of pyproject.toml's contract"
    assert sorted(named - top) == [], "layers naming no module of emulator"


def test_lint_imports_keeps_the_layers():
    lint = Path(sys.executable).with_name("lint-imports")
    assert lint.exists(), f"{lint} missing: pip install -e '.[test]' installs import-linter"
    env = {**os.environ, "PYTHONPATH": str(REPO)}       # this tree's emulator, not an installed one
    r = subprocess.run([str(lint), "--no-cache"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "3 kept, 0 broken" in r.stdout


def test_the_nic_is_forbidden_every_module_but_wire_clock_link_and_int_md():
    contract = _contract("forbidden")
    assert contract["source_modules"] == ["emulator.nic"]
    forbidden = {m.removeprefix("emulator.") for m in contract["forbidden_modules"]}
    assert forbidden == _top_modules() - NIC_MAY_IMPORT, "a module of emulator the NIC contract misses"
