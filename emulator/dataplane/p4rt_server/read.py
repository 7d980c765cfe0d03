"""The Read RPC: each requested entity (a wildcard or a key) answered by its manager.

Entities are read under ``state.lock`` (a consistent view of one batch of
writes) and streamed ``READ_CHUNK`` per ``ReadResponse``. Requests that fail
are reported after the others' results, as one ``p4.v1.Error`` each
(bounded: ``status.batch_failure``).
"""
from __future__ import annotations

import logging
from typing import Callable, Iterator, Mapping

import grpc
from google.protobuf.message import Message
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2 as pb

from emulator.dataplane.p4rt_server.status import Failure, batch_failure, failure, internal
from emulator.dataplane.state import SwitchState
from emulator.p4.codec import Rejected, invalid

log = logging.getLogger(__name__)

READ_CHUNK = 256  # entities per ReadResponse message

# Answers one query of an entity kind with messages of that kind.
ReadHandler = Callable[[Message], list]


class Reader:
    """Answers Read requests through the managers' handlers (by ``Entity`` field)."""

    def __init__(self, state: SwitchState, handlers: Mapping[str, ReadHandler]):
        self.state = state
        self.handlers = handlers

    def read(self, request: pb.ReadRequest, context: grpc.ServicerContext) -> Iterator[pb.ReadResponse]:
        """Responses to an accepted request (device, role and pipeline already checked)."""
        results: list[pb.Entity] = []
        failures: list[Failure | None] = []
        with self.state.lock:
            for entity in request.entities:
                try:
                    results.extend(self._read(entity))
                    failures.append(None)
                except Rejected as f:
                    failures.append(failure(f))
                except Exception as e:
                    failures.append(internal(log, "Read", e))
        for i in range(0, len(results), READ_CHUNK):
            yield pb.ReadResponse(entities=results[i:i + READ_CHUNK])
        if any(failures):
            context.abort_with_status(batch_failure("Read failure", failures, noun="requests"))

    def _read(self, entity: pb.Entity) -> list[pb.Entity]:
        kind = entity.WhichOneof("entity")
        handler = self.handlers.get(kind)
        if handler is not None:
            return [pb.Entity(**{kind: msg}) for msg in handler(getattr(entity, kind))]
        if kind is None:
            raise invalid("entity is not set")
        if kind == "register_entry":
            raise Rejected(code_pb2.UNIMPLEMENTED, "registers are the data plane's own state "
                                                   "(BMv2's P4Runtime server cannot read them either)")
        # Other entity kinds: fabric.p4 has none, so a wildcard read is empty.
        sub = getattr(entity, kind)
        ids = [v for f, v in sub.ListFields() if f.name.endswith("_id") and isinstance(v, int)]
        if any(ids):
            raise invalid(f"{kind}: fabric.p4 has no such object (id {ids[0]})")
        return []
