"""The packet replication engine's clone sessions, as P4Runtime sees them.

fabric.p4 clones packets only to make pause frames on BMv2 (sessions
PFC_SESSION_BASE + port); the embedded target's traffic manager makes its
pauses itself, so here a clone session is configuration that is written,
read back and checked like on BMv2, but replicates nothing. Multicast
groups: fabric.p4 uses none.
"""
from __future__ import annotations

from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2 as pb

# BMv2's simple_switch accepts mirror session ids up to this (RegisterAccess).
MAX_SESSION_ID = 32767


class PreError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def write(sessions: dict[int, pb.CloneSessionEntry], utype: int,
          entry: pb.PacketReplicationEngineEntry) -> None:
    """Apply one INSERT/MODIFY/DELETE of a PRE entry to ``sessions`` (id -> entry)."""
    kind = entry.WhichOneof("type")
    if kind != "clone_session_entry":
        raise PreError(code_pb2.UNIMPLEMENTED,
                       f"{kind or 'an empty PRE entry'}: fabric.p4 uses clone sessions only")
    cs = entry.clone_session_entry
    if not 0 < cs.session_id <= MAX_SESSION_ID:
        raise PreError(code_pb2.INVALID_ARGUMENT,
                       f"clone session id {cs.session_id} is outside 1..{MAX_SESSION_ID}")
    exists = cs.session_id in sessions
    if utype == pb.Update.DELETE:
        if not exists:
            raise PreError(code_pb2.NOT_FOUND, f"no clone session {cs.session_id}")
        del sessions[cs.session_id]
        return
    if utype == pb.Update.INSERT and exists:
        raise PreError(code_pb2.ALREADY_EXISTS, f"clone session {cs.session_id} exists")
    if utype == pb.Update.MODIFY and not exists:
        raise PreError(code_pb2.NOT_FOUND, f"no clone session {cs.session_id}")
    for r in cs.replicas:
        port = r.egress_port or int.from_bytes(r.port, "big")
        if not 0 < port < 512:
            raise PreError(code_pb2.INVALID_ARGUMENT,
                           f"clone session {cs.session_id}: replica port {port} is not a port")
    copy = pb.CloneSessionEntry()
    copy.CopyFrom(cs)
    sessions[cs.session_id] = copy


def read(sessions: dict[int, pb.CloneSessionEntry],
         query: pb.PacketReplicationEngineEntry) -> list[pb.Entity]:
    """Entities answering a PRE read (session id 0: every session)."""
    kind = query.WhichOneof("type")
    if kind == "multicast_group_entry":
        return []
    if kind != "clone_session_entry":
        raise PreError(code_pb2.INVALID_ARGUMENT, "a PRE read names clone sessions or multicast groups")
    sid = query.clone_session_entry.session_id
    if sid and sid not in sessions:
        raise PreError(code_pb2.NOT_FOUND, f"no clone session {sid}")
    chosen = [sessions[sid]] if sid else [sessions[k] for k in sorted(sessions)]
    return [pb.Entity(packet_replication_engine_entry=pb.PacketReplicationEngineEntry(
        clone_session_entry=cs)) for cs in chosen]
