"""The venv ``make setup`` builds: Debian's python3 packages cannot stand in
for what pyproject.toml requires (python3-scapy 2.5 computes no ICRC over
IPv6; python3-grpcio is older than the generated stubs want). Only Mininet,
which exists only as a Debian package, comes from the system."""
from __future__ import annotations

import re
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SYSTEM_DIST = ("/usr/lib/python3/dist-packages", "/usr/local/lib/python3")


def _requirements() -> dict[str, tuple[int, ...]]:
    """name -> minimum version, from pyproject.toml's dependencies (>= / ==)."""
    text = (REPO / "pyproject.toml").read_text()
    deps = text[text.index("dependencies = ["):]
    deps = deps[:deps.index("]")]
    out = {}
    for name, _, version in re.findall(r'"([A-Za-z0-9_.-]+)\s*(>=|==)\s*([0-9.]+)', deps):
        out[name.lower()] = tuple(int(x) for x in version.split("."))
    return out


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", metadata.version(name))[:3])


in_venv = pytest.mark.skipif(sys.prefix == sys.base_prefix,
                             reason="not running in a venv (make setup builds one)")


@in_venv
def test_venv_does_not_see_system_site_packages():
    cfg = (Path(sys.prefix) / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in cfg
    assert not any(p.startswith(SYSTEM_DIST) for p in sys.path), sys.path


@in_venv
@pytest.mark.parametrize("dist,module", [("scapy", "scapy"), ("grpcio", "grpc"),
                                         ("protobuf", "google.protobuf"), ("pydantic", "pydantic")])
def test_required_packages_come_from_the_venv_at_the_required_version(dist, module):
    mod = __import__(module, fromlist=["__name__"])
    assert str(Path(mod.__file__).resolve()).startswith(str(Path(sysconfig.get_paths()["purelib"])
                                                            .resolve().parent)), mod.__file__
    need = _requirements().get(dist)
    assert need is not None, f"{dist} is not in pyproject.toml's dependencies"
    assert _version(dist) >= need, f"{dist} {metadata.version(dist)} < {need}"


@in_venv
def test_only_mininet_comes_from_the_system():
    import emulator.cli  # noqa: F401  (imports what a run imports)
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        pytest.skip("Mininet is not installed")
    from_system = sorted({name.split(".")[0] for name, m in list(sys.modules.items())
                          if str(Path(getattr(m, "__file__", None) or "/").resolve())
                          .startswith(SYSTEM_DIST)})
    assert from_system == ["mininet"], from_system
