"""What a run's start imports: every module here is on the path from
``fabric-emu run`` to the first data frame (the demo's launch to start is
under 1 s), so modules that cost a tenth of a second for nothing a run uses
stay out. Each check runs in a fresh interpreter: this one has imported
everything already."""
from __future__ import annotations

import subprocess
import sys

import pytest


def _imported(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
                         check=True, capture_output=True, text=True).stdout
    return set(out.split())


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12 has no distutils")
def test_mininet_comes_without_setuptools():
    # Mininet's node.py imports distutils.version; setuptools' shim would
    # answer with setuptools and pkg_resources (0.1 s): emulator/net/__init__.py
    mods = _imported("import emulator.net.nodes, mininet.net")
    assert "mininet.node" in mods and "distutils.version" in mods
    assert "setuptools" not in mods and "pkg_resources" not in mods


def test_the_runner_does_not_import_numpy_for_a_constant():
    mods = _imported("import emulator.experiment.servers")
    assert "numpy" not in mods


def test_the_plots_process_does_not_import_scapy():
    # it unpickles the fabric (emulator.topo) and draws: neither needs a layer,
    # and Scapy's 0.13 s would be spent after the traffic (experiment/plotter.py)
    mods = _imported("import emulator.topo, emulator.experiment.plots, emulator.experiment.plotter")
    assert "emulator.wire" in mods and not any(m.split(".")[0] == "scapy" for m in mods)
