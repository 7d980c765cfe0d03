"""A switch pack whose members may be InfiniBand switches::

    python -m emulator.ib.pack PACK.json

The pack itself (one loop for every member's ports, signals, stats) is
``emulator.dataplane.pack``; this module only builds a member with an ``ib``
section as an ``IbSwitch`` (ib.p4, credits), so the Ethernet dataplane never
imports the InfiniBand layer above it.
"""
from __future__ import annotations

import sys

from emulator.dataplane import pack
from emulator.dataplane.switch import EmbeddedSwitch
from emulator.p4.p4info import IB_P4INFO, P4Info
from emulator.schema.switch import SwitchConfig

from .switch import IbSwitch


def make_switch(scfg: SwitchConfig, clock) -> tuple[EmbeddedSwitch, P4Info]:
    """The member ``scfg`` describes and its P4Info: InfiniBand or Ethernet."""
    if scfg.ib is None:
        return pack.ethernet_switch(scfg, clock)
    p4info = P4Info.load(scfg.p4info_path or IB_P4INFO)
    return IbSwitch(scfg, p4info, clock), p4info


def main(argv: list[str] | None = None) -> int:
    return pack.main(argv, make_switch, "emulator.ib.pack")


if __name__ == "__main__":
    sys.exit(main())
