"""Table entries and default entries (P4Runtime spec 9.1) of the embedded target.

The codec decodes and checks an entry against the P4Info; this manager
checks it against the state (the key exists or not, the table has room, the
member or group exists) and keeps what the pipeline does not need next to
``SwitchState``: modified default actions and each entry's
``controller_metadata``.
"""
from __future__ import annotations

from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as pb

from emulator.dataplane.p4rt_server.action_profiles import ActionProfiles
from emulator.dataplane.p4rt_server.write import Journal
from emulator.dataplane.state import ActionCall, SwitchState
from emulator.p4.codec import Codec
from emulator.p4.rejected import Rejected


class Tables:
    """Entries of every table of the program, as Write and Read see them."""

    def __init__(self, state: SwitchState, codec: Codec, profiles: ActionProfiles):
        self.state = state
        self.codec = codec
        self.profiles = profiles
        self._defaults: dict[int, ActionCall] = {}   # table_id -> modified default action
        self._ctrl_meta: dict[tuple, int] = {}        # (table_id, key) -> controller_metadata

    def reset(self) -> None:
        self._defaults.clear()
        self._ctrl_meta.clear()

    def default_action(self, t: p4info_pb2.Table) -> ActionCall:
        """What a miss in ``t`` runs: the modified default, else the program's."""
        tid = t.preamble.id
        if tid in self._defaults:
            return self._defaults[tid]
        if t.const_default_action_id:
            return ActionCall(t.const_default_action_id, ())
        if t.HasField("initial_default_action"):
            a = t.initial_default_action
            return self.codec.decode_action(pb.Action(action_id=a.action_id, params=[
                pb.Action.Param(param_id=arg.param_id, value=arg.value) for arg in a.arguments]))
        noaction = self.codec.p4info.find_action("NoAction")
        return ActionCall(noaction.preamble.id if noaction else 0, ())

    # ------------------------------------------------------------ Write

    def write(self, update: int, te: pb.TableEntry, journal: Journal) -> None:
        entry = self.codec.decode_table_entry(te, update)
        t = self.codec.table(te.table_id)
        tid, tname = t.preamble.id, t.preamble.name
        if te.is_default_action:
            if entry.action is None:
                journal.discard(self._defaults, tid)  # back to the program's default
            else:
                journal.set(self._defaults, tid, entry.action)
            return
        key = entry.key()
        table = self.state.tables[tid]
        existing = table.get(key)
        if update == pb.Update.DELETE:
            if existing is None:
                raise Rejected(code_pb2.NOT_FOUND, f"table {tname}: no entry with this match key")
            journal.delete(table, key)
            journal.discard(self._ctrl_meta, (tid, key))
            self.profiles.use(t, existing, -1, journal)
            return
        if not te.HasField("action"):  # MODIFY without action (and no direct resources): no-op
            if existing is None:
                raise Rejected(code_pb2.NOT_FOUND, f"table {tname}: no entry with this match key")
            return
        self.profiles.require(t, entry)
        if update == pb.Update.INSERT:
            if existing is not None:
                raise Rejected(code_pb2.ALREADY_EXISTS, f"table {tname}: an entry with this match key exists")
            if t.size and len(table) >= t.size:
                raise Rejected(code_pb2.RESOURCE_EXHAUSTED, f"table {tname} is full ({t.size} entries)")
        else:
            if existing is None:
                raise Rejected(code_pb2.NOT_FOUND, f"table {tname}: no entry with this match key")
            self.profiles.use(t, existing, -1, journal)
        journal.set(table, key, entry)
        self.profiles.use(t, entry, +1, journal)
        if te.controller_metadata:
            journal.set(self._ctrl_meta, (tid, key), te.controller_metadata)
        else:
            journal.discard(self._ctrl_meta, (tid, key))

    # ------------------------------------------------------------ Read

    def read(self, q: pb.TableEntry) -> list[pb.TableEntry]:
        """Entries of one table (or all: ``table_id`` 0), filtered by the query's key, action, cookies."""
        if q.table_id == 0:
            tables = [self.codec.p4info.table(tid) for tid in self.codec.p4info.table_ids]
        else:
            tables = [self.codec.table(q.table_id)]
        out: list[pb.TableEntry] = []
        for t in tables:
            tid = t.preamble.id
            if q.is_default_action:
                out.append(self.codec.encode_default_entry(tid, self.default_action(t)))
                continue
            entries = list(self.state.tables.get(tid, {}).values())
            if q.table_id and len(q.match):
                match = self.codec.decode_match(t, q, check_priority=False)
                entries = [e for e in entries if e.match == match]
            if q.table_id and q.priority:
                entries = [e for e in entries if e.priority == q.priority]
            if q.table_id and q.HasField("action") and q.action.WhichOneof("type") == "action":
                entries = [e for e in entries if e.action and e.action.action_id == q.action.action.action_id]
            if q.table_id and q.metadata:
                entries = [e for e in entries if e.metadata == q.metadata]
            for e in entries:
                te = self.codec.encode_table_entry(e)
                te.controller_metadata = self._ctrl_meta.get((tid, e.key()), 0)
                if q.table_id and q.controller_metadata and te.controller_metadata != q.controller_metadata:
                    continue
                out.append(te)
        return out
