"""``fabric-emu run`` refuses every file ``validate`` refuses
(``tests/refusal_cases.py``) the same way, before its root check and before
anything exists: one line naming the file (and the field), exit status 2, no
output directory, nothing in its directory. (Each is a ``run`` of its own;
none builds a fabric or needs root.)"""
from __future__ import annotations

import pytest

from tests.refusal_cases import CASES, cli, listing, write_case


@pytest.mark.parametrize("case", sorted(CASES))
def test_run_refuses_before_building_anything(tmp_path, case):
    """``run`` refuses what ``validate`` refuses, before its root check and
    before anything exists: no output directory, nothing in its directory."""
    files, extra, words, _ = CASES[case]
    d, work = tmp_path / "in", tmp_path / "work"
    d.mkdir()
    work.mkdir()
    write_case(d, files)
    before = listing(d)
    res, took = cli(["run", str(d / "exp.yaml"), *extra, "--out", str(tmp_path / "out")],
                     work, tmp_path / "cache")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, (took, res.stdout[-500:], res.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("fabric-emu: "), res.stderr[-2000:]
    for w in words:
        assert w in lines[0], lines[0]
    assert not (tmp_path / "out").exists() and listing(work) == [] and listing(d) == before
