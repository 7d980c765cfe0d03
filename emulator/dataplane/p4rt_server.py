"""P4Runtime (v1.4) gRPC server of the embedded target.

The embedded target implements exactly ``p4src/fabric.p4``; this server is
its control plane, speaking the same API as BMv2's ``simple_switch_grpc`` so
the controller cannot tell them apart. It validates what a real target
validates (P4Runtime spec 1.4: arbitration section 5, table entries 9.1,
action profiles 9.2, counters 9.3, Write 12, Read 13, pipeline config 14-15,
stream 16) and keeps the decoded entries in a ``SwitchState``.

Error codes, where the spec leaves a choice, follow PI (the P4Runtime server
of BMv2): unknown P4 ids are ``INVALID_ARGUMENT``; a bytestring that is empty
or does not fit its bitwidth is ``OUT_OF_RANGE`` (spec section 8.4.3).

Write batches are applied under ``state.lock`` and ``state.changed()`` is
called once per batch, so the pipeline sees each batch as a whole
(``DATAPLANE_ATOMIC`` therefore holds as long as the pipeline reads the
state under the lock / by generation). ``ROLLBACK_ON_ERROR`` and
``DATAPLANE_ATOMIC`` undo a failed batch; the updates that had succeeded
are then reported as ``ABORTED``.
"""
from __future__ import annotations

import collections
import logging
import queue
import threading
from concurrent import futures
from typing import Any, Iterator

import grpc
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as pb
from p4.v1 import p4runtime_pb2_grpc as pb_grpc

from emulator.dataplane import pre
from emulator.dataplane import state as st
from emulator.dataplane.state import SwitchState
from emulator.p4.p4info import P4Info, check_bytestring, uint128, uint128_value

log = logging.getLogger(__name__)

API_VERSION = "1.4.1"
BIND_HOST = "127.0.0.1"
READ_CHUNK = 256          # entities per ReadResponse message
PACKET_IN_BACKLOG = 1024  # packet-ins queued to a slow controller before dropping

MatchType = p4info_pb2.MatchField.MatchType
Scope = p4info_pb2.ActionRef.Scope
_KIND = {MatchType.EXACT: "exact", MatchType.LPM: "lpm", MatchType.TERNARY: "ternary",
         MatchType.RANGE: "range", MatchType.OPTIONAL: "optional"}
_PRIORITY_TYPES = (MatchType.TERNARY, MatchType.RANGE, MatchType.OPTIONAL)
_GRPC_CODE = {sc.value[0]: sc for sc in grpc.StatusCode}
_EOF = object()


class _Status(collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status):
    """A ``grpc.Status`` for ``abort_with_status`` (what ``grpc_status.rpc_status`` builds)."""


def _rich_status(code: int, message: str, errors: list[pb.Error]) -> grpc.Status:
    """gRPC status whose ``grpc-status-details-bin`` holds one ``p4.v1.Error`` per item."""
    status = status_pb2.Status(code=code, message=message)
    for err in errors:
        status.details.add().Pack(err)
    return _Status(_GRPC_CODE[code], message, (("grpc-status-details-bin", status.SerializeToString()),))


class _Fail(Exception):
    """One update / read request / stream message rejected with a canonical code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message

    def error(self) -> pb.Error:
        return pb.Error(canonical_code=self.code, message=self.message)


def _invalid(msg: str) -> _Fail:
    return _Fail(code_pb2.INVALID_ARGUMENT, msg)


class _Controller:
    """One StreamChannel: a controller's session."""

    def __init__(self, peer: str):
        self.peer = peer
        self.out: queue.Queue = queue.Queue()
        self.election_id: int | None = None
        self.live = False  # arbitrated and not gone


