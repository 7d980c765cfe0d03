"""Make NICs for tests (no tests here): ``roce_nic`` / ``ib_nic`` take the old
positional (ifname, mac, ip, gateway_mac), the runtime parts (``sock``,
``clock``, ``logs``) and ``schema.nic.NicConfig`` fields (fabric units; a
test's dilation is 1 unless it says so). ``ib_nic`` puts ``lid``, ``lids``,
``sl``, ``vl``, the link layer's keys and ``cc`` into the config's ``ib``."""
from __future__ import annotations

from emulator.clock import MONOTONIC
from emulator.ib.nic import IbNic
from emulator.nic.nic import RoceNic
from emulator.schema.nic import IbNicConfig, NicConfig

_IB_KEYS = set(IbNicConfig.model_fields)


def nic_config(ifname, mac, ip, gateway_mac, **fields) -> NicConfig:
    return NicConfig(ifname=ifname, mac=mac, ip=ip, gateway_mac=gateway_mac, **fields)


def roce_nic(ifname, mac, ip, gateway_mac, *, sock=None, clock=MONOTONIC, logs=None,
             **fields) -> RoceNic:
    return RoceNic(nic_config(ifname, mac, ip, gateway_mac, **fields), clock=clock, sock=sock,
                   logs=logs)


def ib_nic(ifname, mac, ip, gateway_mac, *, sock=None, clock=MONOTONIC, logs=None,
           **fields) -> IbNic:
    ib = {k: fields.pop(k) for k in list(fields) if k in _IB_KEYS}
    return IbNic(nic_config(ifname, mac, ip, gateway_mac, ib=ib, **fields), clock=clock,
                 sock=sock, logs=logs)
