"""The P4Runtime service's gRPC method handlers, parsing requests themselves.

grpcio parses each request with the handler's deserializer before the
servicer sees it, and a deserializer that raises makes grpcio end the call
with INTERNAL ("Exception deserializing request!") -- on the StreamChannel it
ends the stream, which the server would take for the controller leaving.
Bytes that are not a valid protobuf are the peer's error, not the server's:
the deserializers here never raise but hand over a ``Malformed``. A unary
RPC answers it with INVALID_ARGUMENT; on the stream the servicer answers a
``StreamError`` (INVALID_ARGUMENT) and the stream stays open.

A Write's updates are parsed one at a time, by the Writer, not here: a
parsed ``Update`` is a tree of message objects (~5 KB of them on protobuf's
pure-Python runtime), so a 10,000-update batch parsed whole took ~50 MB at
once -- freed after the call, but not given
back to the system (objects that live on, such as the entries the batch
inserted, pin the allocator's arenas), so the server's RSS climbed by tens
of MB per large batch. ``UnparsedWriteRequest`` is ``p4.v1.WriteRequest``
with ``updates`` read as ``repeated bytes`` (the wire format of a message
field and of a bytes field is the same): ~70 bytes per update.

The handlers are built from the service descriptor, so every RPC of
``p4.v1.P4Runtime`` goes through here (the generated
``add_P4RuntimeServicer_to_server`` is not used).
"""
from __future__ import annotations

from typing import Any, Callable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from p4.v1 import p4runtime_pb2 as pb

_SERVICE = pb.DESCRIPTOR.services_by_name["P4Runtime"]
# Streaming RPCs (protobuf 3.20's Python descriptors do not say which are;
# the rest are unary-unary).
_SERVER_STREAMING = {"Read"}
_BIDI_STREAMING = {"StreamChannel"}


def _unparsed_write_request() -> type:
    """``p4.v1.WriteRequest`` but for ``updates``: ``repeated bytes``, each a serialized ``Update``."""
    file = descriptor_pb2.FileDescriptorProto(
        name="emulator/p4rt_server/unparsed_write_request.proto", package="emulator.p4rt_server",
        syntax="proto3", dependency=[pb.DESCRIPTOR.name])
    msg = file.message_type.add()
    pb.WriteRequest.DESCRIPTOR.CopyToProto(msg)
    msg.name = "UnparsedWriteRequest"
    msg.ClearField("enum_type")            # Atomicity stays p4.v1.WriteRequest's (by type_name)
    (updates,) = [f for f in msg.field if f.name == "updates"]
    updates.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
    updates.ClearField("type_name")
    pool = descriptor_pool.Default()      # where p4runtime.proto, its dependency, is
    pool.AddSerializedFile(file.SerializeToString())
    desc = pool.FindMessageTypeByName(f"{file.package}.{msg.name}")
    get_class = getattr(message_factory, "GetMessageClass", None)   # protobuf >= 4.21
    return get_class(desc) if get_class else message_factory.MessageFactory(pool).GetPrototype(desc)


UnparsedWriteRequest = _unparsed_write_request()
# Request types the handlers parse, where they are not the RPC's own.
_REQUEST_TYPES = {"Write": UnparsedWriteRequest}


class Malformed:
    """A request whose bytes did not parse as ``type_name``."""

    __slots__ = ("type_name", "reason")

    def __init__(self, type_name: str, reason: str):
        self.type_name, self.reason = type_name, reason

    def __str__(self) -> str:
        return f"request is not a valid {self.type_name} ({self.reason})"


def _parser(cls: Any, name: str) -> Callable[[bytes], Any]:
    """Parses bytes as ``cls``; ``name``: the type the peer sent (for the error)."""

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
        parse_as = _REQUEST_TYPES.get(m.name) or getattr(pb, m.input_type.name)
        kw = {"request_deserializer": _parser(parse_as, m.input_type.full_name),
              "response_serializer": getattr(pb, m.output_type.name).SerializeToString}
        if m.name in _BIDI_STREAMING:
            handlers[m.name] = grpc.stream_stream_rpc_method_handler(fn, **kw)
        elif m.name in _SERVER_STREAMING:
            handlers[m.name] = grpc.unary_stream_rpc_method_handler(_server_streaming(fn), **kw)
        else:
            handlers[m.name] = grpc.unary_unary_rpc_method_handler(_unary(fn), **kw)
    return grpc.method_handlers_generic_handler(_SERVICE.full_name, handlers)
