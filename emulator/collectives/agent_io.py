"""How a server-side agent process starts and ends: ``python -m MODULE
CONFIG.json`` reads its JSON config, runs, and writes its result JSON
atomically to the config's ``result_path`` (the runner may read it at any
time after the process exits). A bad config is one line and exit status 2."""
from __future__ import annotations

import json
import os
import sys
from typing import Callable

from emulator.errors import FabricEmuError


def agent_main(module: str, run: Callable[[dict, str], dict], argv=None) -> tuple[dict, dict] | int:
    """(config, result) of ``run(config, path)``, or the exit status 2 after
    printing why the config could not be used."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(f"usage: python -m {module} CONFIG.json", file=sys.stderr)
        return 2
    try:
        with open(argv[0]) as f:
            cfg = json.load(f)
        res = run(cfg, argv[0])
    except (FabricEmuError, KeyError, ValueError, OSError) as e:
        print(f"error: {argv[0]}: {e}", file=sys.stderr)
        return 2
    tmp = cfg["result_path"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f)
    os.replace(tmp, cfg["result_path"])
    return cfg, res
