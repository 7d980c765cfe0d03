"""P4Runtime client: one controller session to one switch.

``SwitchConnection`` speaks plain P4Runtime 1.x, so it drives BMv2's
``simple_switch_grpc`` and the embedded target alike. It opens the stream
channel, arbitrates, and (by default) waits to become the primary.

    conn = SwitchConnection("127.0.0.1:50001", device_id=1)
    conn.set_pipeline(P4Info.load(), device_config=bmv2_json_bytes)
    codec = conn.codec                            # emulator.p4.codec: builds the entities
    conn.insert([codec.table_entry("my_station", {"eth_dst": "02:00:00:00:01:00"}, "NoAction")])
    conn.read_counter("rx_port_counter")          # {index: (packets, bytes)}
    conn.close()

Errors: ``P4RuntimeError`` (any RPC failure, with the gRPC code), its
subclasses ``WriteError`` (``.errors``: one ``UpdateError`` per failed
update the server's details cover; a large batch's details cover its
first updates only, ``.covered`` says how many), ``ReadError`` (the same
per request, and ``.entities``: what the requests that succeeded returned)
and ``ArbitrationError`` (could not become primary). ``write`` sends ``CONTINUE_ON_ERROR`` batches
unless told otherwise: the updates that succeed stay.
"""
from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import grpc
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as pb
from p4.v1 import p4runtime_pb2_grpc as pb_grpc

from emulator.p4.codec import Codec
from emulator.p4.p4info import P4Info
from emulator.p4.values import uint128, uint128_value

log = logging.getLogger(__name__)

_END = object()


def code_name(code: int) -> str:
    try:
        return code_pb2.Code.Name(code)
    except ValueError:
        return str(code)


@dataclass(frozen=True)
class UpdateError:
    """One failed item of a Write (or Read) batch."""

    index: int          # position in the batch
    code: int           # google.rpc.Code
    message: str
    update: Any = None  # the p4.v1.Update (Write) or Entity (Read)

    def __str__(self) -> str:
        return f"#{self.index}: {code_name(self.code)}: {self.message}"


class P4RuntimeError(Exception):
    """A P4Runtime RPC failed."""

    def __init__(self, what: str, code: grpc.StatusCode | None, message: str,
                 errors: list[UpdateError] | None = None, covered: int | None = None):
        self.what, self.code, self.message = what, code, message
        self.errors: list[UpdateError] = errors or []
        # Batch items the server's details covered (one p4.v1.Error each, in
        # order); fewer than the batch when it cut them to fit the trailer
        # (the message then says so and quotes the first failures). None: no details.
        self.covered = covered
        text = f"{what}: {code.name if code else 'ERROR'}: {message}"
        if self.errors:
            text += "".join(f"\n  {e}" for e in self.errors)
        super().__init__(text)

    @property
    def codes(self) -> list[int]:
        """Canonical codes of the failed items, in batch order."""
        return [e.code for e in self.errors]


class WriteError(P4RuntimeError):
    """A Write failed; ``.errors`` lists the updates that failed and why."""


