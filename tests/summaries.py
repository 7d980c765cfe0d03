"""A run's summary for tests: ``RunSummary`` with every required key, values
of a run where nothing ran and nothing fell behind; a test sets what it checks."""
from __future__ import annotations

from emulator.experiment.summary_file import Fidelity, RunSummary


def run_summary(fidelity: dict | None = None, **fields) -> RunSummary:
    """``fields`` replace the top-level keys; ``fidelity`` the verdict's."""
    verdict = {"worst_ratio": 0.0, "rule": "test", "switch_p99_limit_frames": None,
               "switch_p99_limit_hops": None, "nic_mean_limit_frames": None, "behind": []}
    base = dict(summary_version=6, experiment="test", source="test.yaml", topology="test",
                target="embedded", link_layer="roce", time="dilated", dilation=1000.0,
                wall_s=0.0, fabric_ns=0, fell_behind=False, complete=True,
                lossless_priorities=[], flows=[], ports=[], switches=[], nics=[],
                fidelity=Fidelity(**(verdict | (fidelity or {}))))
    return RunSummary(**(base | fields))
