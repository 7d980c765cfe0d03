"""Why ingress drops a malformed packet: the reason codes of fabric.p4's
``malformed_drop_counter``, defined once for Python.

``p4src/fabric.p4`` mirrors them as ``MALFORMED_*`` constants (and
``MALFORMED_SLOTS``); ``tests/unit/test_p4info.py`` checks that the two
agree. The counter has ``MALFORMED_SLOTS`` cells per ingress port:
cell = ingress port * MALFORMED_SLOTS + reason. Every malformed drop is also
a pipeline drop (``pipeline_drop_counter`` of its ingress port); this counter
says why.

Both targets check every frame of EtherType 0x0800 that ingress receives
(not packet-outs: the controller chose those) in the order of the codes
below; the first check that fails names the reason.
"""
from __future__ import annotations

from enum import IntEnum


class Malformed(IntEnum):
    IPV4_TRUNCATED = 1      # the frame ends inside the 20-byte IPv4 header
    IPV4_VERSION = 2        # version != 4
    IPV4_IHL = 3            # IHL < 5
    IPV4_OPTIONS = 4        # IHL 6..15: options, not supported by this fabric
    IPV4_TOTAL_LENGTH = 5   # total length < header, or > what the frame carries after Ethernet
    IPV4_CHECKSUM = 6       # header checksum wrong
    UDP_TRUNCATED = 7       # UDP datagram (by total length) shorter than the UDP header
    BTH_TRUNCATED = 8       # UDP 4791 datagram shorter than UDP + BTH
    INT_STACK = 9           # UDP INT datagram: shim or records beyond it, or more
                            # records filled than present, or present than INT_MAX_HOPS


MALFORMED_SLOTS = 16        # counter cells per ingress port (room for more reasons)


def malformed_cell(ingress_port: int, reason: int) -> int:
    """The ``malformed_drop_counter`` cell of (ingress port, reason)."""
    return ingress_port * MALFORMED_SLOTS + reason
