"""Frames waiting in the NIC's transmit path, by type.

The parts that decide what to send (requester, responder, READ responder,
notification point) hand the transmitter one of these; it builds the bytes
only when the frame leaves (``transmitter``), so a frame on the wire is
always the current state of its message buffer. Named tuples: cheap to make
per packet, and ``type(f) is DataFrame`` dispatches without an integer code.
"""
from __future__ import annotations

from typing import Any, NamedTuple


class DataFrame(NamedTuple):
    """Packet ``k`` of a SEND/WRITE work request ``wqe``, PSN ``psn``
    (unwrapped); ``ack_req``: its AckReq bit (a response is owed for it)."""
    qp: Any
    wqe: Any
    k: int
    psn: int
    ack_req: bool


class ReadRequestFrame(NamedTuple):
    """A READ request for response ``k`` onwards of READ ``wqe`` (PSN ``psn``)."""
    qp: Any
    wqe: Any
    k: int
    psn: int


class ReadResponseFrame(NamedTuple):
    """Response ``k`` of the READ ``job`` being answered (PSN ``psn``)."""
    qp: Any
    job: Any
    k: int
    psn: int


class AckFrame(NamedTuple):
    """An ACK or NAK (AETH ``syndrome``, ``msn``) for PSN ``psn`` (24-bit)."""
    qp: Any
    psn: int
    syndrome: int
    msn: int


class CnpFrame(NamedTuple):
    """A congestion notification to ``qp``'s peer QP."""
    qp: Any


class LinkFrame(NamedTuple):
    """A link packet (InfiniBand flow control), its bytes built: it takes no
    credit and no serializer time, and goes out on the link's delay."""
    data: bytes