class P4RuntimeServer(pb_grpc.P4RuntimeServicer):
    """P4Runtime service of one embedded switch, on ``127.0.0.1:port``.

    ``port=0`` binds an ephemeral port; ``start()`` returns the bound port
    (also in ``.port``). ``contract`` is the P4Info of the program the target
    implements (default: ``p4src/fabric.p4info.txtpb``).
    """

    def __init__(self, state: SwitchState, device_id: int, port: int = 0,
                 contract: P4Info | None = None, *, max_workers: int = 8):
        self.state = state
        self.device_id = device_id
        self.port = port
        self.contract = contract if contract is not None else P4Info.load()
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
        # arbitration (default role only)
        self._arb_lock = threading.Lock()
        self._controllers: list[_Controller] = []
        self._primary: _Controller | None = None
        self._election_past: int | None = None  # highest election id ever accepted as primary
        # pipeline
        self._committed: pb.ForwardingPipelineConfig | None = None
        self._saved: pb.ForwardingPipelineConfig | None = None
        # target-side bookkeeping next to SwitchState (guarded by state.lock)
        self._defaults: dict[int, st.ActionCall] = {}        # table_id -> modified default action
        self._ctrl_meta: dict[tuple, int] = {}                 # (table_id, key) -> controller_metadata
        self._refs: collections.Counter = collections.Counter()  # (profile, "member"|"group", id) -> entries
        self.packet_in_drops = 0

    # ------------------------------------------------------------ lifecycle

    def start(self) -> int:
        if self._server is not None:
            return self.port
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._max_workers,
                                       thread_name_prefix=f"p4rt-dev{self.device_id}"),
            options=[("grpc.so_reuseport", 0)])
        pb_grpc.add_P4RuntimeServicer_to_server(self, server)
        try:
            bound = server.add_insecure_port(f"{BIND_HOST}:{self.port}")
        except RuntimeError as e:
            raise RuntimeError(f"P4Runtime server of device {self.device_id}: cannot bind "
                               f"{BIND_HOST}:{self.port}: {e}") from None
        if not bound:
            raise RuntimeError(f"P4Runtime server of device {self.device_id}: cannot bind {BIND_HOST}:{self.port}")
        self.port = bound
        self.state.packet_in_handler = self._deliver_packet_in
        server.start()
        self._server = server
        return bound

    def stop(self, grace: float | None = 0.5) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        if self.state.packet_in_handler == self._deliver_packet_in:
            self.state.packet_in_handler = None
        with self._arb_lock:
            controllers, self._controllers, self._primary = list(self._controllers), [], None
        for ctl in controllers:
            ctl.live = False
            ctl.out.put(_EOF)
        server.stop(grace).wait()

    @property
    def address(self) -> str:
        return f"{BIND_HOST}:{self.port}"

    # ------------------------------------------------------------ helpers

    def _check_device(self, device_id: int, context: grpc.ServicerContext) -> None:
        if device_id != self.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"unknown device_id {device_id} (this is device {self.device_id})")

    @staticmethod
    def _check_role(request: Any, context: grpc.ServicerContext) -> None:
        if request.role or getattr(request, "role_id", 0):
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"unknown role {request.role or request.role_id!r}: only the default role exists")

    def _is_primary_request(self, request: Any) -> bool:
        if not request.HasField("election_id"):
            return False
        with self._arb_lock:
            return (self._primary is not None
                    and uint128_value(request.election_id) == self._election_past)

    @property
    def _pipeline(self) -> pb.ForwardingPipelineConfig | None:
        return self._saved if self._saved is not None else self._committed

    # ------------------------------------------------------------ Capabilities

    def Capabilities(self, request, context):
        return pb.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    # ------------------------------------------------------------ pipeline config

    def SetForwardingPipelineConfig(self, request, context):
        self._check_device(request.device_id, context)
        self._check_role(request, context)
        if not self._is_primary_request(request):
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          "only the primary controller may set the pipeline (election_id is not the primary's)")
        A = pb.SetForwardingPipelineConfigRequest
        action = request.action
        if action == A.UNSPECIFIED:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "SetForwardingPipelineConfig action is not set")
        if action == A.COMMIT:
            if request.HasField("config"):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "COMMIT must not carry a config")
            with self.state.lock:
                if self._saved is None:
                    context.abort(grpc.StatusCode.NOT_FOUND, "no saved config to commit (VERIFY_AND_SAVE first)")
                # The saved program is the one the target runs: writes made since
                # the save were applied to it, so committing keeps the state.
                self._committed, self._saved = self._saved, None
            return pb.SetForwardingPipelineConfigResponse()
        if action not in (A.VERIFY, A.VERIFY_AND_SAVE, A.VERIFY_AND_COMMIT, A.RECONCILE_AND_COMMIT):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown SetForwardingPipelineConfig action {action}")
        if not request.HasField("config") or not request.config.HasField("p4info"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "config with a p4info is required")
        diffs = self.contract.differences(request.config.p4info)
        if diffs:
            more = f" (and {len(diffs) - 10} more)" if len(diffs) > 10 else ""
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          "the embedded target runs p4src/fabric.p4 and cannot realize this P4Info: "
                          + "; ".join(diffs[:10]) + more)
        if action == A.VERIFY:
            return pb.SetForwardingPipelineConfigResponse()
        config = pb.ForwardingPipelineConfig()
        config.CopyFrom(request.config)
        with self.state.lock:
            had_pipeline = self._pipeline is not None
            if action == A.VERIFY_AND_SAVE:
                self._saved = config
                if not had_pipeline:
                    self._reset_state()
            elif action == A.VERIFY_AND_COMMIT:
                self._committed, self._saved = config, None
                self._reset_state()
            else:  # RECONCILE_AND_COMMIT: same program, so the state is preserved
                self._committed, self._saved = config, None
                if not had_pipeline:
                    self._reset_state()
        return pb.SetForwardingPipelineConfigResponse()

    def _reset_state(self) -> None:
        c = self.contract
        with self.state.lock:
            self._defaults.clear()
            self._ctrl_meta.clear()
            self._refs.clear()
            self.state.reset(c.table_ids, c.action_profile_ids, c.counter_sizes)

    def GetForwardingPipelineConfig(self, request, context):
        self._check_device(request.device_id, context)
        with self.state.lock:
            config = self._pipeline
        if config is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline config has been set")
        R = pb.GetForwardingPipelineConfigRequest
        out = pb.ForwardingPipelineConfig()
        rt = request.response_type
        if rt == R.ALL:
            out.CopyFrom(config)
        elif rt == R.P4INFO_AND_COOKIE:
            out.p4info.CopyFrom(config.p4info)
        elif rt == R.DEVICE_CONFIG_AND_COOKIE:
            out.p4_device_config = config.p4_device_config
        elif rt != R.COOKIE_ONLY:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown response_type {rt}")
        if config.HasField("cookie"):
            out.cookie.CopyFrom(config.cookie)
        return pb.GetForwardingPipelineConfigResponse(config=out)

    # ------------------------------------------------------------ Write

    def Write(self, request, context):
        self._check_device(request.device_id, context)
        self._check_role(request, context)
        if not self._is_primary_request(request):
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          "Write refused: election_id is not the primary controller's")
        if self._pipeline is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline config has been set")
        W = pb.WriteRequest
        if request.atomicity not in (W.CONTINUE_ON_ERROR, W.ROLLBACK_ON_ERROR, W.DATAPLANE_ATOMIC):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown atomicity {request.atomicity}")
        all_or_none = request.atomicity != W.CONTINUE_ON_ERROR
        failures: list[_Fail | None] = []
        with self.state.lock:
            snapshot = self._snapshot() if all_or_none else None
            counter_undo: list[tuple] = []
            for update in request.updates:
                try:
                    self._apply(update, counter_undo)
                    failures.append(None)
                except _Fail as f:
                    failures.append(f)
                except Exception as e:  # a bug here must not kill the batch
                    log.exception("P4Runtime Write: internal error")
                    failures.append(_Fail(code_pb2.INTERNAL, f"internal error: {e!r}"))
            failed = any(failures)
            if failed and snapshot is not None:
                self._restore(snapshot, counter_undo)
                failures = [f or _Fail(code_pb2.ABORTED, "rolled back: another update in the batch failed")
                            for f in failures]
            self.state.changed()
        if failed:
            n = sum(1 for f in failures if f is not None and f.code != code_pb2.ABORTED)
            errors = [f.error() if f else pb.Error(canonical_code=code_pb2.OK) for f in failures]
            context.abort_with_status(_rich_status(
                code_pb2.UNKNOWN, f"Write failure: {n} of {len(failures)} updates failed", errors))
        return pb.WriteResponse()

    def _snapshot(self) -> tuple:
        s = self.state
        return ({tid: dict(t) for tid, t in s.tables.items()},
                {pid: (dict(ap.members), dict(ap.groups)) for pid, ap in s.action_profiles.items()},
                dict(self._defaults), dict(self._ctrl_meta), collections.Counter(self._refs),
                dict(s.clone_sessions))

    def _restore(self, snapshot: tuple, counter_undo: list[tuple]) -> None:
        tables, profiles, defaults, ctrl_meta, refs, sessions = snapshot
        s = self.state
        s.clone_sessions = sessions
        for tid, entries in tables.items():  # in place: the pipeline may hold the dicts
            s.tables[tid].clear()
            s.tables[tid].update(entries)
        for pid, (members, groups) in profiles.items():
            ap = s.action_profiles[pid]
            ap.members.clear()
            ap.members.update(members)
            ap.groups.clear()
            ap.groups.update(groups)
        self._defaults, self._ctrl_meta, self._refs = defaults, ctrl_meta, refs
        for cid, index, packets, nbytes in reversed(counter_undo):
            arr = s.counters[cid]
            arr.packets[index], arr.bytes[index] = packets, nbytes

    def _apply(self, update: pb.Update, counter_undo: list[tuple]) -> None:
        utype = update.type
        if utype not in (pb.Update.INSERT, pb.Update.MODIFY, pb.Update.DELETE):
            raise _invalid("update type is not set" if utype == pb.Update.UNSPECIFIED
                           else f"unknown update type {utype}")
        kind = update.entity.WhichOneof("entity")
        if kind == "table_entry":
            self._write_table_entry(utype, update.entity.table_entry)
        elif kind == "action_profile_member":
            self._write_member(utype, update.entity.action_profile_member)
        elif kind == "action_profile_group":
            self._write_group(utype, update.entity.action_profile_group)
        elif kind == "counter_entry":
            self._write_counter(utype, update.entity.counter_entry, counter_undo)
        elif kind is None:
            raise _invalid("entity is not set")
        elif kind == "packet_replication_engine_entry":
            try:
                pre.write(self.state.clone_sessions, utype, update.entity.packet_replication_engine_entry)
            except pre.PreError as e:
                raise _Fail(e.code, str(e)) from None
        elif kind == "register_entry":
            raise _Fail(code_pb2.UNIMPLEMENTED, "registers are the data plane's own state "
                                                "(BMv2's P4Runtime server cannot write them either)")
        else:
            raise _invalid(f"{kind}: fabric.p4 has no such objects")

    # ---- bytestrings, matches, actions

    @staticmethod
    def _value(data: bytes, bitwidth: int, what: str) -> int:
        try:
            return check_bytestring(data, bitwidth)
        except ValueError as e:
            raise _Fail(code_pb2.OUT_OF_RANGE, f"{what}: {e}") from None

    def _table(self, table_id: int) -> p4info_pb2.Table:
        t = self.contract.find_table(table_id)
        if t is None:
            raise _invalid(f"unknown table id {table_id}")
        return t

    def _match(self, t: p4info_pb2.Table, te: pb.TableEntry, *, check_priority: bool = True) -> dict[int, tuple]:
        tid, tname = t.preamble.id, t.preamble.name
        fields = self.contract.match_fields(tid)
        out: dict[int, tuple] = {}
        for fm in te.match:
            mf = fields.get(fm.field_id)
            if mf is None:
                raise _invalid(f"table {tname}: unknown match field id {fm.field_id}")
            if fm.field_id in out:
                raise _invalid(f"table {tname}: match field {mf.name} given twice")
            kind = fm.WhichOneof("field_match_type")
            expected = _KIND.get(mf.match_type)
            if kind != expected:
                raise _invalid(f"table {tname}: match field {mf.name} is {expected}, got {kind or 'no match'}")
            bw, what = mf.bitwidth, f"table {tname}: match field {mf.name}"
            if kind == "exact":
                out[fm.field_id] = ("exact", self._value(fm.exact.value, bw, what))
            elif kind == "optional":
                out[fm.field_id] = ("exact", self._value(fm.optional.value, bw, what))
            elif kind == "lpm":
                value, plen = self._value(fm.lpm.value, bw, what), fm.lpm.prefix_len
                if plen < 0 or plen > bw:
                    raise _invalid(f"{what}: prefix length {plen} not in 1..{bw}")
                if plen == 0:
                    raise _invalid(f"{what}: prefix length 0 is a don't-care match, omit the field")
                if value & ((1 << (bw - plen)) - 1):
                    raise _invalid(f"{what}: value has bits set beyond the /{plen} prefix")
                out[fm.field_id] = ("lpm", value, plen)
            elif kind == "ternary":
                value = self._value(fm.ternary.value, bw, what + " value")
                mask = self._value(fm.ternary.mask, bw, what + " mask")
                if mask == 0:
                    raise _invalid(f"{what}: mask 0 is a don't-care match, omit the field")
                if value & ~mask:
                    raise _invalid(f"{what}: value has bits set outside the mask (value & mask != value)")
                out[fm.field_id] = ("ternary", value, mask)
            else:  # range
                low = self._value(fm.range.low, bw, what + " low")
                high = self._value(fm.range.high, bw, what + " high")
                if low > high:
                    raise _invalid(f"{what}: low {low} > high {high}")
                if low == 0 and high == (1 << bw) - 1:
                    raise _invalid(f"{what}: full range is a don't-care match, omit the field")
                out[fm.field_id] = ("range", low, high)
        for fid, mf in fields.items():
            if fid not in out and mf.match_type == MatchType.EXACT:
                raise _invalid(f"table {tname}: exact match field {mf.name} is missing")
        if check_priority:
            needs = any(mf.match_type in _PRIORITY_TYPES for mf in fields.values())
            if needs and te.priority <= 0:
                raise _invalid(f"table {tname} has ternary/range/optional fields: priority must be > 0")
            if not needs and te.priority != 0:
                raise _invalid(f"table {tname} has no ternary/range/optional field: priority must be 0")
        return out

    def _action(self, action: pb.Action, refs: dict[int, p4info_pb2.ActionRef], owner: str,
                *, default: bool = False) -> st.ActionCall:
        a = self.contract.find_action(action.action_id)
        if a is None:
            raise _invalid(f"unknown action id {action.action_id}")
        aname = a.preamble.name
        ref = refs.get(action.action_id)
        if ref is None:
            raise _invalid(f"action {aname} is not an action of {owner}")
        if ref.scope == Scope.DEFAULT_ONLY and not default:
            raise _Fail(code_pb2.PERMISSION_DENIED, f"action {aname} is @defaultonly in {owner}")
        if ref.scope == Scope.TABLE_ONLY and default:
            raise _Fail(code_pb2.PERMISSION_DENIED, f"action {aname} is @tableonly in {owner}")
        expected = self.contract.action_params(action.action_id)
        values: dict[int, int] = {}
        for p in action.params:
            spec = expected.get(p.param_id)
            if spec is None:
                raise _invalid(f"action {aname}: unknown parameter id {p.param_id}")
            if p.param_id in values:
                raise _invalid(f"action {aname}: parameter {spec.name} given twice")
            values[p.param_id] = self._value(p.value, spec.bitwidth, f"action {aname}: parameter {spec.name}")
        missing = [spec.name for pid, spec in expected.items() if pid not in values]
        if missing:
            raise _invalid(f"action {aname}: missing parameter(s) {', '.join(missing)}")
        return st.ActionCall(action.action_id, tuple(sorted(values.items())))

    # ---- table entries

    def _default_action(self, t: p4info_pb2.Table) -> st.ActionCall:
        tid = t.preamble.id
        if tid in self._defaults:
            return self._defaults[tid]
        if t.const_default_action_id:
            return st.ActionCall(t.const_default_action_id, ())
        if t.HasField("initial_default_action"):
            return self.contract.decode_action(_p4info_action_to_p4rt(t.initial_default_action))
        noaction = self.contract.find_action("NoAction")
        return st.ActionCall(noaction.preamble.id if noaction else 0, ())

    def _write_table_entry(self, utype: int, te: pb.TableEntry) -> None:
        t = self._table(te.table_id)
        tid, tname = t.preamble.id, t.preamble.name
        if te.is_const:
            raise _invalid("is_const must be false in a write")
        if te.HasField("time_since_last_hit"):
            raise _invalid("time_since_last_hit must not be set in a write")
        if te.idle_timeout_ns:
            raise _invalid(f"table {tname} does not support idle timeout")
        for res in ("meter_config", "counter_data", "meter_counter_data"):
            if te.HasField(res):
                raise _invalid(f"table {tname} has no direct meter or counter ({res} given)")
        if te.is_default_action:
            self._write_default_entry(utype, t, te)
            return
        match = self._match(t, te)
        key = st.TableEntry(tid, match, te.priority).key()
        table = self.state.tables[tid]
        existing = table.get(key)
        if utype == pb.Update.DELETE:
            if existing is None:
                raise _Fail(code_pb2.NOT_FOUND, f"table {tname}: no entry with this match key")
            del table[key]
            self._ctrl_meta.pop((tid, key), None)
            self._count_refs(t, existing, -1)
            return
        if not te.HasField("action"):
            if utype == pb.Update.INSERT:
                raise _invalid(f"table {tname}: INSERT needs an action")
            if existing is None:
                raise _Fail(code_pb2.NOT_FOUND, f"table {tname}: no entry with this match key")
            return  # MODIFY without action (and no direct resources): no-op
        entry = st.TableEntry(tid, match, te.priority, metadata=te.metadata)
        self._entry_action(t, te.action, entry)
        if utype == pb.Update.INSERT:
            if existing is not None:
                raise _Fail(code_pb2.ALREADY_EXISTS, f"table {tname}: an entry with this match key exists")
            if t.size and len(table) >= t.size:
                raise _Fail(code_pb2.RESOURCE_EXHAUSTED, f"table {tname} is full ({t.size} entries)")
        else:
            if existing is None:
                raise _Fail(code_pb2.NOT_FOUND, f"table {tname}: no entry with this match key")
            self._count_refs(t, existing, -1)
        table[key] = entry
        self._count_refs(t, entry, +1)
        if te.controller_metadata:
            self._ctrl_meta[(tid, key)] = te.controller_metadata
        else:
            self._ctrl_meta.pop((tid, key), None)

    def _entry_action(self, t: p4info_pb2.Table, ta: pb.TableAction, entry: st.TableEntry) -> None:
        tname = t.preamble.name
        kind = ta.WhichOneof("type")
        if kind is None:
            raise _invalid(f"table {tname}: the table action is empty")
        if kind == "action_profile_action_set":
            raise _Fail(code_pb2.UNIMPLEMENTED, "one-shot action selector programming is not supported")
        if t.implementation_id:
            prof = self.contract.find_action_profile(t.implementation_id)
            if kind == "action":
                raise _invalid(f"table {tname} is implemented by action profile {prof.preamble.name}: "
                               "use an action profile member or group, not a direct action")
            aps = self.state.action_profiles[t.implementation_id]
            if kind == "action_profile_member_id":
                mid = ta.action_profile_member_id
                if mid not in aps.members:
                    raise _Fail(code_pb2.NOT_FOUND, f"{prof.preamble.name}: no member {mid}")
                entry.member_id = mid
            else:
                gid = ta.action_profile_group_id
                if not prof.with_selector:
                    raise _invalid(f"{prof.preamble.name} has no selector: groups are not allowed")
                if gid not in aps.groups:
                    raise _Fail(code_pb2.NOT_FOUND, f"{prof.preamble.name}: no group {gid}")
                entry.group_id = gid
        else:
            if kind != "action":
                raise _invalid(f"table {tname} has no action profile: use a direct action")
            entry.action = self._action(ta.action, self.contract.action_refs(t.preamble.id), f"table {tname}")

    def _count_refs(self, t: p4info_pb2.Table, entry: st.TableEntry, delta: int) -> None:
        if entry.member_id is not None:
            self._refs[(t.implementation_id, "member", entry.member_id)] += delta
        elif entry.group_id is not None:
            self._refs[(t.implementation_id, "group", entry.group_id)] += delta

    def _write_default_entry(self, utype: int, t: p4info_pb2.Table, te: pb.TableEntry) -> None:
        tid, tname = t.preamble.id, t.preamble.name
        if utype != pb.Update.MODIFY:
            raise _invalid(f"table {tname}: the default entry can only be modified")
        if len(te.match) or te.priority:
            raise _invalid(f"table {tname}: the default entry has no match and no priority")
        if t.const_default_action_id:
            raise _Fail(code_pb2.PERMISSION_DENIED, f"table {tname} has a const default action")
        if t.implementation_id:
            raise _invalid(f"table {tname}: the default action of an indirect table cannot be set")
        if not te.HasField("action"):
            self._defaults.pop(tid, None)  # reset to the program's default
            return
        if te.action.WhichOneof("type") != "action":
            raise _invalid(f"table {tname}: the default entry needs a direct action")
        self._defaults[tid] = self._action(te.action.action, self.contract.action_refs(tid),
                                           f"table {tname}", default=True)

    # ---- action profiles

    def _profile(self, profile_id: int) -> p4info_pb2.ActionProfile:
        prof = self.contract.find_action_profile(profile_id)
        if prof is None:
            raise _invalid(f"unknown action profile id {profile_id}")
        return prof

    def _profile_refs(self, prof: p4info_pb2.ActionProfile) -> dict[int, p4info_pb2.ActionRef]:
        refs: dict[int, p4info_pb2.ActionRef] = {}
        for tid in prof.table_ids:
            refs.update(self.contract.action_refs(tid))
        return refs

    def _write_member(self, utype: int, m: pb.ActionProfileMember) -> None:
        prof = self._profile(m.action_profile_id)
        pname = prof.preamble.name
        aps = self.state.action_profiles[prof.preamble.id]
        if m.member_id == 0:
            raise _invalid(f"{pname}: member id 0 is not valid")
        if utype == pb.Update.DELETE:
            if m.member_id not in aps.members:
                raise _Fail(code_pb2.NOT_FOUND, f"{pname}: no member {m.member_id}")
            users = [g.group_id for g in aps.groups.values() if any(mid == m.member_id for mid, _ in g.members)]
            if users:
                raise _Fail(code_pb2.FAILED_PRECONDITION,
                            f"{pname}: member {m.member_id} is in group(s) {sorted(users)}")
            if self._refs[(prof.preamble.id, "member", m.member_id)] > 0:
                raise _Fail(code_pb2.FAILED_PRECONDITION,
                            f"{pname}: member {m.member_id} is used by table entries")
            del aps.members[m.member_id]
            return
        if not m.HasField("action"):
            raise _invalid(f"{pname}: member {m.member_id} needs an action")
        call = self._action(m.action, self._profile_refs(prof), f"the tables of {pname}")
        if utype == pb.Update.INSERT:
            if m.member_id in aps.members:
                raise _Fail(code_pb2.ALREADY_EXISTS, f"{pname}: member {m.member_id} exists")
            if prof.size and len(aps.members) >= prof.size:
                raise _Fail(code_pb2.RESOURCE_EXHAUSTED, f"{pname} is full ({prof.size} members)")
        elif m.member_id not in aps.members:
            raise _Fail(code_pb2.NOT_FOUND, f"{pname}: no member {m.member_id}")
        aps.members[m.member_id] = call

    def _write_group(self, utype: int, g: pb.ActionProfileGroup) -> None:
        prof = self._profile(g.action_profile_id)
        pid, pname = prof.preamble.id, prof.preamble.name
        aps = self.state.action_profiles[pid]
        if not prof.with_selector:
            raise _invalid(f"{pname} has no selector: groups are not allowed")
        if g.group_id == 0:
            raise _invalid(f"{pname}: group id 0 is not valid")
        existing = aps.groups.get(g.group_id)
        if utype == pb.Update.DELETE:
            if existing is None:
                raise _Fail(code_pb2.NOT_FOUND, f"{pname}: no group {g.group_id}")
            if self._refs[(pid, "group", g.group_id)] > 0:
                raise _Fail(code_pb2.FAILED_PRECONDITION, f"{pname}: group {g.group_id} is used by table entries")
            del aps.groups[g.group_id]
            return
        if g.max_size < 0:
            raise _invalid(f"{pname}: max_size must not be negative")
        if prof.max_group_size and g.max_size > prof.max_group_size:
            raise _invalid(f"{pname}: max_size {g.max_size} exceeds max_group_size {prof.max_group_size}")
        by_members = prof.WhichOneof("selector_size_semantics") == "sum_of_members"
        members: list[tuple[int, int]] = []
        seen: set[int] = set()
        for mem in g.members:
            if mem.WhichOneof("watch_kind") is not None:
                raise _Fail(code_pb2.UNIMPLEMENTED, f"{pname}: watch ports are not supported")
            if mem.member_id in seen:
                raise _invalid(f"{pname}: member {mem.member_id} listed twice in group {g.group_id} (use weights)")
            if mem.weight <= 0:
                raise _invalid(f"{pname}: member {mem.member_id} weight must be > 0")
            if by_members and prof.sum_of_members.max_member_weight and \
                    mem.weight > prof.sum_of_members.max_member_weight:
                raise _invalid(f"{pname}: member {mem.member_id} weight exceeds max_member_weight")
            if mem.member_id not in aps.members:
                raise _Fail(code_pb2.NOT_FOUND, f"{pname}: no member {mem.member_id}")
            seen.add(mem.member_id)
            members.append((mem.member_id, mem.weight))
        size = len(members) if by_members else sum(w for _, w in members)
        limit = g.max_size or prof.max_group_size
        if limit and size > limit:
            raise _Fail(code_pb2.RESOURCE_EXHAUSTED,
                        f"{pname}: group {g.group_id} size {size} exceeds its max size {limit}")
        if utype == pb.Update.INSERT:
            if existing is not None:
                raise _Fail(code_pb2.ALREADY_EXISTS, f"{pname}: group {g.group_id} exists")
        else:
            if existing is None:
                raise _Fail(code_pb2.NOT_FOUND, f"{pname}: no group {g.group_id}")
            if existing.max_size != g.max_size:
                raise _invalid(f"{pname}: group {g.group_id} max_size cannot change "
                               f"({existing.max_size} -> {g.max_size})")
        if prof.size:
            used = sum((len(x.members) if by_members else sum(w for _, w in x.members))
                       for gid, x in aps.groups.items() if gid != g.group_id)
            if used + size > prof.size:
                raise _Fail(code_pb2.RESOURCE_EXHAUSTED, f"{pname} is full (size {prof.size})")
        aps.groups[g.group_id] = st.ActionProfileGroup(g.group_id, members, g.max_size)

    # ---- counters

    def _counter(self, counter_id: int) -> p4info_pb2.Counter:
        c = self.contract.find_counter(counter_id)
        if c is None:
            raise _invalid(f"unknown counter id {counter_id}")
        return c

    def _counter_index(self, c: p4info_pb2.Counter, index: int) -> int:
        if index < 0:
            raise _invalid(f"counter {c.preamble.name}: negative index {index}")
        if index >= c.size:
            raise _Fail(code_pb2.OUT_OF_RANGE, f"counter {c.preamble.name}: index {index} >= size {c.size}")
        return index

    def _write_counter(self, utype: int, ce: pb.CounterEntry, undo: list[tuple]) -> None:
        if utype != pb.Update.MODIFY:
            raise _invalid("counter entries can only be modified")
        c = self._counter(ce.counter_id)
        cid = c.preamble.id
        indexes = [self._counter_index(c, ce.index.index)] if ce.HasField("index") else range(c.size)
        if not ce.HasField("data"):
            return
        arr = self.state.counters[cid]
        for i in indexes:
            undo.append((cid, i, arr.packets[i], arr.bytes[i]))
            arr.packets[i], arr.bytes[i] = ce.data.packet_count, ce.data.byte_count

    # ------------------------------------------------------------ Read

    def Read(self, request, context):
        self._check_device(request.device_id, context)
        if request.role:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown role {request.role!r}")
        if self._pipeline is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline config has been set")
        results: list[pb.Entity] = []
        failures: list[_Fail | None] = []
        with self.state.lock:
            for entity in request.entities:
                try:
                    results.extend(self._read_entity(entity))
                    failures.append(None)
                except _Fail as f:
                    failures.append(f)
                except Exception as e:
                    log.exception("P4Runtime Read: internal error")
                    failures.append(_Fail(code_pb2.INTERNAL, f"internal error: {e!r}"))
        for i in range(0, len(results), READ_CHUNK):
            yield pb.ReadResponse(entities=results[i:i + READ_CHUNK])
        if any(failures):
            n = sum(1 for f in failures if f)
            errors = [f.error() if f else pb.Error(canonical_code=code_pb2.OK) for f in failures]
            context.abort_with_status(_rich_status(
                code_pb2.UNKNOWN, f"Read failure: {n} of {len(failures)} requests failed", errors))

    def _read_entity(self, entity: pb.Entity) -> Iterator[pb.Entity]:
        kind = entity.WhichOneof("entity")
        if kind == "table_entry":
            return [pb.Entity(table_entry=te) for te in self._read_table_entries(entity.table_entry)]
        if kind == "action_profile_member":
            return [pb.Entity(action_profile_member=m) for m in self._read_members(entity.action_profile_member)]
        if kind == "action_profile_group":
            return [pb.Entity(action_profile_group=g) for g in self._read_groups(entity.action_profile_group)]
        if kind == "counter_entry":
            return [pb.Entity(counter_entry=c) for c in self._read_counters(entity.counter_entry)]
        if kind is None:
            raise _invalid("entity is not set")
        if kind == "packet_replication_engine_entry":
            try:
                return pre.read(self.state.clone_sessions, entity.packet_replication_engine_entry)
            except pre.PreError as e:
                raise _Fail(e.code, str(e)) from None
        if kind == "register_entry":
            raise _Fail(code_pb2.UNIMPLEMENTED, "registers are the data plane's own state "
                                                "(BMv2's P4Runtime server cannot read them either)")
        # Other entity kinds: fabric.p4 has none, so a wildcard read is empty.
        sub = getattr(entity, kind)
        ids = [v for f, v in sub.ListFields() if f.name.endswith("_id") and isinstance(v, int)]
        if any(ids):
            raise _invalid(f"{kind}: fabric.p4 has no such object (id {ids[0]})")
        return []

    def _read_table_entries(self, q: pb.TableEntry) -> list[pb.TableEntry]:
        if q.table_id == 0:
            tables = [self.contract.table(tid) for tid in self.contract.table_ids]
        else:
            tables = [self._table(q.table_id)]
        out: list[pb.TableEntry] = []
        for t in tables:
            tid = t.preamble.id
            if q.is_default_action:
                te = pb.TableEntry(table_id=tid, is_default_action=True)
                te.action.action.CopyFrom(self.contract.encode_action(self._default_action(t)))
                out.append(te)
                continue
            entries = list(self.state.tables.get(tid, {}).values())
            if q.table_id and len(q.match):
                match = self._match(t, q, check_priority=False)
                entries = [e for e in entries if e.match == match]
            if q.table_id and q.priority:
                entries = [e for e in entries if e.priority == q.priority]
            if q.table_id and q.HasField("action") and q.action.WhichOneof("type") == "action":
                entries = [e for e in entries if e.action and e.action.action_id == q.action.action.action_id]
            if q.table_id and q.metadata:
                entries = [e for e in entries if e.metadata == q.metadata]
            for e in entries:
                te = self.contract.encode_table_entry(e)
                te.controller_metadata = self._ctrl_meta.get((tid, e.key()), 0)
                if q.table_id and q.controller_metadata and te.controller_metadata != q.controller_metadata:
                    continue
                out.append(te)
        return out

    def _read_members(self, q: pb.ActionProfileMember) -> list[pb.ActionProfileMember]:
        pids = [self._profile(q.action_profile_id).preamble.id] if q.action_profile_id \
            else self.contract.action_profile_ids
        out = []
        for pid in pids:
            for mid, call in sorted(self.state.action_profiles[pid].members.items()):
                if q.member_id and mid != q.member_id:
                    continue
                out.append(pb.ActionProfileMember(action_profile_id=pid, member_id=mid,
                                                  action=self.contract.encode_action(call)))
        return out

    def _read_groups(self, q: pb.ActionProfileGroup) -> list[pb.ActionProfileGroup]:
        pids = [self._profile(q.action_profile_id).preamble.id] if q.action_profile_id \
            else self.contract.action_profile_ids
        out = []
        for pid in pids:
            for gid, grp in sorted(self.state.action_profiles[pid].groups.items()):
                if q.group_id and gid != q.group_id:
                    continue
                msg = pb.ActionProfileGroup(action_profile_id=pid, group_id=gid, max_size=grp.max_size)
                for mid, weight in grp.members:
                    msg.members.add(member_id=mid, weight=weight)
                out.append(msg)
        return out

    def _read_counters(self, q: pb.CounterEntry) -> list[pb.CounterEntry]:
        counters = [self._counter(q.counter_id)] if q.counter_id \
            else [self.contract.counter(cid) for cid in self.contract.counter_sizes]
        out = []
        for c in counters:
            cid = c.preamble.id
            arr = self.state.counters.get(cid)
            if arr is None:
                continue
            if q.counter_id and q.HasField("index"):
                indexes = [self._counter_index(c, q.index.index)]
            else:
                indexes = range(len(arr.packets))
            for i in indexes:
                ce = pb.CounterEntry(counter_id=cid)
                ce.index.index = i
                ce.data.packet_count, ce.data.byte_count = arr.packets[i], arr.bytes[i]
                out.append(ce)
        return out

    # ------------------------------------------------------------ StreamChannel

    def StreamChannel(self, request_iterator, context):
        ctl = _Controller(context.peer())

        def on_rpc_done() -> None:
            self._drop_controller(ctl)
            ctl.out.put(_EOF)

        context.add_callback(on_rpc_done)
        reader = threading.Thread(target=self._stream_reader, args=(ctl, request_iterator),
                                  name=f"p4rt-dev{self.device_id}-stream", daemon=True)
        reader.start()
        try:
            while True:
                item = ctl.out.get()
                if item is _EOF:
                    return
                if isinstance(item, _Fail):
                    context.abort(_GRPC_CODE[item.code], item.message)
                yield item
        finally:
            self._drop_controller(ctl)

    def _stream_reader(self, ctl: _Controller, requests: Iterator[pb.StreamMessageRequest]) -> None:
        try:
            for req in requests:
                kind = req.WhichOneof("update")
                if kind == "arbitration":
                    fail = self._arbitrate(ctl, req.arbitration)
                    if fail is not None:
                        ctl.out.put(fail)
                        return
                elif kind == "packet":
                    self._packet_out(ctl, req.packet)
                elif kind == "digest_ack":
                    ctl.out.put(pb.StreamMessageResponse(error=pb.StreamError(
                        canonical_code=code_pb2.INVALID_ARGUMENT, message="fabric.p4 has no digests",
                        digest_list_ack=pb.DigestListAckError(digest_list_ack=req.digest_ack))))
                elif kind == "other":
                    ctl.out.put(pb.StreamMessageResponse(error=pb.StreamError(
                        canonical_code=code_pb2.UNIMPLEMENTED, message="'other' stream messages are not supported",
                        other=pb.StreamOtherError(other=req.other))))
        except grpc.RpcError:
            pass  # the client went away
        except Exception:
            log.exception("P4Runtime StreamChannel reader failed")
        finally:
            self._drop_controller(ctl)
            ctl.out.put(_EOF)

    def _arbitrate(self, ctl: _Controller, upd: pb.MasterArbitrationUpdate) -> _Fail | None:
        first = not ctl.live
        if upd.device_id != self.device_id:
            if first:
                return _Fail(code_pb2.NOT_FOUND, f"unknown device_id {upd.device_id} (this is device {self.device_id})")
            return _Fail(code_pb2.FAILED_PRECONDITION, "device_id of a live stream cannot change")
        if upd.role.name or upd.role.id:
            return _Fail(code_pb2.UNIMPLEMENTED, "roles are not supported: leave role unset (default role)")
        if upd.role.HasField("config"):
            return _Fail(code_pb2.INVALID_ARGUMENT, "role.config is not supported")
        eid = uint128_value(upd.election_id) if upd.HasField("election_id") else None
        with self._arb_lock:
            if eid is not None and any(c is not ctl and c.election_id == eid for c in self._controllers):
                return _Fail(code_pb2.INVALID_ARGUMENT, f"election_id {eid} is used by another controller")
            if first:
                ctl.live = True
                self._controllers.append(ctl)
            ctl.election_id = eid
            was_primary = self._primary is ctl
            if eid is not None and (self._election_past is None or eid >= self._election_past):
                self._election_past = eid
                self._primary = ctl
                # Everybody learns of the (new or confirmed) primary; the primary last.
                for c in self._controllers:
                    if c is not ctl:
                        self._notify(c)
                self._notify(ctl)
            elif was_primary:  # the primary downgraded itself
                self._primary = None
                for c in self._controllers:
                    self._notify(c)
            else:
                self._notify(ctl)
        return None

    def _notify(self, ctl: _Controller) -> None:
        """Arbitration advisory to one controller (call with ``_arb_lock``)."""
        upd = pb.MasterArbitrationUpdate(device_id=self.device_id)
        if self._election_past is not None:
            upd.election_id.CopyFrom(uint128(self._election_past))
        if self._primary is ctl:
            upd.status.code, upd.status.message = code_pb2.OK, "you are the primary"
        elif self._primary is not None:
            upd.status.code, upd.status.message = code_pb2.ALREADY_EXISTS, "another controller is the primary"
        else:
            upd.status.code, upd.status.message = code_pb2.NOT_FOUND, "there is no primary controller"
        ctl.out.put(pb.StreamMessageResponse(arbitration=upd))

    def _drop_controller(self, ctl: _Controller) -> None:
        with self._arb_lock:
            if not ctl.live:
                return
            ctl.live = False
            if ctl in self._controllers:
                self._controllers.remove(ctl)
            if self._primary is ctl:
                self._primary = None
                for c in self._controllers:
                    self._notify(c)

    # ---- packet I/O

    def _stream_error(self, ctl: _Controller, code: int, message: str, pkt: pb.PacketOut) -> None:
        ctl.out.put(pb.StreamMessageResponse(error=pb.StreamError(
            canonical_code=code, message=message, packet_out=pb.PacketOutError(packet_out=pkt))))

    def _packet_out(self, ctl: _Controller, pkt: pb.PacketOut) -> None:
        with self._arb_lock:
            is_primary = self._primary is ctl
        if not is_primary:
            self._stream_error(ctl, code_pb2.PERMISSION_DENIED, "only the primary controller may send packet-outs", pkt)
            return
        if self._pipeline is None:
            self._stream_error(ctl, code_pb2.FAILED_PRECONDITION, "no forwarding pipeline config has been set", pkt)
            return
        spec = {m.id: m for m in self.contract.controller_packet_metadata("packet_out").metadata}
        values: dict[str, int] = {}
        for md in pkt.metadata:
            m = spec.get(md.metadata_id)
            if m is None:
                self._stream_error(ctl, code_pb2.INVALID_ARGUMENT,
                                   f"unknown packet_out metadata id {md.metadata_id}", pkt)
                return
            if m.name in values:
                self._stream_error(ctl, code_pb2.INVALID_ARGUMENT, f"packet_out metadata {m.name} given twice", pkt)
                return
            try:
                values[m.name] = check_bytestring(md.value, m.bitwidth)
            except ValueError as e:
                self._stream_error(ctl, code_pb2.INVALID_ARGUMENT, f"packet_out metadata {m.name}: {e}", pkt)
                return
        missing = [m.name for m in spec.values() if m.name not in values]
        if missing:
            self._stream_error(ctl, code_pb2.INVALID_ARGUMENT,
                               f"packet_out metadata missing: {', '.join(missing)}", pkt)
            return
        handler = self.state.packet_out_handler
        if handler is None:
            self._stream_error(ctl, code_pb2.UNAVAILABLE, "no data plane is attached to this switch", pkt)
            return
        try:
            handler(bytes(pkt.payload), values["egress_port"])
        except Exception as e:
            log.exception("packet-out handler failed")
            self._stream_error(ctl, code_pb2.INTERNAL, f"packet-out failed: {e!r}", pkt)

    def _deliver_packet_in(self, payload: bytes, ingress_port: int) -> None:
        """``state.packet_in_handler``: queue a PacketIn to the primary (thread-safe; drops if none)."""
        with self._arb_lock:
            ctl = self._primary
        if ctl is None or self._pipeline is None or ctl.out.qsize() >= PACKET_IN_BACKLOG:
            self.packet_in_drops += 1
            return
        ctl.out.put(pb.StreamMessageResponse(packet=self.contract.packet_in(payload, ingress_port)))


def _p4info_action_to_p4rt(a: Any) -> pb.Action:
    """p4info ``TableActionCall`` (initial_default_action) -> ``p4.v1.Action``."""
    msg = pb.Action(action_id=a.action_id)
    for arg in a.arguments:
        msg.params.add(param_id=arg.param_id, value=arg.value)
    return msg
