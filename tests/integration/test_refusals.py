"""``fabric-emu run`` refuses every file ``validate`` refuses
(``tests/refusal_cases.py``) the same way, before its root check and before
anything exists: one line naming the file (and the field), exit status 2, no
output directory, nothing in its directory. (None builds a fabric or needs root.)

Each case is a ``run`` of its own, in its own directories; most run in a few
processes (``tests/refusal_driver.py``: ``emulator.cli.main`` in-process, a
case after another), as an interpreter's start and the schema's import are
nearly all of a refusal's cost. The reader's cases, which push its memory,
depth and size bounds, share no process with the schema's. ``OWN_PROCESS``'s
go through the command itself, a process each: the entry points and their
exit status, and a fresh process's stderr (import-time warnings included)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.refusal_cases import (CASES, CONSOLE_SCRIPT, PYTHON_M, cli, driver_results, listing,
                                 start_driver, write_case)

# case -> the command it runs by: the /dev/zero reader's bound in a fresh process
# of the console script, the size limit through python -m
OWN_PROCESS = {"dev-zero": CONSOLE_SCRIPT, "50-mb-file": PYTHON_M}
DRIVER_TIMEOUT_S = 120


def _own_process(case: str, job: dict) -> dict:
    """``job`` by the command itself, as the driver reports a case."""
    res, took_s = cli(job["args"], Path(job["cwd"]), Path(job["cache"]), OWN_PROCESS[case])
    return {"case": case, "status": res.returncode, "stdout": res.stdout, "stderr": res.stderr,
            "error": None, "seconds": round(took_s, 3)}


@pytest.fixture(scope="module")
def refused(tmp_path_factory) -> dict[str, tuple[dict, Path, list[str]]]:
    """Case -> (what its run said and its status, its directory, the listing
    of its files before): every case run once, the groups side by side."""
    base = tmp_path_factory.mktemp("refusals")
    jobs, before = {}, {}
    for case, (files, extra, _, _) in CASES.items():
        d = base / case
        for sub in ("in", "work"):
            (d / sub).mkdir(parents=True)
        write_case(d / "in", files)
        before[case] = listing(d / "in")
        jobs[case] = {"case": case, "cwd": str(d / "work"), "cache": str(d / "cache"),
                      "args": ["run", str(d / "in" / "exp.yaml"), *extra, "--out", str(d / "out")]}
    groups = {"reader": [j for c, j in jobs.items() if CASES[c][3] and c not in OWN_PROCESS],
              "schema": [j for c, j in jobs.items() if not CASES[c][3] and c not in OWN_PROCESS]}
    drivers = {name: start_driver(group, base / f"{name}-jobs.json")
               for name, group in groups.items()}
    results = {case: _own_process(case, jobs[case]) for case in OWN_PROCESS}
    for name, proc in drivers.items():
        results.update(driver_results(proc, groups[name], DRIVER_TIMEOUT_S))
    return {case: (results[case], base / case, before[case]) for case in CASES}


@pytest.mark.parametrize("case", sorted(CASES))
def test_run_refuses_before_building_anything(refused, case):
    """``run`` refuses what ``validate`` refuses, before its root check and
    before anything exists: no output directory, nothing in its directory."""
    res, d, before = refused[case]
    _, _, words, _ = CASES[case]
    assert res["error"] is None, res["error"]
    lines = res["stderr"].strip().splitlines()
    assert res["status"] == 2, (res["seconds"], res["stdout"][-500:], res["stderr"][-2000:])
    assert len(lines) == 1 and lines[0].startswith("fabric-emu: "), res["stderr"][-2000:]
    for w in words:
        assert w in lines[0], lines[0]
    assert not (d / "out").exists() and listing(d / "work") == [] and listing(d / "in") == before
