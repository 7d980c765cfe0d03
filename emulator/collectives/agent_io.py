"""How a server-side agent process starts and ends: ``python -m MODULE
CONFIG.json`` reads its JSON config (a ``emulator.schema.agent`` model, the
one the runner wrote), runs, and writes its result JSON atomically to the
config's ``result_path`` (the runner may read it at any time after the
process exits), with the process's CPU seconds (``cpu_s``) as a host
agent's result has them. A bad config is one line and exit status 2."""
from __future__ import annotations

import json
import sys
import time
from typing import Callable, TypeVar

from emulator.atomic import atomic_write_text
from emulator.errors import FabricEmuError
from emulator.schema.load import ProcessConfig
from emulator.lifeline import die_with_runner

C = TypeVar("C", bound=ProcessConfig)


def agent_main(module: str, config: type[C], run: Callable[[C, str], dict],
               argv=None) -> tuple[C, dict] | int:
    """(config, result) of ``run(config, path)``, or the exit status 2 after
    printing why the config could not be used."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(f"usage: python -m {module} CONFIG.json", file=sys.stderr)
        return 2
    die_with_runner()
    try:
        cfg = config.load(argv[0])
        res = run(cfg, argv[0])
    except FabricEmuError as e:          # (names the file already)
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (KeyError, ValueError, OSError) as e:
        print(f"error: {argv[0]}: {e}", file=sys.stderr)
        return 2
    res["cpu_s"] = round(time.process_time(), 3)
    atomic_write_text(cfg.result_path, json.dumps(res))
    return cfg, res
