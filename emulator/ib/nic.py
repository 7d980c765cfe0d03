"""A software InfiniBand HCA port: a ``RoceNic`` given InfiniBand's link
layer (``ib.link.IbLink``). ``IbNic(config, ...)`` makes one, for a config
with ``ib`` (``schema.nic.IbNicConfig``); ``agents.make.make_nic`` calls it."""
from __future__ import annotations

from emulator.clock import MONOTONIC
from emulator.ib.link import IbLink
from emulator.nic.nic import RoceNic


def IbNic(config, *, clock=MONOTONIC, sock=None, logs=None) -> RoceNic:  # noqa: N802 (a factory)
    """A NIC on InfiniBand's link layer (the arguments as ``RoceNic``'s)."""
    return RoceNic(config, clock=clock, sock=sock, logs=logs, link=IbLink(config, clock))
