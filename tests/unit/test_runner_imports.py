"""The runner's process never imports Scapy: ~0.35 s of every command's
start (and, imported at the agents' launch on a loaded machine, seconds)
for frames it never builds or parses -- its NICs, switches and captures'
dissection run elsewhere."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


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
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
