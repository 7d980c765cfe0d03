"""Port status to the controller, and writes timed for a fabric time.

**Port status.** P4Runtime carries no port-status message of its own (a real
switch reports ports through gNMI, or a P4 digest); its stream has the
``other`` field (``google.protobuf.Any``) for what the architecture adds.
A port that loses or regains its signal (``dataplane/port_status.py``) is
sent to the primary controller as ``StreamMessageResponse.other`` (the
messages: ``emulator/p4/port_status.py``). The controller answers on its
stream once it holds the report (in virtual time; it handles the reports in
fabric order between windows) or once every write it makes for it is in
(outside). The switch's loop waits for that answer (``report``): so the
report is in before the switch's window ends (docs/virtual-time.md,
"Controller writes at a fabric time").

**Timed writes.** A Write whose gRPC metadata carries ``fabric-at-ns``
takes effect when the switch's fabric time reaches it, not when it arrives:
it is checked like any Write (device, role, primary, pipeline) and queued;
the switch's loop applies it at its first turn at or after that time
(``apply_due``), before any frame of that turn meets the tables. A time
not ahead of the switch's is refused (OUT_OF_RANGE): the write could not
be applied at it. A queued update that fails when applied is logged and counted
(``state.failed_timed_writes``, in the switch's stats): the controller computed it from its own model of the
switch, so that is a bug, not a user's error.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time

import grpc
from google.protobuf import any_pb2
from p4.v1 import p4runtime_pb2 as pb

from emulator.clock import NEVER_NS
from emulator.dataplane.p4rt_server.arbitration import Arbitration, Session
from emulator.p4.port_status import (AT_NS_METADATA, decode_other, port_status_message,
                                     switch_status_message)

log = logging.getLogger(__name__)

ANSWER_TIMEOUT_S = 120.0       # a controller this late is gone: the run fails, it does not hang


class _Refused(Exception):
    pass


class _LoopContext:
    """What ``Writer.write`` needs of a gRPC context, for a write applied by the loop."""

    def abort(self, code, details):
        raise _Refused(f"{code}: {details}")

    def abort_with_status(self, status):
        raise _Refused(status.details)


class PortEvents:
    """One switch's port reports and its controller's timed writes."""

    def __init__(self, state, arbitration: Arbitration, writer, device_id: int):
        self.state = state
        self.arbitration = arbitration
        self.writer = writer
        self.device_id = device_id
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._answered: dict[int, str | None] = {}     # event id -> the controller's error
        self._queued: list = []           # heap of (at_ns, seq, request)
        self._seq = itertools.count()

    # ------------------------------------------------------------ port status
    def report(self, port: int, up: bool, fabric_ns: int) -> bool:
        """Send the event to the primary and wait for its answer; False at
        once if there is no primary (nobody to wait for)."""
        return self._tell(lambda eid: port_status_message(eid, port, up, fabric_ns), f"port {port}'s status")

    def report_switch(self, up: bool, fabric_ns: int) -> bool:
        """The switch went down (its state and queued writes lost) or is back."""
        if not up:
            with self.state.lock:
                self._queued.clear()
                self.state.next_write_ns = NEVER_NS
        return self._tell(lambda eid: switch_status_message(eid, up, fabric_ns), "its reboot")

    def _tell(self, message, what: str) -> bool:
        session = self.arbitration.primary
        if session is None:
            return False
        event_id = next(self._ids)
        session.send(pb.StreamMessageResponse(other=message(event_id)))
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        with self._cond:
            while event_id not in self._answered:
                if not session.live:
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"device {self.device_id}: the controller did not answer "
                                       f"{what} within {ANSWER_TIMEOUT_S:g} s")
                self._cond.wait(min(left, 0.2))
            error = self._answered.pop(event_id)
        if error:
            raise RuntimeError(f"device {self.device_id}: the controller could not handle {what}: {error}")
        return True

    def on_other(self, session: Session, other: any_pb2.Any) -> bool:
        """A stream ``other`` from a controller: a port-status answer is
        taken (True); anything else is not ours (False)."""
        got = decode_other(other)
        if not got or "port_status_ack" not in got or session is not self.arbitration.primary:
            return False
        with self._cond:
            self._answered[int(got["port_status_ack"])] = got.get("error")
            self._cond.notify_all()
        return True

    # ------------------------------------------------------------ timed writes
    @staticmethod
    def timed(context: grpc.ServicerContext) -> int | None:
        """The fabric time a Write's metadata asks for (None: now)."""
        for key, value in context.invocation_metadata() or ():
            if key == AT_NS_METADATA:
                try:
                    return int(value)
                except ValueError:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                  f"{AT_NS_METADATA} must be an integer of fabric ns, not {value!r}")
        return None

    def queue(self, request, at_ns: int, context: grpc.ServicerContext) -> pb.WriteResponse:
        now = self.state.fabric_now_ns() if self.state.fabric_now_ns is not None else None
        if now is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          "no data plane is attached: a timed write needs its clock")
        if at_ns <= now:       # the loop may have served frames at ``now`` already
            context.abort(grpc.StatusCode.OUT_OF_RANGE, f"{AT_NS_METADATA} {at_ns} is not ahead of "
                          f"the switch's fabric time ({now} ns)")
        with self.state.lock:
            heapq.heappush(self._queued, (at_ns, next(self._seq), request))
            self.state.next_write_ns = self._queued[0][0]
        return pb.WriteResponse()

    def apply_due(self, now_ns: int) -> None:
        """The switch's loop: apply, in time then arrival order, every queued
        write timed for ``now_ns`` or before."""
        with self.state.lock:
            while self._queued and self._queued[0][0] <= now_ns:
                at_ns, _, request = heapq.heappop(self._queued)
                try:
                    self.writer.write(request, _LoopContext())
                except _Refused as e:
                    self.state.failed_timed_writes += 1
                    log.error("device %d: a write timed for %d ns failed: %s", self.device_id, at_ns, e)
            self.state.next_write_ns = self._queued[0][0] if self._queued else NEVER_NS
