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
and ``ArbitrationError`` (could not become primary); see ``p4rt_errors``.
``write`` sends ``CONTINUE_ON_ERROR`` batches unless told otherwise: the
updates that succeed stay.

Primary: another client may take over with a higher election id (spec 5).
The connection hears it on its stream (an arbitration advisory naming the
new primary's id), says so in one logged warning, and refuses to write from
then on with a one-line ``NotPrimaryError``. It never takes primary back by
itself -- the other client may be a person at p4runtime-shell -- only when
asked: ``take_primary()``.
"""
from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path
from typing import Any, Callable, Iterable

import grpc
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as pb
from p4.v1 import p4runtime_pb2_grpc as pb_grpc

from emulator.control.p4rt_errors import (ArbitrationError, NotPrimaryError, P4RuntimeError, ReadError,
                                          UpdateError, WriteError, code_name, election_id_text,
                                          status_details)
from emulator.p4.codec import Codec
from emulator.p4.p4info import P4Info
from emulator.p4.port_status import AT_NS_METADATA
from emulator.p4.values import uint128, uint128_value


log = logging.getLogger(__name__)     # a plain Logger: emulator.net undoes Mininet's class

_END = object()


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
    stay a backup (see ``is_primary``, ``arbitration_status``). ``name``
    (the switch's) starts the messages about it.
    """

    def __init__(self, address: str, device_id: int, election_id: Any = (0, 1), *,
                 p4info: P4Info | p4info_pb2.P4Info | None = None,
                 timeout: float = 10.0, require_primary: bool = True, name: str | None = None):
        self.address = address
        self.device_id = device_id
        self.election_id = uint128_value(uint128(election_id))
        self.label = f"{name} ({address}, device {device_id})" if name else f"P4Runtime {address} device {device_id}"
        # Election id of the client that took primary from this one (None:
        # primary, or never was); cleared by take_primary().
        self.lost_to: int | None = None
        self.p4info: P4Info | None = P4Info.coerce(p4info) if p4info is not None else None
        self.stream_errors: list[pb.StreamError] = []
        self._cond = threading.Condition()
        self._arbitration: pb.MasterArbitrationUpdate | None = None
        self._stream_failure: grpc.RpcError | None = None
        self._stream_done = False
        self._requests: queue.Queue = queue.Queue()
        self._packet_ins: queue.Queue = queue.Queue()
        self._closed = False
        # Called, on the stream's reader thread, with each ``other`` message
        # the switch sends (a port status: dataplane/p4rt_server/port_events.py).
        self.on_other: Callable[["SwitchConnection", Any], None] | None = None

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
                        was_primary = self.is_primary
                        self._arbitration = resp.arbitration
                        # Another client is primary now (spec 5: ALREADY_EXISTS to the others).
                        taken = was_primary and resp.arbitration.status.code == code_pb2.ALREADY_EXISTS
                        if taken:
                            self.lost_to = self.primary_election_id
                        elif self.is_primary:   # ours again: a server that promotes the
                            self.lost_to = None  # highest client left (BMv2's PI) says so
                        self._cond.notify_all()
                    if taken:
                        log.warning("%s", self.not_primary_text())
                elif kind == "packet":
                    self._packet_ins.put(resp.packet)
                elif kind == "other" and self.on_other is not None:
                    try:
                        self.on_other(self, resp.other)
                    except Exception:      # the stream must live on: its arbitration news too
                        log.exception("%s: handling a stream message failed", self.label)
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

    def take_primary(self, timeout: float = 10.0) -> int:
        """Become primary again, e.g. after another client took over: re-arbitrate
        with an election id above the highest the switch has seen (spec 5:
        at least that is needed). Returns the election id now ours."""
        if not self.is_primary:
            seen = self.primary_election_id
            self.become_primary(self.election_id if seen is None else max(self.election_id, seen + 1), timeout)
        self.lost_to = None
        return self.election_id

    def not_primary_text(self, what: str = "") -> str:
        """One line: this connection is not the primary (``what`` was refused), who is, and the way back."""
        ours = election_id_text(self.election_id)
        if self.lost_to is not None:
            why = (f"lost primary to election id {election_id_text(self.lost_to)} (ours: {ours}): "
                   "another P4Runtime client took over")
        elif self.primary_election_id is not None and self.arbitration_status == code_pb2.ALREADY_EXISTS:
            why = f"not primary: the primary is election id {election_id_text(self.primary_election_id)} (ours: {ours})"
        else:
            why = f"not primary: the switch has no primary (ours: {ours})"
        return f"{self.label}: {what + ': ' if what else ''}{why}; writes are refused until take_primary"

    def _refused_as_not_primary(self, wait_s: float = 1.0) -> bool:
        """After a PERMISSION_DENIED: whether this connection is not the primary.
        The advisory saying so was sent before the Write was refused, but on
        the stream: allow it ``wait_s`` to arrive."""
        with self._cond:
            self._cond.wait_for(lambda: not self.is_primary, wait_s)
            return not self.is_primary

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
              atomicity: int = pb.WriteRequest.CONTINUE_ON_ERROR, timeout: float | None = 30.0,
              at_ns: int | None = None) -> None:
        """One Write batch; ``WriteError`` lists the failed updates. ``at_ns``:
        the embedded switch applies it at that fabric time
        (``dataplane/p4rt_server/port_events.py``)."""
        req = pb.WriteRequest(device_id=self.device_id, atomicity=atomicity)
        req.election_id.CopyFrom(uint128(self.election_id))
        req.updates.extend(updates)
        if not req.updates:
            return
        try:
            metadata = ((AT_NS_METADATA, str(at_ns)),) if at_ns is not None else None
            self._stub.Write(req, timeout=timeout, metadata=metadata)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.PERMISSION_DENIED and self._refused_as_not_primary():
                n = len(req.updates)
                raise NotPrimaryError(self.not_primary_text(f"Write of {n} update{'s' * (n != 1)} refused"),
                                      self.primary_election_id) from None
            details, covered = status_details(e)
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
            details, covered = status_details(e)
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

    def send_other(self, message: Any) -> None:
        """A ``StreamMessageRequest.other`` (a ``google.protobuf.Any``) on the stream."""
        if self._stream_done:
            raise self._stream_problem() or ArbitrationError(self.address, None, "stream closed")
        self._requests.put(pb.StreamMessageRequest(other=message))

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
