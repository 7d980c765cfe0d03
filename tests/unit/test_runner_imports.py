"""The runner's process never imports Scapy: ~0.35 s of every command's
start (and, imported at the agents' launch on a loaded machine, seconds)
for frames it never builds or parses -- its NICs, switches and captures'
dissection run elsewhere."""
from __future__ import annotations

import json

from tests.conftest import python_c


def test_the_cli_runner_and_agent_launch_import_no_scapy():
    code = ("import sys, emulator.cli, emulator.experiment.runner, emulator.experiment.agents, "
            "emulator.experiment.results, emulator.experiment.plotter; "
            "from emulator.experiment.agents import nic_fields, rto_fabric_ns; "
            "from emulator.experiment.model import load_experiment; "
            "from emulator.experiment.time_mode import resolve_time; "
            "exp = resolve_time(load_experiment('experiments/demo.yaml'), 'embedded'); "
            "rto_fabric_ns(exp); "
            "nic_fields(exp, 'h1'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scapy'))")
    out = python_c(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# What a run imports once its input is checked: Mininet, gRPC and P4Runtime,
# the fabric's processes, the dataplane, the report's plots.
RUN_ONLY = ("mininet", "grpc", "google.protobuf", "p4", "scapy", "numpy", "matplotlib",
            "emulator.net", "emulator.control", "emulator.dataplane", "emulator.nic",
            "emulator.agents", "emulator.ib", "emulator.p4", "emulator.report", "emulator.live",
            "emulator.experiment.runner", "emulator.experiment.results",
            "emulator.experiment.plotter")


def test_a_refused_run_imports_none_of_what_runs(tmp_path):
    """``fabric-emu run`` of a file it refuses costs what ``validate`` does
    (~0.5 s, the schema): none of a run's imports come before the checks. One
    refused by the schema, one by the clock (past the schema: the deepest)."""
    from tests.refusal_cases import CASES, write_case

    cases = ["dilation-inf", "time-virtual-bmv2"]
    argvs = []
    for case in cases:
        (tmp_path / case).mkdir()
        write_case(tmp_path / case, CASES[case][0])
        argvs.append(["run", str(tmp_path / case / "exp.yaml"), *CASES[case][1],
                      "--out", str(tmp_path / case / "out")])
    code = ("import json, sys, emulator.cli\n"
            f"for argv in {argvs!r}:\n"
            "    try:\n"
            "        emulator.cli.main(argv)\n"
            "    except SystemExit as e:\n"
            "        status = e.code\n"
            f"    print(json.dumps([status, sorted(m for m in sys.modules for p in {RUN_ONLY!r}\n"
            "                                      if m == p or m.startswith(p + '.'))]))\n")
    out = python_c(code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    results = [json.loads(line) for line in out.stdout.splitlines()]
    assert results == [[2, []]] * len(cases), (cases, results, out.stderr)
