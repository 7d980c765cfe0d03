"""The schema of a topology's ``management:`` section: the cluster's other networks.

    management:
      out_of_band: {subnet: 192.168.0.0/24, rate_gbps: 1}   # switches' management ports
      in_band:     {subnet: 192.168.1.0/24, rate_gbps: 10}  # one interface per server

Each is a plain Ethernet network of its own (a Linux bridge: standard
forwarding, no PFC), apart from the compute and storage planes. Either may be
given. Where the addresses go: ``emulator.topo.addressing``; what is built:
``emulator.net.management`` (docs/management.md).
"""
from __future__ import annotations

import ipaddress
from typing import Optional

from pydantic import model_validator

from emulator.schema.limits import RateGbps
from emulator.schema.load import FieldError, StrictSpec

# The management networks' kinds, in the order they are built and shown.
OUT_OF_BAND, IN_BAND = "out_of_band", "in_band"
KINDS = (OUT_OF_BAND, IN_BAND)


class ManagementNetSpec(StrictSpec):
    subnet: str
    rate_gbps: RateGbps

    def network(self) -> ipaddress.IPv4Network:
        try:
            net = ipaddress.ip_network(self.subnet, strict=True)
        except ValueError as e:
            raise FieldError("subnet", f"not a valid IPv4 prefix: {e}") from None
        if not isinstance(net, ipaddress.IPv4Network):
            raise FieldError("subnet", f"{self.subnet} is IPv6; a management subnet must be IPv4")
        if net.prefixlen > 30:
            raise FieldError("subnet", f"{self.subnet} is too small: a management network needs "
                                       "a /30 or shorter (the management host and one node)")
        return net

    @model_validator(mode="after")
    def _subnet(self):
        self.network()
        return self


class ManagementSpec(StrictSpec):
    out_of_band: Optional[ManagementNetSpec] = None
    in_band: Optional[ManagementNetSpec] = None

    @model_validator(mode="after")
    def _one(self):
        if self.out_of_band is None and self.in_band is None:
            raise FieldError("", "give out_of_band, in_band or both")
        if self.out_of_band is not None and self.in_band is not None:
            oob, inb = self.out_of_band.network(), self.in_band.network()
            if oob.overlaps(inb):
                raise FieldError("in_band.subnet", f"{inb} overlaps out_of_band's {oob}: "
                                                   "each network needs its own subnet")
        return self

    def networks(self) -> dict[str, ManagementNetSpec]:
        """kind -> its spec, the given ones, in ``KINDS`` order."""
        return {k: getattr(self, k) for k in KINDS if getattr(self, k) is not None}


def check_against_planes(spec: ManagementSpec, planes: dict[str, ipaddress.IPv4Network]) -> None:
    """A management subnet overlapping a fabric plane's prefix (name -> prefix)
    would make an address mean two interfaces."""
    for kind, net in spec.networks().items():
        for key, prefix in planes.items():
            if net.network().overlaps(prefix):
                raise FieldError(f"management.{kind}.subnet",
                                 f"{net.subnet} overlaps addressing.{key} {prefix}: the management "
                                 "networks are apart from the fabric's planes")
