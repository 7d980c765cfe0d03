"""What the machine and the wire can hold: the bounds configuration values are checked against.

A value past one of these is a ``ConfigError`` naming the limit when the file
is loaded -- not an agent crashing later with the reason only in its log.

* **Message sizes** (``MessageBytes``): an RDMA message is at most
  ``MAX_MESSAGE_BYTES`` = 2**31 bytes, InfiniBand's maximum message size;
  at the smallest MTU (256 bytes) that is 2**23 packets, half the 24-bit PSN
  space -- the most a NIC can have in flight and still tell old PSNs from new.
* **Memory** (``BufferBytes``, ``check_fits``): every agent runs on this
  machine, and each flow's message exists twice in it (the sender's pattern
  buffer, the receiver's memory region), so one experiment's flows together
  may take at most ``MEMORY_FRACTION`` of its physical memory
  (``os.sysconf``), as may any one buffer (a collective's size, a storage
  target's blocks).
* **Counts**: every switch and host of a fabric is a process of at least
  ``NODE_MEMORY_BYTES``: the same memory bounds how many a run can have.
* **Rates and times** (``RateGbps``, ``DelayUs``, ``FabricUs``, ``WallS``):
  a link faster than ``MAX_RATE_GBPS`` or slower than ``MIN_RATE_GBPS`` is a
  typo, not a network; no fabric time can exceed the longest run
  (``MAX_RUN_S`` of wall time, and dilation >= 1 makes fabric time shorter);
  a dilation is at most ``MAX_DILATION``.
* **Names** (``name_problem``) of experiments, fabrics and cluster servers:
  a run's directory is named after its experiment (``results/<name>``), so a
  name is one path component that cannot climb out (``[a-z0-9][a-z0-9-]*``:
  no ``/``, never ``.`` or ``..``) and at most ``MAX_NAME_CHARS`` long -- it
  sits inside longer names (a sweep's ``<name>/<parameter>=<value>``, a
  comparison's ``compare-<a>-<b>``) that must stay within a file name's 255
  bytes, and in one-line messages and tables.
"""
from __future__ import annotations

import os
import re
from typing import Annotated, Iterable

from pydantic import AfterValidator, Field

from emulator.errors import ConfigError

MAX_MESSAGE_BYTES = 1 << 31            # InfiniBand's maximum message size
MEMORY_FRACTION = 0.5                  # of physical memory, for one experiment's buffers
NODE_MEMORY_BYTES = 32 << 20           # at least, per switch or host process
MIN_RATE_GBPS = 1e-6                   # 1 kbit/s
MAX_RATE_GBPS = 1e5                    # 100 Tbit/s
MAX_DELAY_US = 1e6                     # 1 s: 200,000 km of fibre
MAX_RUN_S = 86_400                     # one day of wall time
MAX_FABRIC_US = MAX_RUN_S * 1e6        # dilation >= 1: fabric time <= wall time
# Past it a 100 Gbit/s link runs below 100 kbit/s and a fabric ms takes
# 17 wall minutes (the highest D a machine has needed is ~64,000).
MAX_DILATION = 1e6
NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]*")
MAX_NAME_CHARS = 63


def physical_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_budget_bytes() -> int:
    """What one experiment's buffers may take of this machine's memory."""
    return int(physical_memory_bytes() * MEMORY_FRACTION)


def size_text(n: float) -> str:
    """Bytes, human-readable (powers of 2)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n:g} bytes"


def _memory_text() -> str:
    return (f"{int(MEMORY_FRACTION * 100)}% of this machine's "
            f"{size_text(physical_memory_bytes())} = {size_text(memory_budget_bytes())}")


def name_problem(name: str, what: str = "") -> str | None:
    """Why ``name`` cannot name an experiment, fabric or server (``what``);
    None if it can. (Its length first: a long name is not echoed.)"""
    if len(name) > MAX_NAME_CHARS:
        return f"is {len(name):,} characters long: at most {MAX_NAME_CHARS}"
    if not NAME_RE.fullmatch(name):
        return (f"{name!r} is not a valid {what} name: use [a-z0-9][a-z0-9-]*" if what else
                f"{name!r} must match [a-z0-9][a-z0-9-]*")
    return None


# ------------------------------------------------------------ field types

def _message(n: int) -> int:
    """at most 2**31 (InfiniBand's largest message); both copies within the memory budget"""
    if n > MAX_MESSAGE_BYTES:
        raise ValueError(f"an RDMA message is at most 2**31 = {MAX_MESSAGE_BYTES} bytes "
                         f"(InfiniBand's maximum message size)")
    _buffer(2 * n, "its sender's and receiver's copies")
    return n


def _buffer(n: int, what: str = "it") -> int:
    """within the memory budget (half of this machine's memory)"""
    if n > memory_budget_bytes():
        raise ValueError(f"{what} would take {size_text(n)}, more than {_memory_text()}")
    return n


def _bounded(low: float, high: float, what: str):
    def check(v: float) -> float:
        if not low <= v <= high:
            raise ValueError(f"must be {'within ' + f'{low:g}..' if low else 'at most '}{high:g} {what}")
        return v
    check.bounds = (low, high)          # the reference docs show them (docs/_gen/)
    return AfterValidator(check)


# One RDMA message (a flow, a READ block): sender + receiver copies in memory.
MessageBytes = Annotated[int, Field(gt=0), AfterValidator(_message)]
# One buffer some agent allocates (a collective's size).
BufferBytes = Annotated[int, Field(gt=0), AfterValidator(_buffer)]
RateGbps = Annotated[float, Field(gt=0, allow_inf_nan=False),
                     _bounded(MIN_RATE_GBPS, MAX_RATE_GBPS, "Gbit/s (1 kbit/s to 100 Tbit/s)")]
DelayUs = Annotated[float, Field(ge=0, allow_inf_nan=False),
                    _bounded(0, MAX_DELAY_US, "us (1 s: 200,000 km of fibre)")]
FabricUs = Annotated[float, Field(ge=0, allow_inf_nan=False),
                     _bounded(0, MAX_FABRIC_US, "us (a day: no run is longer)")]
WallS = Annotated[float, Field(gt=0, allow_inf_nan=False),
                  _bounded(0, MAX_RUN_S, "s (a day)")]


# ------------------------------------------------------------ whole experiment

def check_fits(source: str, n_nodes: int, flow_bytes: Iterable[int], field: str = "traffic") -> None:
    """A resolved experiment's processes and flows fit this machine (``ConfigError`` if not).

    ``n_nodes``: switches + hosts (a process each); ``flow_bytes``: every
    flow's message size (two copies each).
    """
    budget = memory_budget_bytes()
    if n_nodes * NODE_MEMORY_BYTES > budget:
        raise ConfigError(source, "topology",
                          f"{n_nodes} switches and hosts, a process of >= {size_text(NODE_MEMORY_BYTES)} "
                          f"each: more than {_memory_text()} holds ({budget // NODE_MEMORY_BYTES} at most)")
    sizes = list(flow_bytes)
    need = 2 * sum(sizes)
    if need > budget:
        raise ConfigError(source, field,
                          f"{len(sizes)} flows need {size_text(need)} of message buffers (sender and "
                          f"receiver copies): more than {_memory_text()}")
