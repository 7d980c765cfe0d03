"""The NIC a config describes (``schema.nic.NicConfig``): a ``RoceNic`` on
Ethernet's link layer, or on InfiniBand's (``ib.link.IbLink``) when the
config has ``ib`` -- one factory for the host agents and the collective and
storage agents, which also picks the process's clock."""
from __future__ import annotations

from emulator.clock import MONOTONIC, Clock
from emulator.nic.nic import RoceNic
from emulator.schema.nic import NicConfig
from emulator.vtime.member import process_clock


def make_nic(n: NicConfig, clock: Clock | None = None, logs=None) -> RoceNic:
    """``clock``: None: the process's, from its config (``vtime.member.process_clock``:
    virtual time's, or ``MONOTONIC``). ``logs``: the NIC's (``agents.run_logs``)."""
    if clock is None:
        clock = process_clock(getattr(n, "vtime_socket", None), n.ifname, agent=True,
                              default=MONOTONIC)
    if n.ib is None:
        return RoceNic(n, clock=clock, logs=logs)
    # deferred: only an InfiniBand fabric's agents load the IB link layer
    from emulator.ib.link import IbLink
    return RoceNic(n, clock=clock, logs=logs, link=IbLink(n, clock))
