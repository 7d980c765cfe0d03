"""The packet replication engine's clone sessions, as P4Runtime sees them (spec 9.5).

fabric.p4 clones packets only to make pause frames on BMv2 (sessions
PFC_SESSION_BASE + port); the embedded target's traffic manager makes its
pauses itself, so here a clone session is configuration that is written,
read back and checked like on BMv2, but replicates nothing. Multicast
groups: fabric.p4 uses none.
"""
from __future__ import annotations

from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2 as pb

from emulator.dataplane.p4rt_server.write import Journal
from emulator.dataplane.state import SwitchState
from emulator.p4.codec import Codec
from emulator.p4.rejected import Rejected, invalid


class CloneSessions:
    """``SwitchState.clone_sessions`` (session id -> ``p4.v1.CloneSessionEntry``)."""

    def __init__(self, state: SwitchState, codec: Codec):
        self.state = state
        self.codec = codec

    def write(self, update: int, entry: pb.PacketReplicationEngineEntry, journal: Journal) -> None:
        sid, sessions = self.codec.clone_session_id(entry), self.state.clone_sessions
        exists = sid in sessions
        if update == pb.Update.DELETE:
            if not exists:
                raise Rejected(code_pb2.NOT_FOUND, f"no clone session {sid}")
            journal.delete(sessions, sid)
            return
        if update == pb.Update.INSERT and exists:
            raise Rejected(code_pb2.ALREADY_EXISTS, f"clone session {sid} exists")
        if update == pb.Update.MODIFY and not exists:
            raise Rejected(code_pb2.NOT_FOUND, f"no clone session {sid}")
        journal.set(sessions, sid, self.codec.decode_clone_session(entry))

    def read(self, query: pb.PacketReplicationEngineEntry) -> list[pb.PacketReplicationEngineEntry]:
        """Clone sessions answering a PRE read (session id 0: every session)."""
        kind = query.WhichOneof("type")
        if kind == "multicast_group_entry":
            return []
        if kind != "clone_session_entry":
            raise invalid("a PRE read names clone sessions or multicast groups")
        sid, sessions = query.clone_session_entry.session_id, self.state.clone_sessions
        if sid and sid not in sessions:
            raise Rejected(code_pb2.NOT_FOUND, f"no clone session {sid}")
        chosen = [sessions[sid]] if sid else [sessions[k] for k in sorted(sessions)]
        return [pb.PacketReplicationEngineEntry(clone_session_entry=cs) for cs in chosen]
