"""The Read RPC: each requested entity (a wildcard or a key) answered by its manager.

A Read is a batch of requests, answered as P4Runtime spec 13.3 (Read RPC,
"Batch Processing") says: under ``state.lock`` (a consistent view of one
batch of writes) every request is validated and read; the entities of the
requests that succeeded are streamed, ``READ_CHUNK`` per ``ReadResponse``;
then, if any request failed, the Read ends with ``UNKNOWN`` and one
``p4.v1.Error`` per request, in request order, ``OK`` for those that
succeeded (``status.batch_failure``: bounded to a trailer, the first failures
quoted in the message). So a read of every kind returns every kind the
target serves, and says which requests it could not answer and why.

What each request gets:

* an ``Entity`` with no kind set: INVALID_ARGUMENT (spec 13.2: an empty
  ``Entity`` is not a wildcard over every kind);
* tables, action profiles, counters, clone sessions: their managers;
* ``register_entry``: UNIMPLEMENTED. fabric.p4's registers are data-plane
  state: four of its five hold the PFC bookkeeping of BMv2's traffic manager
  (``[BMv2 TM]`` in fabric.p4), which the embedded target's own traffic
  manager replaces, so it has no faithful values for them; and BMv2's
  P4Runtime server (PI) reads no registers either ("Register reads are not
  supported yet", UNIMPLEMENTED) -- a controller that read them here would
  fail there. Per request, like any other failure: the rest of the Read is
  answered. (PI itself ends the whole Read with the first failing request's
  code instead of the spec's per-request details.)
* other kinds (meters, direct counters and meters, value sets, digests,
  externs): fabric.p4 has none, so a wildcard (ids 0) is empty and a
  non-zero id is INVALID_ARGUMENT.
"""
from __future__ import annotations

import logging
from typing import Callable, Iterator, Mapping

import grpc
from google.protobuf.message import Message
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2 as pb

from emulator.dataplane.p4rt_server.status import Outcomes, batch_failure, failure, internal
from emulator.dataplane.state import SwitchState
from emulator.p4.rejected import Rejected, invalid

log = logging.getLogger(__name__)

READ_CHUNK = 256  # entities per ReadResponse message
REGISTERS_UNIMPLEMENTED = ("register reads are not supported: fabric.p4's registers are data-plane "
                           "state (BMv2's P4Runtime server does not read them either)")

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
        outcomes = Outcomes()
        with self.state.lock:
            for entity in request.entities:
                try:
                    results.extend(self._read(entity))
                    outcomes.ok()
                except Rejected as f:
                    outcomes.failed(failure(f))
                except Exception as e:
                    outcomes.failed(internal(log, "Read", e))
        for i in range(0, len(results), READ_CHUNK):
            yield pb.ReadResponse(entities=results[i:i + READ_CHUNK])
        if any(outcomes):
            context.abort_with_status(batch_failure("Read failure", outcomes, noun="requests"))

    def _read(self, entity: pb.Entity) -> list[pb.Entity]:
        kind = entity.WhichOneof("entity")
        handler = self.handlers.get(kind)
        if handler is not None:
            return [pb.Entity(**{kind: msg}) for msg in handler(getattr(entity, kind))]
        if kind is None:
            raise invalid("entity is not set (an empty Entity is no wildcard: name a kind)")
        if kind == "register_entry":
            raise Rejected(code_pb2.UNIMPLEMENTED, REGISTERS_UNIMPLEMENTED)
        # Other entity kinds: fabric.p4 has none, so a wildcard read is empty.
        sub = getattr(entity, kind)
        ids = [v for f, v in sub.ListFields() if f.name.endswith("_id") and isinstance(v, int)]
        if any(ids):
            raise invalid(f"{kind}: fabric.p4 has no such object (id {ids[0]})")
        return []
