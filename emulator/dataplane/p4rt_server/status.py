"""gRPC statuses of the P4Runtime server: batch failures with one ``p4.v1.Error`` per item.

A Write or Read that fails in part ends with gRPC ``UNKNOWN`` whose
``grpc-status-details-bin`` holds a ``google.rpc.Status`` with one
``p4.v1.Error`` per update/entity, ``OK`` for those that succeeded (P4Runtime
spec 12.3, as PI does).
"""
from __future__ import annotations

import collections
import logging

import grpc
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2 as pb

from emulator.p4.codec import Rejected

# google.rpc code -> grpc.StatusCode
GRPC_CODE = {sc.value[0]: sc for sc in grpc.StatusCode}


class _Status(collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status):
    """A ``grpc.Status`` for ``abort_with_status`` (what ``grpc_status.rpc_status`` builds)."""


def batch_failure(message: str, failures: list[Rejected | None]) -> grpc.Status:
    """``UNKNOWN`` status whose details hold one ``p4.v1.Error`` per batch item."""
    status = status_pb2.Status(code=code_pb2.UNKNOWN, message=message)
    for f in failures:
        status.details.add().Pack(f.error() if f else pb.Error(canonical_code=code_pb2.OK))
    return _Status(GRPC_CODE[code_pb2.UNKNOWN], message, (("grpc-status-details-bin", status.SerializeToString()),))


def internal(log: logging.Logger, what: str, e: Exception) -> Rejected:
    """A bug met while serving one item: logged, and reported as that item's ``INTERNAL``."""
    log.exception("P4Runtime %s: internal error", what)
    return Rejected(code_pb2.INTERNAL, f"internal error: {e!r}")
