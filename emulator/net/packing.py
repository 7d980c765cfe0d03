"""Which of a run's nodes share a process: host agents (``agents/pack.py``)
and embedded switches (``dataplane/pack.py``).

Every Python process of a run costs ~15-20 MB of its own however little it
does (copy-on-write pages of the fork server's heap its reference counts
touch) and is one more task for two cores to switch between; a small fabric
keeps a process per node (a crash takes one down, ``ps`` shows each), a big
one packs them. ``per_process`` is the experiment's ``agents.per_process``
or ``switch.per_process``: a number, or "auto"."""
from __future__ import annotations

import math

# agents.per_process "auto": a process each up to this many host agents (every
# shipped experiment); more, packed evenly into AUTO_AGENT_PROCESSES processes
# (32 hosts: 8 processes were 498 MB in all, 4 were 466, the lateness the same)
AUTO_AGENT_SINGLES = 8
AUTO_AGENT_PROCESSES = 4
# switch.per_process "auto": a process each up to this many switches (every
# two-tier and the 2-pod fabric shipped); more, about this many per process
AUTO_SWITCH_SINGLES = 10
AUTO_SWITCHES_PER_PROCESS = 3


def split_evenly(names: list[str], groups: int) -> list[list[str]]:
    """``names`` in order, in ``groups`` runs whose sizes differ by one at most."""
    groups = max(1, min(groups, len(names)))
    size, extra = divmod(len(names), groups)
    out, i = [], 0
    for k in range(groups):
        j = i + size + (k < extra)
        out.append(names[i:j])
        i = j
    return [g for g in out if g]


def by_size(names: list[str], size: int) -> list[list[str]]:
    """``names`` in order, ``size`` to a group (the last one shorter)."""
    return [names[i:i + size] for i in range(0, len(names), size)]


def agent_packs(names: list[str], per_process: int | str) -> list[list[str]]:
    """The host agents ``names`` cut into the processes that run them."""
    if per_process == "auto":
        if len(names) <= AUTO_AGENT_SINGLES:
            return [[n] for n in names]
        return split_evenly(names, AUTO_AGENT_PROCESSES)
    return by_size(names, per_process)


def switch_packs(names: list[str], per_process: int | str) -> list[list[str]]:
    """The switches ``names`` cut into the processes that run them."""
    if per_process == "auto":
        if len(names) <= AUTO_SWITCH_SINGLES:
            return [[n] for n in names]
        return split_evenly(names, math.ceil(len(names) / AUTO_SWITCHES_PER_PROCESS))
    return by_size(names, per_process)
