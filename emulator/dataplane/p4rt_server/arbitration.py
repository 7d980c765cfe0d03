"""Controller sessions and primary election (P4Runtime spec 5, stream 16; default role only).

Each StreamChannel is a ``Session``. Its first ``MasterArbitrationUpdate``
joins it; the session with the highest election id (at least the highest
ever accepted) is the primary, and every session is told who is, the new
primary last. A primary that leaves or lowers its id leaves the switch
without a primary until a session arbitrates again with an id at least the
highest one seen. Packet-outs on the stream go to ``on_packet``; replies,
advisories and packet-ins are queued on the session and written by the
RPC's own thread. A message that is not a valid ``StreamMessageRequest``
(``rpc.Malformed``) is answered with a ``StreamError`` (INVALID_ARGUMENT);
the stream stays open.
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable, Iterator

import grpc
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2 as pb

from emulator.dataplane.p4rt_server.rpc import Malformed
from emulator.dataplane.p4rt_server.status import GRPC_CODE
from emulator.p4.rejected import Rejected
from emulator.p4.values import uint128, uint128_value

log = logging.getLogger(__name__)

_EOF = object()


class Session:
    """One StreamChannel: a controller's session."""

    def __init__(self, peer: str):
        self.peer = peer
        self.out: queue.Queue = queue.Queue()  # StreamMessageResponse | Rejected (closes) | _EOF
        self.election_id: int | None = None
        self.live = False  # arbitrated and not gone

    def send(self, msg: pb.StreamMessageResponse) -> None:
        self.out.put(msg)


