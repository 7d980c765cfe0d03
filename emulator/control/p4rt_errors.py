"""Errors of the P4Runtime client (``emulator.control.p4rt_client``), and how it reads a batch's details.

``P4RuntimeError`` is any RPC failure, with the gRPC code; ``WriteError``
and ``ReadError`` add one ``UpdateError`` per failed batch item the
server's details cover (``status_details``); ``NotPrimaryError`` is a Write
refused because another client took over as primary (one line naming its
election id); ``ArbitrationError``: the session could not be set up or
did not become primary.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2 as pb


def election_id_text(election_id: int | tuple[int, int] | None) -> str:
    """An election id (an int, or ``(high, low)``) as p4runtime-shell's
    ``--election-id`` takes it: ``high,low``."""
    if election_id is None:
        return "none"
    high, low = election_id if isinstance(election_id, tuple) else divmod(election_id, 2**64)
    return f"{high},{low}"


def code_name(code: int) -> str:
    try:
        return code_pb2.Code.Name(code)
    except ValueError:
        return str(code)


@dataclass(frozen=True)
class UpdateError:
    """One failed item of a Write (or Read) batch."""

    index: int          # position in the batch
    code: int           # google.rpc.Code
    message: str
    update: Any = None  # the p4.v1.Update (Write) or Entity (Read)

    def __str__(self) -> str:
        return f"#{self.index}: {code_name(self.code)}: {self.message}"


class P4RuntimeError(Exception):
    """A P4Runtime RPC failed."""

    def __init__(self, what: str, code: grpc.StatusCode | None, message: str,
                 errors: list[UpdateError] | None = None, covered: int | None = None):
        self.what, self.code, self.message = what, code, message
        self.errors: list[UpdateError] = errors or []
        # Batch items the server's details covered (one p4.v1.Error each, in
        # order); fewer than the batch when it cut them to fit the trailer
        # (the message then says so and quotes the first failures). None: no details.
        self.covered = covered
        text = f"{what}: {code.name if code else 'ERROR'}: {message}"
        if self.errors:
            text += "".join(f"\n  {e}" for e in self.errors)
        super().__init__(text)

    @property
    def codes(self) -> list[int]:
        """Canonical codes of the failed items, in batch order."""
        return [e.code for e in self.errors]


class WriteError(P4RuntimeError):
    """A Write failed; ``.errors`` lists the updates that failed and why."""


class ReadError(P4RuntimeError):
    """A Read failed; ``.errors`` lists the requests that failed and why, and
    ``.entities`` holds what the server returned before its status: the
    entities of the requests that succeeded (P4Runtime spec 13.3)."""

    def __init__(self, *args: Any, entities: list[pb.Entity] | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.entities: list[pb.Entity] = entities or []


class ArbitrationError(P4RuntimeError):
    """The session could not be established or is not the primary."""


def status_details(err: grpc.RpcError) -> tuple[list[tuple[int, int, str]], int | None]:
    """``(index, canonical_code, message)`` of every p4.v1.Error in a gRPC
    error's details, and how many batch items the details cover (None: no details)."""
    out, covered = [], None
    for key, value in (err.trailing_metadata() or ()):
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status()
        try:
            status.ParseFromString(value)
        except Exception:  # a peer's garbage: the gRPC code and message still say what failed
            continue
        covered = len(status.details)
        for i, any_msg in enumerate(status.details):
            e = pb.Error()
            if any_msg.Unpack(e):
                out.append((i, e.canonical_code, e.message))
    return out, covered


class NotPrimaryError(WriteError):
    """A Write refused (PERMISSION_DENIED) because this client is not the
    primary (another took over); ``.primary_election_id``: the primary's
    (None: none). Its text is the one line given: which switch, what was
    refused, who is primary and the way back."""

    def __init__(self, line: str, primary_election_id: int | None):
        super().__init__("Write", grpc.StatusCode.PERMISSION_DENIED, line)
        self.args = (line,)
        self.primary_election_id = primary_election_id
