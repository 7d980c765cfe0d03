"""Packet-out and packet-in on the stream (P4Runtime spec 16).

A packet-out from the primary, with every ``packet_out`` metadata field, is
handed to the data plane (``state.packet_out_handler``); anything else is
answered with a ``StreamError`` that carries the packet back. Packet-ins
(``state.packet_in_handler``, called from the data plane's thread) go to
the primary only; with no primary, or a primary ``PACKET_IN_BACKLOG``
packets behind, they are dropped and counted.
"""
from __future__ import annotations

import logging

from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2 as pb

from emulator.dataplane.p4rt_server.arbitration import Arbitration, Session
from emulator.dataplane.p4rt_server.pipeline_config import PipelineConfig
from emulator.dataplane.state import SwitchState
from emulator.p4.codec import Codec
from emulator.p4.rejected import Rejected

log = logging.getLogger(__name__)

PACKET_IN_BACKLOG = 1024  # packet-ins queued to a slow controller before dropping


class PacketIO:
    def __init__(self, state: SwitchState, codec: Codec, arbitration: Arbitration, pipeline: PipelineConfig):
        self.state = state
        self.codec = codec
        self.arbitration = arbitration
        self.pipeline = pipeline
        self.packet_in_drops = 0

    @staticmethod
    def _refuse(session: Session, code: int, message: str, pkt: pb.PacketOut) -> None:
        session.send(pb.StreamMessageResponse(error=pb.StreamError(
            canonical_code=code, message=message, packet_out=pb.PacketOutError(packet_out=pkt))))

    def packet_out(self, session: Session, pkt: pb.PacketOut) -> None:
        """A packet-out received on ``session``'s stream."""
        if self.arbitration.primary is not session:
            self._refuse(session, code_pb2.PERMISSION_DENIED, "only the primary controller may send packet-outs", pkt)
            return
        if self.pipeline.current is None:
            self._refuse(session, code_pb2.FAILED_PRECONDITION, "no forwarding pipeline config has been set", pkt)
            return
        try:
            values = self.codec.decode_packet_out(pkt)
        except Rejected as e:
            self._refuse(session, e.code, e.message, pkt)
            return
        handler = self.state.packet_out_handler
        if handler is None:
            self._refuse(session, code_pb2.UNAVAILABLE, "no data plane is attached to this switch", pkt)
            return
        try:
            handler(bytes(pkt.payload), values["egress_port"])
        except Exception as e:
            log.exception("packet-out handler failed")
            self._refuse(session, code_pb2.INTERNAL, f"packet-out failed: {e!r}", pkt)

    def packet_in(self, payload: bytes, ingress_port: int) -> None:
        """``state.packet_in_handler``: queue a PacketIn to the primary (thread-safe; drops if none)."""
        session = self.arbitration.primary
        if session is None or self.pipeline.current is None or session.out.qsize() >= PACKET_IN_BACKLOG:
            self.packet_in_drops += 1
            return
        session.send(pb.StreamMessageResponse(packet=self.codec.packet_in(payload, ingress_port)))
