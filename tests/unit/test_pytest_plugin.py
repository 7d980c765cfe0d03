"""The pytest plugin's options, markers and skips, on pytester's throw-away
test files (in process: no fabric is built here; tests/integration/test_examples.py
runs the example that builds one)."""
from __future__ import annotations

import pytest

from emulator import pytest_plugin

pytest_plugins = ["pytester"]

TARGETS = """
def test_t(fabric_target):
    assert fabric_target in ("embedded", "bmv2")
"""


def test_the_plugin_is_installed_with_the_package():
    from importlib.metadata import entry_points
    eps = entry_points(group="pytest11")
    assert any(ep.value == "emulator.pytest_plugin" for ep in eps)


@pytest.mark.parametrize("option, ids", [
    ([], ["test_t[embedded]"]),
    (["--fabric-target", "embedded"], ["test_t[embedded]"]),
    (["--fabric-target", "all"], ["test_t[embedded]", "test_t[bmv2]"]),
])
def test_fabric_target_parametrizes(pytester, option, ids):
    pytester.makepyfile(TARGETS)
    result = pytester.runpytest_inprocess("--collect-only", "-q", *option)
    assert [line.split("::")[1] for line in result.outlines if "::" in line] == ids


def test_bmv2_skips_with_its_reason_where_absent(pytester, monkeypatch):
    monkeypatch.setattr(pytest_plugin, "bmv2_unavailable_reason", lambda: "no simple_switch_grpc")
    pytester.makepyfile(TARGETS)
    result = pytester.runpytest_inprocess("--fabric-target", "all", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*BMv2 target: no simple_switch_grpc*"])


def test_fabric_tests_skip_with_the_reason_where_mininet_is_missing(pytester, monkeypatch):
    monkeypatch.setattr(pytest_plugin, "mininet_unavailable_reason", lambda: "needs root: test")
    pytester.makepyfile("""
        import pytest

        def test_auto_marked(run_experiment):
            raise AssertionError("must not run")

        @pytest.mark.fabric
        def test_marked():
            raise AssertionError("must not run")

        def test_plain():
            pass
    """)
    result = pytester.runpytest_inprocess("-rs")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["*needs root: test*"])
