"""The P4Runtime service's gRPC method handlers, parsing requests themselves.

grpcio parses each request with the handler's deserializer before the
servicer sees it, and a deserializer that raises makes grpcio end the call
with INTERNAL ("Exception deserializing request!") -- on the StreamChannel it
ends the stream, which the server would take for the controller leaving.
Bytes that are not a valid protobuf are the peer's error, not the server's:
the deserializers here never raise but hand over a ``Malformed``. A unary
RPC answers it with INVALID_ARGUMENT; on the stream the servicer answers a
``StreamError`` (INVALID_ARGUMENT) and the stream stays open.

The handlers are built from the service descriptor, so every RPC of
``p4.v1.P4Runtime`` goes through here (the generated
``add_P4RuntimeServicer_to_server`` is not used).
"""
from __future__ import annotations

from typing import Any, Callable

import grpc
from p4.v1 import p4runtime_pb2 as pb

_SERVICE = pb.DESCRIPTOR.services_by_name["P4Runtime"]
# Streaming RPCs (protobuf 3.20's Python descriptors do not say which are;
# the rest are unary-unary).
_SERVER_STREAMING = {"Read"}
_BIDI_STREAMING = {"StreamChannel"}


class Malformed:
    """A request whose bytes did not parse as ``type_name``."""

    __slots__ = ("type_name", "reason")

    def __init__(self, type_name: str, reason: str):
        self.type_name, self.reason = type_name, reason

    def __str__(self) -> str:
        return f"request is not a valid {self.type_name} ({self.reason})"


def _parser(cls: Any) -> Callable[[bytes], Any]:
    name = cls.DESCRIPTOR.full_name

    def parse(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except Exception as e:  # DecodeError, or what else a protobuf runtime raises on bad bytes
            return Malformed(name, str(e) or type(e).__name__)
    return parse


def _unary(fn: Callable) -> Callable:
    def call(request, context):
        if isinstance(request, Malformed):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(request))
        return fn(request, context)
    return call


def _server_streaming(fn: Callable) -> Callable:
    def call(request, context):
        if isinstance(request, Malformed):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(request))
        yield from fn(request, context)
    return call


def generic_handler(servicer: Any) -> grpc.GenericRpcHandler:
    """Handlers of every P4Runtime RPC, calling ``servicer``'s method of the same name.

    The bidirectional StreamChannel gets its messages as parsed or
    ``Malformed``: the servicer answers each bad one on the stream.
    """
    handlers = {}
    for m in _SERVICE.methods:
        fn = getattr(servicer, m.name)
        kw = {"request_deserializer": _parser(getattr(pb, m.input_type.name)),
              "response_serializer": getattr(pb, m.output_type.name).SerializeToString}
        if m.name in _BIDI_STREAMING:
            handlers[m.name] = grpc.stream_stream_rpc_method_handler(fn, **kw)
        elif m.name in _SERVER_STREAMING:
            handlers[m.name] = grpc.unary_stream_rpc_method_handler(_server_streaming(fn), **kw)
        else:
            handlers[m.name] = grpc.unary_unary_rpc_method_handler(_unary(fn), **kw)
    return grpc.method_handlers_generic_handler(_SERVICE.full_name, handlers)
