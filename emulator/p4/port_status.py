"""The port-status messages a switch and its controller exchange on the
P4Runtime stream's ``other`` field, and the metadata of a timed Write
(``dataplane/p4rt_server/port_events.py`` says why and how).

Both are ``google.protobuf.Struct``s packed in an ``Any``: a well-known type
any P4Runtime client decodes without this project's protos.

* switch -> controller: ``{"port_status": {"event_id", "port",
  "oper_status": "DOWN"|"UP", "fabric_ns"}}``
* switch -> controller: ``{"switch_status": {"event_id", "status":
  "DOWN"|"UP", "fabric_ns"}}``: a modelled reboot (``switch_down``/``up``),
  what a controller learns from the switch's stream breaking and its
  agent arbitrating again once it is back
* controller -> switch: ``{"port_status_ack": event_id}`` (both kinds;
  ``"error"``: it could not reroute)
"""
from __future__ import annotations

from google.protobuf import any_pb2, struct_pb2
from google.protobuf.json_format import MessageToDict

# gRPC metadata of a Write: the fabric ns at which the switch applies it
AT_NS_METADATA = "fabric-at-ns"


def _pack(d: dict) -> any_pb2.Any:
    msg = struct_pb2.Struct()
    msg.update(d)
    out = any_pb2.Any()
    out.Pack(msg)
    return out


def port_status_message(event_id: int, port: int, up: bool, fabric_ns: int) -> any_pb2.Any:
    # Struct numbers are doubles: exact for fabric ns below 2**53 (104 days)
    return _pack({"port_status": {"event_id": event_id, "port": port,
                                  "oper_status": "UP" if up else "DOWN", "fabric_ns": fabric_ns}})


def switch_status_message(event_id: int, up: bool, fabric_ns: int) -> any_pb2.Any:
    return _pack({"switch_status": {"event_id": event_id, "status": "UP" if up else "DOWN",
                                    "fabric_ns": fabric_ns}})


def port_status_ack(event_id: int, error: str | None = None) -> any_pb2.Any:
    """The answer to a report: its writes are in (``error``: the controller
    could not make them, and the switch fails rather than run on unrerouted)."""
    return _pack({"port_status_ack": event_id, **({"error": error} if error else {})})


def decode_other(other: any_pb2.Any) -> dict | None:
    """The dict an ``other`` message packs (None: not a Struct)."""
    msg = struct_pb2.Struct()
    if not other.Is(struct_pb2.Struct.DESCRIPTOR) or not other.Unpack(msg):
        return None
    return MessageToDict(msg)
