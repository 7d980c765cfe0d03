"""Which of a run's nodes share a process: host agents (``agents/pack.py``)
and embedded switches (``dataplane/pack.py``).

Every Python process of a run costs ~15-20 MB of its own however little it
does (copy-on-write pages of the fork server's heap its reference counts
touch), and every one is a task the cores switch between, each wake-up a
context switch (in a VM, a fifth of a switch process's CPU went to sleeping
and waking). ``per_process`` is the experiment's ``agents.per_process`` or
``switch.per_process``: a number, or "auto":

* a small fabric (up to ``AUTO_SMALL_AGENTS`` hosts, ``AUTO_SMALL_SWITCHES``
  switches) runs its agents in half as many processes as the machine has
  cores, and its switches in as many: on 2 cores, one process of agents
  and one of switches, each with a core. Measured on the demo (2-core VM,
  worst lateness ratio, 3-4 runs each): at D = 5000 0.79-1.07 with a
  process per node, 0.43-0.68 packed; the calibration's ratio at
  D = 3000 1.6-1.8 against 0.7-0.8.
* a bigger one packs its agents evenly into ``AUTO_AGENT_PROCESSES``
  processes (32 hosts: 8 processes were 498 MB in all, 4 were 466, the
  lateness the same) and its switches about ``AUTO_SWITCHES_PER_PROCESS``
  to a process.

A pack's crash takes its members down together (the run ends in one line
naming one of them and the pack's log); ``per_process: 1`` keeps a process
per node."""
from __future__ import annotations

import math
import os

AUTO_SMALL_AGENTS = 8
AUTO_SMALL_SWITCHES = 10
AUTO_AGENT_PROCESSES = 4
AUTO_SWITCHES_PER_PROCESS = 3
# A timed wake-up came ~16 us late (p90 18 us) on this project's VM: a pack
# whose process has a core to itself polls the last 20 us instead
WAKE_SPIN_NS = 20_000


def cpu_count() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def small_fabric_processes(cpus: int | None = None) -> int:
    """Processes of each kind (agents, switches) of a small fabric: half the cores."""
    return max(1, (cpus if cpus is not None else cpu_count()) // 2)


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


def agent_packs(names: list[str], per_process: int | str,
                cpus: int | None = None) -> list[list[str]]:
    """The host agents ``names`` cut into the processes that run them
    (``cpus``: the machine's cores, by default this one's)."""
    if per_process == "auto":
        if len(names) <= AUTO_SMALL_AGENTS:
            return split_evenly(names, small_fabric_processes(cpus))
        return split_evenly(names, AUTO_AGENT_PROCESSES)
    return by_size(names, per_process)


def switch_packs(names: list[str], per_process: int | str,
                 cpus: int | None = None) -> list[list[str]]:
    """The switches ``names`` cut into the processes that run them."""
    if per_process == "auto":
        if len(names) <= AUTO_SMALL_SWITCHES:
            return split_evenly(names, small_fabric_processes(cpus))
        return split_evenly(names, math.ceil(len(names) / AUTO_SWITCHES_PER_PROCESS))
    return by_size(names, per_process)


def wake_spin_ns(busy_processes: int, cpus: int | None = None) -> int:
    """How long an agent pack's loop polls before each timed wake-up
    (``clock.MonotonicClock.spin_ns``): ``WAKE_SPIN_NS`` when the run's busy
    processes (agent and switch processes) have a core each, so the CPU it
    spins is a core's that nothing else wants; else 0 (sleep: another
    process needs that CPU). Only the agents spin: a NIC's mean transmit
    lag is the verdict's limit on small fabrics, and switches spinning too
    took CPU the agents needed (demo at D = 3000)."""
    return WAKE_SPIN_NS if busy_processes <= (cpus if cpus is not None else cpu_count()) else 0
