"""What ``fabric-emu run`` checks before it builds anything: its
``--dilation``, the experiment file (with ``--set``) and its clock, the
machine (root, the target's parts) and ``--out``. Each refusal is a
``FabricEmuError``: one line, within a second."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from emulator.experiment.dilation import parse_dilation
from emulator.experiment.model import Experiment
from emulator.experiment.time_mode import check_time


def checked_run_input(load: Callable[[], Experiment], out_dir: str | None, force: bool,
                      dilation: str | None) -> tuple[Experiment, Path, float | str | None]:
    """The run's experiment (``load`` reads the file), output directory and
    parsed ``dilation``."""
    dilation = parse_dilation(dilation)
    exp = check_time(load(), dilation_given=dilation is not None)
    # deferred: the run's modules, past the file's checks (a refused file imports none)
    from emulator.experiment.outdir import OutputDir
    from emulator.experiment.runner import resolve_target
    from emulator.net import environment
    out = Path(out_dir or f"results/{exp.name}")
    environment.check_environment()   # not root: say so, not that the lock is out of reach
    resolve_target(exp.spec.target)   # bmv2 missing: say so, whether a run is active or not
    OutputDir(out, force=force).check()   # a bad --out too (it is opened under the lock)
    return exp, out, dilation