class Arbitration:
    """The sessions of one device and which one is the primary."""

    def __init__(self, device_id: int):
        self.device_id = device_id
        self._lock = threading.Lock()
        self._sessions: list[Session] = []
        self._primary: Session | None = None
        self._election_past: int | None = None  # highest election id ever accepted as primary

    # ------------------------------------------------------------ queries

    @property
    def primary(self) -> Session | None:
        with self._lock:
            return self._primary

    def is_primary_request(self, request: Any) -> bool:
        """Whether a unary request carries the primary's election id."""
        if not request.HasField("election_id"):
            return False
        with self._lock:
            return self._primary is not None and uint128_value(request.election_id) == self._election_past

    # ------------------------------------------------------------ the stream

    def stream(self, requests: Iterator[pb.StreamMessageRequest], context: grpc.ServicerContext,
               on_packet: Callable[[Session, pb.PacketOut], None],
               on_other: Callable[[Session, Any], bool] | None = None
               ) -> Iterator[pb.StreamMessageResponse]:
        """Body of a StreamChannel RPC: a reader thread consumes ``requests``, this yields the replies.
        ``on_other``: takes an ``other`` message it knows (True); the rest are refused."""
        session = Session(context.peer())

        def on_rpc_done() -> None:
            self.drop(session)
            session.out.put(_EOF)

        context.add_callback(on_rpc_done)
        reader = threading.Thread(target=self._read, args=(session, requests, on_packet, on_other),
                                  name=f"p4rt-dev{self.device_id}-stream", daemon=True)
        reader.start()
        try:
            while True:
                item = session.out.get()
                if item is _EOF:
                    return
                if isinstance(item, Rejected):
                    context.abort(GRPC_CODE[item.code], item.message)
                yield item
        finally:
            self.drop(session)

    def _read(self, session: Session, requests: Iterator[pb.StreamMessageRequest],
              on_packet: Callable[[Session, pb.PacketOut], None],
              on_other: Callable[[Session, Any], bool] | None = None) -> None:
        try:
            for req in requests:
                if isinstance(req, Malformed):  # answered; the stream and the session go on
                    session.send(pb.StreamMessageResponse(error=pb.StreamError(
                        canonical_code=code_pb2.INVALID_ARGUMENT, message=f"stream message: {req}")))
                    continue
                kind = req.WhichOneof("update")
                if kind == "arbitration":
                    fail = self.arbitrate(session, req.arbitration)
                    if fail is not None:
                        session.out.put(fail)
                        return
                elif kind == "packet":
                    on_packet(session, req.packet)
                elif kind == "digest_ack":
                    session.send(pb.StreamMessageResponse(error=pb.StreamError(
                        canonical_code=code_pb2.INVALID_ARGUMENT, message="fabric.p4 has no digests",
                        digest_list_ack=pb.DigestListAckError(digest_list_ack=req.digest_ack))))
                elif kind == "other" and not (on_other is not None and on_other(session, req.other)):
                    session.send(pb.StreamMessageResponse(error=pb.StreamError(
                        canonical_code=code_pb2.UNIMPLEMENTED, message="'other' stream messages are not supported",
                        other=pb.StreamOtherError(other=req.other))))
        except grpc.RpcError:
            pass  # the client went away
        except Exception:
            log.exception("P4Runtime StreamChannel reader failed")
        finally:
            self.drop(session)
            session.out.put(_EOF)

    # ------------------------------------------------------------ election

    def arbitrate(self, session: Session, upd: pb.MasterArbitrationUpdate) -> Rejected | None:
        """Apply one arbitration update; a ``Rejected`` closes the stream with its code."""
        first = not session.live
        if upd.device_id != self.device_id:
            if first:
                return Rejected(code_pb2.NOT_FOUND,
                                f"unknown device_id {upd.device_id} (this is device {self.device_id})")
            return Rejected(code_pb2.FAILED_PRECONDITION, "device_id of a live stream cannot change")
        if upd.role.name or upd.role.id:
            return Rejected(code_pb2.UNIMPLEMENTED, "roles are not supported: leave role unset (default role)")
        if upd.role.HasField("config"):
            return Rejected(code_pb2.INVALID_ARGUMENT, "role.config is not supported")
        eid = uint128_value(upd.election_id) if upd.HasField("election_id") else None
        with self._lock:
            if eid is not None and any(s is not session and s.election_id == eid for s in self._sessions):
                return Rejected(code_pb2.INVALID_ARGUMENT, f"election_id {eid} is used by another controller")
            if first:
                session.live = True
                self._sessions.append(session)
            session.election_id = eid
            was_primary = self._primary is session
            if eid is not None and (self._election_past is None or eid >= self._election_past):
                self._election_past = eid
                self._primary = session
                # Everybody learns of the (new or confirmed) primary; the primary last.
                for s in self._sessions:
                    if s is not session:
                        self._notify(s)
                self._notify(session)
            elif was_primary:  # the primary downgraded itself
                self._primary = None
                for s in self._sessions:
                    self._notify(s)
            else:
                self._notify(session)
        return None

    def _notify(self, session: Session) -> None:
        """Arbitration advisory to one session (call with ``_lock``)."""
        upd = pb.MasterArbitrationUpdate(device_id=self.device_id)
        if self._election_past is not None:
            upd.election_id.CopyFrom(uint128(self._election_past))
        if self._primary is session:
            upd.status.code, upd.status.message = code_pb2.OK, "you are the primary"
        elif self._primary is not None:
            upd.status.code, upd.status.message = code_pb2.ALREADY_EXISTS, "another controller is the primary"
        else:
            upd.status.code, upd.status.message = code_pb2.NOT_FOUND, "there is no primary controller"
        session.send(pb.StreamMessageResponse(arbitration=upd))

    def drop(self, session: Session) -> None:
        """A session is gone: if it was the primary, everybody learns there is none."""
        with self._lock:
            if not session.live:
                return
            session.live = False
            if session in self._sessions:
                self._sessions.remove(session)
            if self._primary is session:
                self._primary = None
                for s in self._sessions:
                    self._notify(s)

    def close(self) -> None:
        """End every session (the server is stopping)."""
        with self._lock:
            sessions, self._sessions, self._primary = list(self._sessions), [], None
        for s in sessions:
            s.live = False
            s.out.put(_EOF)
