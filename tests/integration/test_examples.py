"""The example test file works for someone outside this repository: pytester
copies it into an empty directory and runs pytest there (a subprocess: the
installed plugin, no project conftest or settings), building real fabrics."""
from __future__ import annotations

import pytest

from tests.conftest import REPO

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers")]


def test_the_example_pytest_file_passes_outside_the_repo(pytester):
    pytester.makepyfile(test_my_fabric=(REPO / "examples" / "test_my_fabric.py").read_text())
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", timeout=600)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_5_to_1_incast_is_lossless*embedded*PASSED*"])
