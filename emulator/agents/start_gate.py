"""The common start of a run's agent processes: a barrier, not a guess.

Every agent (host, collective server, storage target) needs a few tenths of
a second to import Scapy/numpy and open its NIC, more when many start on two
cores at once. Rather than a start time guessed for the slowest, an agent
given ``ready_path`` creates that file once its NIC is up and reads one line
from stdin: the Unix ns at which every agent starts (``release`` on the
runner's side, ``emulator.experiment.agents``). The runner writes it when
all of them are ready, a few ms ahead, so the first packet leaves as soon as
the last agent can receive it. Without ``ready_path`` the configured
``start_at_unix_ns`` stands (agents started by hand or by tests)."""
from __future__ import annotations

import sys
from typing import TextIO


def ready_then_start(name: str, ready_path: str | None, start_at_unix_ns: int | None,
                     stdin: TextIO | None = None) -> int | None:
    """Announce ``READY name``; with ``ready_path``, mark it ready and wait for
    the start time on stdin (its Unix ns). SystemExit if the runner closed
    stdin without one: it went away, so no run will start."""
    return all_ready_then_start([(name, ready_path)], start_at_unix_ns, stdin)


def all_ready_then_start(gates: list[tuple[str, str | None]], start_at_unix_ns: int | None,
                         stdin: TextIO | None = None) -> int | None:
    """``ready_then_start`` for a process of several agents (``pack.py``):
    every ``(name, ready_path)`` announced and marked, then one start time
    for all, read once (the runner writes it once per process)."""
    for name, _ in gates:
        print(f"READY {name}", flush=True)
    paths = [p for _, p in gates if p is not None]
    if not paths:
        return start_at_unix_ns
    for p in paths:
        with open(p, "w"):
            pass
    line = (stdin or sys.stdin).readline().strip()
    if not line:
        names = ", ".join(n for n, _ in gates)
        raise SystemExit(f"{names}: the runner closed stdin before the start: nothing to run")
    return int(line)
