"""The cache of ``dilation: auto``: the D chosen for this machine and a
fabric of this size, in ``$XDG_CACHE_HOME/fabric-emu/dilation.json``
(default ``~/.cache``), keyed by the machine (hostname, CPU count and
model) and the fabric's size (``dilation.fabric_key``)."""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from emulator.atomic import atomic_write_text

# 2: workloads are calibrated by running them (1: by a burst of WRITEs in their
# stead, which their full runs fell behind of at twice the D), and the agents
# got faster: a D cached before says little
CACHE_VERSION = 2


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fabric-emu" / "dilation.json"


def machine_key() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"hostname": socket.gethostname(), "cpus": os.cpu_count() or 0, "cpu_model": model}


def cache_key(machine: dict, fabric: dict) -> str:
    return json.dumps({"machine": machine, "fabric": fabric}, sort_keys=True)


class DilationCache:
    """``{key: {"dilation", "how", "measurements", "updated_unix"}}`` in one JSON
    file; an unreadable or other-version file counts as empty."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path is not None else cache_path()

    def _load(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
            return {}
        return data.get("entries", {}) if isinstance(data.get("entries"), dict) else {}

    def get(self, key: str) -> dict | None:
        entry = self._load().get(key)
        return entry if isinstance(entry, dict) and isinstance(entry.get("dilation"), (int, float)) \
            else None

    def put(self, key: str, dilation: float, how: str, measurements: list | None = None) -> None:
        entries = self._load()
        entries[key] = {"dilation": dilation, "how": how, "measurements": measurements or [],
                        "updated_unix": int(time.time())}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps({"version": CACHE_VERSION, "entries": entries},
                                                indent=1))
