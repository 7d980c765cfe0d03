"""The Write RPC: one batch of updates, dispatched to the entity managers, with undo.

Every change the managers make to the switch's state or their own
bookkeeping goes through the batch's ``Journal``, so a batch that must be
all-or-none (``ROLLBACK_ON_ERROR``, ``DATAPLANE_ATOMIC``) is undone when an
update fails; the updates that had succeeded are then reported as
``ABORTED``. A failing batch is answered by ``status.batch_failure``: one
``p4.v1.Error`` per update, bounded to what a gRPC trailer holds. Undoing touches only what the batch changed: the pipeline
counts packets into the same counter arrays meanwhile.

Each update arrives serialized (``rpc.UnparsedWriteRequest``) and is parsed
when its turn comes, so a batch's parsed updates never all exist at once;
bytes that are not an ``Update`` fail that update (INVALID_ARGUMENT).

The batch runs under ``state.lock`` and ends with one ``state.changed()``,
so the pipeline sees each batch as a whole (``DATAPLANE_ATOMIC`` therefore
holds as long as the pipeline reads the state under the lock / by
generation).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

import grpc
from google.protobuf.message import Message
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2 as pb

from emulator.dataplane.p4rt_server.status import Failure, Outcomes, batch_failure, failure, internal
from emulator.dataplane.state import SwitchState
from emulator.p4.rejected import Rejected, invalid

log = logging.getLogger(__name__)

class Journal:
    """How to undo one Write batch: every change the managers make goes through ``set``/``delete``.

    With ``undo``, a dict is copied when the batch first changes it and put
    back in place (same object, same order: Read and the pipeline iterate
    in insertion order); a list cell (a counter) is logged one by one, so
    that undoing leaves the other cells' concurrent counts alone. Without
    ``undo`` (``CONTINUE_ON_ERROR``) changes are just made.
    """

    __slots__ = ("_dicts", "_cells")

    def __init__(self, undo: bool):
        self._dicts: dict[int, tuple[dict, dict]] | None = {} if undo else None  # id -> (dict, copy)
        self._cells: list[tuple[list, int, Any]] = []

    def _keep(self, d: dict) -> None:
        if self._dicts is not None and id(d) not in self._dicts:
            self._dicts[id(d)] = (d, d.copy())

    def set(self, container: dict | list, key: Any, value: Any) -> None:
        if isinstance(container, list):
            if self._dicts is not None:
                self._cells.append((container, key, container[key]))
        else:
            self._keep(container)
        container[key] = value

    def delete(self, d: dict, key: Any) -> None:
        self._keep(d)
        del d[key]

    def discard(self, d: dict, key: Any) -> None:
        if key in d:
            self.delete(d, key)

    def rollback(self) -> None:
        for cells, index, old in reversed(self._cells):
            cells[index] = old
        for d, copy in (self._dicts or {}).values():
            d.clear()
            d.update(copy)


# Applies one update of an entity kind: (update type, entity message, journal).
WriteHandler = Callable[[int, Message, Journal], None]

_UPDATE_TYPES = (pb.Update.INSERT, pb.Update.MODIFY, pb.Update.DELETE)
_ROLLED_BACK: Failure = (code_pb2.ABORTED, "rolled back: another update in the batch failed")


def _parse_update(raw: bytes) -> pb.Update:
    try:
        return pb.Update.FromString(raw)
    except Exception as e:  # DecodeError, or what else a protobuf runtime raises on bad bytes
        raise invalid(f"update is not a valid p4.v1.Update ({e or type(e).__name__})") from None


class Writer:
    """Applies Write batches to the state through the managers' handlers (by ``Entity`` field)."""

    def __init__(self, state: SwitchState, handlers: Mapping[str, WriteHandler]):
        self.state = state
        self.handlers = handlers

    def write(self, request: Any, context: grpc.ServicerContext) -> pb.WriteResponse:
        """The batch of an accepted ``rpc.UnparsedWriteRequest`` (device, role,
        primary and pipeline already checked)."""
        W = pb.WriteRequest
        if request.atomicity not in (W.CONTINUE_ON_ERROR, W.ROLLBACK_ON_ERROR, W.DATAPLANE_ATOMIC):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown atomicity {request.atomicity}")
        all_or_none = request.atomicity != W.CONTINUE_ON_ERROR
        outcomes = Outcomes()
        journal = Journal(undo=all_or_none)
        with self.state.lock:
            for raw in request.updates:
                try:
                    self._apply(_parse_update(raw), journal)
                    outcomes.ok()
                except Rejected as f:
                    outcomes.failed(failure(f))
                except Exception as e:  # a bug here must not kill the batch
                    outcomes.failed(internal(log, "Write", e))
            failures: list[Failure | None] = outcomes
            failed = any(failures)
            if failed and all_or_none:
                journal.rollback()
                failures = [f or _ROLLED_BACK for f in failures]
            self.state.changed()
        del journal  # the undo copies go now, not when the (possibly slow) abort returns
        if failed:
            context.abort_with_status(batch_failure("Write failure", failures))
        return pb.WriteResponse()

    def _apply(self, update: pb.Update, journal: Journal) -> None:
        utype = update.type
        if utype not in _UPDATE_TYPES:
            raise invalid("update type is not set" if utype == pb.Update.UNSPECIFIED
                          else f"unknown update type {utype}")
        kind = update.entity.WhichOneof("entity")
        handler = self.handlers.get(kind)
        if handler is not None:
            handler(utype, getattr(update.entity, kind), journal)
        elif kind is None:
            raise invalid("entity is not set")
        elif kind == "register_entry":
            raise Rejected(code_pb2.UNIMPLEMENTED, "registers are the data plane's own state "
                                                   "(BMv2's P4Runtime server cannot write them either)")
        else:
            raise invalid(f"{kind}: fabric.p4 has no such objects")
