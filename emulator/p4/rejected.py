"""The refusal of a P4Runtime entity or request item: a ``google.rpc`` code and a message.

Raised by the codec's decoders (``emulator.p4.decoders``) and by the
embedded target's P4Runtime server wherever it refuses something; the
server turns it into the ``p4.v1.Error`` of a batch item or the status of a
call. Its own module because both sides raise it and neither owns it.
"""
from __future__ import annotations

from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2 as pb


class Rejected(Exception):
    """An entity (or request item) refused with a canonical ``google.rpc`` code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message

    def error(self) -> pb.Error:
        """The ``p4.v1.Error`` of a batch item."""
        return pb.Error(canonical_code=self.code, message=self.message)


def invalid(message: str) -> Rejected:
    return Rejected(code_pb2.INVALID_ARGUMENT, message)

