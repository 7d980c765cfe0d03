"""The watchdog's reaping (``emulator.net.watchdog.reap``) when a runner died:
its plotter goes too -- named by the results directory, not the run
directory -- and promptly, even from the idle class (``net/idle_cpu.py``)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from emulator.net import idle_cpu
from emulator.net.clean import plotter_processes
from emulator.net.watchdog import reap


def _fake_plotter(results_dir: str) -> subprocess.Popen:
    """A process whose command line is a plotter's for ``results_dir``."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                             "-m", "emulator.experiment.plotter", results_dir],
                            start_new_session=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="the idle cgroup needs root")
def test_a_dead_runners_plotter_is_reaped_and_no_other_runs(tmp_path):
    mine, other = str(tmp_path / "out"), str(tmp_path / "out2")
    procs = [_fake_plotter(mine), _fake_plotter(other)]
    try:
        idle_cpu.enter_idle(procs[0].pid)
        assert plotter_processes(mine) == [procs[0].pid]
        killed, removed = reap({"run_dir": mine + "/run", "nodes": [], "interfaces": []})
        assert (killed, removed) == (1, 0)
        assert procs[0].wait(timeout=5) == -9
        assert procs[1].poll() is None and plotter_processes(other) == [procs[1].pid]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        idle_cpu.remove_idle_cgroup()