class ReadError(P4RuntimeError):
    """A Read failed; ``.errors`` lists the requests that failed and why, and
    ``.entities`` holds what the server returned before its status: the
    entities of the requests that succeeded (P4Runtime spec 13.3)."""

    def __init__(self, *args: Any, entities: list[pb.Entity] | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.entities: list[pb.Entity] = entities or []


class ArbitrationError(P4RuntimeError):
    """The session could not be established or is not the primary."""


def _details(err: grpc.RpcError) -> tuple[list[tuple[int, int, str]], int | None]:
    """``(index, canonical_code, message)`` of every p4.v1.Error in a gRPC
    error's details, and how many batch items the details cover (None: no details)."""
    out, covered = [], None
    for key, value in (err.trailing_metadata() or ()):
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status()
        try:
            status.ParseFromString(value)
        except Exception:  # a peer's garbage: the gRPC code and message still say what failed
            continue
        covered = len(status.details)
        for i, any_msg in enumerate(status.details):
            e = pb.Error()
            if any_msg.Unpack(e):
                out.append((i, e.canonical_code, e.message))
    return out, covered


def _entity(item: Any) -> pb.Entity:
    if isinstance(item, pb.Entity):
        return item
    for field in pb.Entity.DESCRIPTOR.fields:
        if item.DESCRIPTOR is field.message_type:
            ent = pb.Entity()
            getattr(ent, field.name).CopyFrom(item)
            return ent
    raise TypeError(f"{type(item).__name__} is not a P4Runtime entity")


class SwitchConnection:
    """A controller session (stream channel + unary RPCs) to one P4Runtime device.

    ``election_id`` is ``(high, low)`` or an int. With ``require_primary``
    (default) the constructor waits up to ``timeout`` seconds to be primary
    and raises ``ArbitrationError`` otherwise; without it the connection may
    stay a backup (see ``is_primary``, ``arbitration_status``).
    """

    def __init__(self, address: str, device_id: int, election_id: Any = (0, 1), *,
                 p4info: P4Info | p4info_pb2.P4Info | None = None,
                 timeout: float = 10.0, require_primary: bool = True):
        self.address = address
        self.device_id = device_id
        self.election_id = uint128_value(uint128(election_id))
        self.p4info: P4Info | None = P4Info.coerce(p4info) if p4info is not None else None
        self.stream_errors: list[pb.StreamError] = []
        self._cond = threading.Condition()
        self._arbitration: pb.MasterArbitrationUpdate | None = None
        self._stream_failure: grpc.RpcError | None = None
        self._stream_done = False
        self._requests: queue.Queue = queue.Queue()
        self._packet_ins: queue.Queue = queue.Queue()
        self._closed = False

        self._channel = grpc.insecure_channel(address)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise ArbitrationError(f"P4Runtime {address}", grpc.StatusCode.UNAVAILABLE,
                                   f"no P4Runtime server answered within {timeout:g}s") from None
        self._stub = pb_grpc.P4RuntimeStub(self._channel)
        self._stream = self._stub.StreamChannel(self._request_iter())
        self._reader = threading.Thread(target=self._read_stream, daemon=True,
                                        name=f"p4rt-client-{address}-{device_id}")
        self._reader.start()
        try:
            self._send_arbitration()
            if require_primary:
                self.wait_for_primary(timeout)
            else:
                self._wait_arbitration(timeout)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ stream

    def _request_iter(self):
        while True:
            item = self._requests.get()
            if item is _END:
                return
            yield item

    def _read_stream(self) -> None:
        try:
            for resp in self._stream:
                kind = resp.WhichOneof("update")
                if kind == "arbitration":
                    with self._cond:
                        self._arbitration = resp.arbitration
                        self._cond.notify_all()
                elif kind == "packet":
                    self._packet_ins.put(resp.packet)
                elif kind == "error":
                    log.warning("P4Runtime %s device %d stream error: %s %s", self.address, self.device_id,
                                code_name(resp.error.canonical_code), resp.error.message)
                    with self._cond:
                        self.stream_errors.append(resp.error)
                        self._cond.notify_all()
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED or not self._closed:
                with self._cond:
                    self._stream_failure = e
        finally:
            with self._cond:
                self._stream_done = True
                self._cond.notify_all()

    def _send_arbitration(self) -> None:
        req = pb.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        req.arbitration.election_id.CopyFrom(uint128(self.election_id))
        with self._cond:
            self._arbitration = None
        self._requests.put(req)

    def _stream_problem(self) -> ArbitrationError | None:
        if self._stream_failure is not None:
            e = self._stream_failure
            return ArbitrationError(f"P4Runtime {self.address} device {self.device_id}: stream channel",
                                    e.code(), e.details() or "")
        if self._stream_done:
            return ArbitrationError(f"P4Runtime {self.address} device {self.device_id}: stream channel",
                                    None, "closed by the server")
        return None

    def _wait_arbitration(self, timeout: float) -> pb.MasterArbitrationUpdate:
        with self._cond:
            ok = self._cond.wait_for(lambda: self._arbitration is not None or self._stream_done, timeout)
            if self._arbitration is not None:
                return self._arbitration
            problem = self._stream_problem()
        if problem:
            raise problem
        assert not ok
        raise ArbitrationError(f"P4Runtime {self.address} device {self.device_id}", grpc.StatusCode.DEADLINE_EXCEEDED,
                               f"no arbitration answer within {timeout:g}s")

    def wait_for_primary(self, timeout: float = 10.0) -> None:
        """Block until this session is the primary; ``ArbitrationError`` on timeout or stream failure."""
        with self._cond:
            self._cond.wait_for(lambda: self.is_primary or self._stream_done, timeout)
            if self.is_primary:
                return
            problem = self._stream_problem()
            arb = self._arbitration
        if problem:
            raise problem
        if arb is None:
            msg = f"no arbitration answer within {timeout:g}s"
        else:
            msg = (f"not primary after {timeout:g}s: {code_name(arb.status.code)} ({arb.status.message}); "
                   f"our election_id {self.election_id}, highest seen "
                   f"{uint128_value(arb.election_id) if arb.HasField('election_id') else 'none'}")
        raise ArbitrationError(f"P4Runtime {self.address} device {self.device_id}",
                               grpc.StatusCode.PERMISSION_DENIED, msg)

    def become_primary(self, election_id: Any = None, timeout: float = 10.0) -> None:
        """Re-arbitrate (optionally with a new election id) and wait to be primary."""
        if election_id is not None:
            self.election_id = uint128_value(uint128(election_id))
        self._send_arbitration()
        self.wait_for_primary(timeout)

    @property
    def arbitration_status(self) -> int | None:
        """``google.rpc.Code`` of the last arbitration advisory (OK = primary)."""
        arb = self._arbitration
        return None if arb is None else arb.status.code

    @property
    def primary_election_id(self) -> int | None:
        """Highest election id the switch has accepted (the primary's), from the last advisory."""
        arb = self._arbitration
        return uint128_value(arb.election_id) if arb is not None and arb.HasField("election_id") else None

    @property
    def is_primary(self) -> bool:
        arb = self._arbitration
        return (arb is not None and arb.status.code == code_pb2.OK
                and uint128_value(arb.election_id) == self.election_id and not self._stream_done)

    # ------------------------------------------------------------ helpers

    def _call(self, what: str, fn, request, timeout: float | None, error_cls=P4RuntimeError):
        try:
            return fn(request, timeout=timeout)
        except grpc.RpcError as e:
            raise error_cls(f"P4Runtime {self.address} device {self.device_id}: {what}",
                            e.code(), e.details() or "") from None

    def _p4(self) -> P4Info:
        if self.p4info is None:
            config = self.get_pipeline(pb.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE)
            if config is None or not config.HasField("p4info"):
                raise P4RuntimeError(f"P4Runtime {self.address}", grpc.StatusCode.FAILED_PRECONDITION,
                                     "no P4Info: call set_pipeline() first")
            self.p4info = P4Info(config.p4info)
        return self.p4info

    @property
    def codec(self) -> Codec:
        """The entity codec of the device's P4Info (fetched from the device if not set here)."""
        return self._p4().codec

    # ------------------------------------------------------------ pipeline

    def capabilities(self, timeout: float | None = 10.0) -> str:
        """The server's P4Runtime API version."""
        resp = self._call("Capabilities", self._stub.Capabilities, pb.CapabilitiesRequest(), timeout)
        return resp.p4runtime_api_version

    def set_pipeline(self, p4info: P4Info | p4info_pb2.P4Info | str | Path,
                     device_config: bytes = b"", *, cookie: int | None = None,
                     action: int = pb.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
                     timeout: float | None = 60.0) -> None:
        """SetForwardingPipelineConfig (default VERIFY_AND_COMMIT); remembers the P4Info."""
        helper = P4Info.coerce(p4info)
        req = pb.SetForwardingPipelineConfigRequest(device_id=self.device_id, action=action)
        req.election_id.CopyFrom(uint128(self.election_id))
        if action != pb.SetForwardingPipelineConfigRequest.COMMIT:
            req.config.p4info.CopyFrom(helper.proto)
            req.config.p4_device_config = device_config
            if cookie is not None:
                req.config.cookie.cookie = cookie
        self._call("SetForwardingPipelineConfig", self._stub.SetForwardingPipelineConfig, req, timeout)
        self.p4info = helper

    def get_pipeline(self, response_type: int = pb.GetForwardingPipelineConfigRequest.ALL,
                     timeout: float | None = 10.0) -> pb.ForwardingPipelineConfig | None:
        """The device's pipeline config, or None if none was set."""
        req = pb.GetForwardingPipelineConfigRequest(device_id=self.device_id, response_type=response_type)
        try:
            resp = self._stub.GetForwardingPipelineConfig(req, timeout=timeout)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.FAILED_PRECONDITION:
                return None
            raise P4RuntimeError(f"P4Runtime {self.address} device {self.device_id}: GetForwardingPipelineConfig",
                                 e.code(), e.details() or "") from None
        return resp.config if resp.HasField("config") else None

    # ------------------------------------------------------------ Write

    def write(self, updates: Iterable[pb.Update],
              atomicity: int = pb.WriteRequest.CONTINUE_ON_ERROR, timeout: float | None = 30.0) -> None:
        """One Write batch; ``WriteError`` lists the failed updates."""
        req = pb.WriteRequest(device_id=self.device_id, atomicity=atomicity)
        req.election_id.CopyFrom(uint128(self.election_id))
        req.updates.extend(updates)
        if not req.updates:
            return
        try:
            self._stub.Write(req, timeout=timeout)
        except grpc.RpcError as e:
            details, covered = _details(e)
            errors = [UpdateError(i, c, m, req.updates[i] if i < len(req.updates) else None)
                      for i, c, m in details if c != code_pb2.OK]
            raise WriteError(f"P4Runtime {self.address} device {self.device_id}: Write "
                             f"({len(req.updates)} updates)", e.code(), e.details() or "", errors,
                             covered) from None

    def _updates(self, utype: int, entities: Any) -> list[pb.Update]:
        if not isinstance(entities, (list, tuple)):
            entities = [entities]
        return [pb.Update(type=utype, entity=_entity(e)) for e in entities]

    def insert(self, entities: Any, **kw: Any) -> None:
        self.write(self._updates(pb.Update.INSERT, entities), **kw)

    def modify(self, entities: Any, **kw: Any) -> None:
        self.write(self._updates(pb.Update.MODIFY, entities), **kw)

    def delete(self, entities: Any, **kw: Any) -> None:
        self.write(self._updates(pb.Update.DELETE, entities), **kw)

    # ------------------------------------------------------------ Read

    def read(self, entities: Any, timeout: float | None = 30.0) -> list[pb.Entity]:
        """Read (wildcard) entities; ``ReadError`` with per-request errors on failure
        (and the entities the requests that succeeded returned)."""
        if not isinstance(entities, (list, tuple)):
            entities = [entities]
        req = pb.ReadRequest(device_id=self.device_id, entities=[_entity(e) for e in entities])
        out: list[pb.Entity] = []
        try:
            for resp in self._stub.Read(req, timeout=timeout):
                out.extend(resp.entities)
        except grpc.RpcError as e:
            details, covered = _details(e)
            errors = [UpdateError(i, c, m, req.entities[i] if i < len(req.entities) else None)
                      for i, c, m in details if c != code_pb2.OK]
            raise ReadError(f"P4Runtime {self.address} device {self.device_id}: Read",
                            e.code(), e.details() or "", errors, covered, entities=out) from None
        return out

    def read_table_entries(self, table: str | int | None = None) -> list[pb.TableEntry]:
        """All entries of one table (name or id), or of all tables."""
        tid = self._p4().table_id(table) if table is not None else 0
        return [e.table_entry for e in self.read(pb.TableEntry(table_id=tid))]

    def read_action_profile_members(self, profile: str | int | None = None) -> list[pb.ActionProfileMember]:
        pid = self._p4().action_profile_id(profile) if profile is not None else 0
        return [e.action_profile_member for e in self.read(pb.ActionProfileMember(action_profile_id=pid))]

    def read_action_profile_groups(self, profile: str | int | None = None) -> list[pb.ActionProfileGroup]:
        pid = self._p4().action_profile_id(profile) if profile is not None else 0
        return [e.action_profile_group for e in self.read(pb.ActionProfileGroup(action_profile_id=pid))]

    def read_counter(self, counter_name: str | int, index: int | None = None) -> dict[int, tuple[int, int]]:
        """``{index: (packets, bytes)}`` of one counter cell, or of all cells."""
        ce = self.codec.counter_entry(counter_name, index)
        return {e.counter_entry.index.index: (e.counter_entry.data.packet_count, e.counter_entry.data.byte_count)
                for e in self.read(ce)}

    # ------------------------------------------------------------ packet I/O

    def packet_out(self, payload: bytes, egress_port: int, **metadata: Any) -> None:
        """Send a packet-out (errors come back asynchronously in ``stream_errors``)."""
        if self._stream_done:
            raise self._stream_problem() or ArbitrationError(self.address, None, "stream closed")
        msg = self.codec.packet_out(payload, egress_port, **metadata)
        self._requests.put(pb.StreamMessageRequest(packet=msg))

    def packet_in(self, timeout: float | None = None) -> tuple[bytes, int] | None:
        """Next packet-in as ``(payload, ingress_port)``, or None after ``timeout`` seconds."""
        try:
            pkt = self._packet_ins.get(timeout=timeout) if timeout != 0 else self._packet_ins.get_nowait()
        except queue.Empty:
            return None
        return bytes(pkt.payload), self.codec.packet_metadata("packet_in", pkt.metadata).get("ingress_port")

    # ------------------------------------------------------------ teardown

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._requests.put(_END)
        try:
            self._stream.cancel()
        except Exception:
            pass
        if self._reader.is_alive() and threading.current_thread() is not self._reader:
            self._reader.join(timeout=2.0)
        self._channel.close()

    def __enter__(self) -> "SwitchConnection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SwitchConnection({self.address!r}, device_id={self.device_id}, primary={self.is_primary})"
