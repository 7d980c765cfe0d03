"""Action profile members and groups (P4Runtime spec 9.2) of the embedded target.

The codec checks each member and group against the P4Info (and a group's
members against the profile's); this manager checks them against the rest
of the state: ids that exist or not, sizes (the group's ``max_size``, the profile's ``size``), and that
nothing in use is deleted: a member in a group, a member or group that
table entries point to (counted here, by ``use``).
"""
from __future__ import annotations

import collections

from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as pb

from emulator.dataplane.p4rt_server.write import Journal
from emulator.dataplane.state import SwitchState, TableEntry
from emulator.p4.codec import Codec
from emulator.p4.decoders import group_size
from emulator.p4.rejected import Rejected, invalid


class ActionProfiles:
    """Members, groups and their users, for every action profile of the program."""

    def __init__(self, state: SwitchState, codec: Codec):
        self.state = state
        self.codec = codec
        self._users: collections.Counter = collections.Counter()  # (profile, "member"|"group", id) -> entries

    def reset(self) -> None:
        self._users.clear()

    # ------------------------------------------------------------ table entries' references

    def require(self, t: p4info_pb2.Table, entry: TableEntry) -> None:
        """NOT_FOUND unless the member or group an entry of ``t`` points to exists."""
        if entry.member_id is None and entry.group_id is None:
            return
        pname = self.codec.profile(t.implementation_id).preamble.name
        aps = self.state.action_profiles[t.implementation_id]
        if entry.member_id is not None and entry.member_id not in aps.members:
            raise Rejected(code_pb2.NOT_FOUND, f"{pname}: no member {entry.member_id}")
        if entry.group_id is not None and entry.group_id not in aps.groups:
            raise Rejected(code_pb2.NOT_FOUND, f"{pname}: no group {entry.group_id}")

    def use(self, t: p4info_pb2.Table, entry: TableEntry, delta: int, journal: Journal) -> None:
        """Count (``+1``) or uncount (``-1``) an entry of ``t`` as a user of its member or group."""
        if entry.member_id is not None:
            key = (t.implementation_id, "member", entry.member_id)
        elif entry.group_id is not None:
            key = (t.implementation_id, "group", entry.group_id)
        else:
            return
        journal.set(self._users, key, self._users[key] + delta)

    # ------------------------------------------------------------ Write

    def write_member(self, update: int, m: pb.ActionProfileMember, journal: Journal) -> None:
        call = self.codec.decode_member(m, update)
        prof = self.codec.profile(m.action_profile_id)
        pname, mid = prof.preamble.name, m.member_id
        aps = self.state.action_profiles[prof.preamble.id]
        if update == pb.Update.DELETE:
            if mid not in aps.members:
                raise Rejected(code_pb2.NOT_FOUND, f"{pname}: no member {mid}")
            groups = [g.group_id for g in aps.groups.values() if any(x == mid for x, _ in g.members)]
            if groups:
                raise Rejected(code_pb2.FAILED_PRECONDITION, f"{pname}: member {mid} is in group(s) {sorted(groups)}")
            if self._users[(prof.preamble.id, "member", mid)] > 0:
                raise Rejected(code_pb2.FAILED_PRECONDITION, f"{pname}: member {mid} is used by table entries")
            journal.delete(aps.members, mid)
            return
        if update == pb.Update.INSERT:
            if mid in aps.members:
                raise Rejected(code_pb2.ALREADY_EXISTS, f"{pname}: member {mid} exists")
            if prof.size and len(aps.members) >= prof.size:
                raise Rejected(code_pb2.RESOURCE_EXHAUSTED, f"{pname} is full ({prof.size} members)")
        elif mid not in aps.members:
            raise Rejected(code_pb2.NOT_FOUND, f"{pname}: no member {mid}")
        journal.set(aps.members, mid, call)

    def write_group(self, update: int, g: pb.ActionProfileGroup, journal: Journal) -> None:
        prof = self.codec.profile(g.action_profile_id)
        aps = self.state.action_profiles[prof.preamble.id]
        group = self.codec.decode_group(g, update, aps.members)
        pid, pname, gid = prof.preamble.id, prof.preamble.name, g.group_id
        existing = aps.groups.get(gid)
        if update == pb.Update.DELETE:
            if existing is None:
                raise Rejected(code_pb2.NOT_FOUND, f"{pname}: no group {gid}")
            if self._users[(pid, "group", gid)] > 0:
                raise Rejected(code_pb2.FAILED_PRECONDITION, f"{pname}: group {gid} is used by table entries")
            journal.delete(aps.groups, gid)
            return
        size = group_size(prof, group.members)
        limit = g.max_size or prof.max_group_size
        if limit and size > limit:
            raise Rejected(code_pb2.RESOURCE_EXHAUSTED,
                           f"{pname}: group {gid} size {size} exceeds its max size {limit}")
        if update == pb.Update.INSERT:
            if existing is not None:
                raise Rejected(code_pb2.ALREADY_EXISTS, f"{pname}: group {gid} exists")
        else:
            if existing is None:
                raise Rejected(code_pb2.NOT_FOUND, f"{pname}: no group {gid}")
            if existing.max_size != g.max_size:
                raise invalid(f"{pname}: group {gid} max_size cannot change ({existing.max_size} -> {g.max_size})")
        if prof.size:
            used = sum(group_size(prof, x.members) for xid, x in aps.groups.items() if xid != gid)
            if used + size > prof.size:
                raise Rejected(code_pb2.RESOURCE_EXHAUSTED, f"{pname} is full (size {prof.size})")
        journal.set(aps.groups, gid, group)

    # ------------------------------------------------------------ Read

    def _profile_ids(self, profile_id: int) -> list[int]:
        return [self.codec.profile(profile_id).preamble.id] if profile_id else self.codec.p4info.action_profile_ids

    def read_members(self, q: pb.ActionProfileMember) -> list[pb.ActionProfileMember]:
        out = []
        for pid in self._profile_ids(q.action_profile_id):
            for mid, call in sorted(self.state.action_profiles[pid].members.items()):
                if not q.member_id or mid == q.member_id:
                    out.append(self.codec.encode_member(pid, mid, call))
        return out

    def read_groups(self, q: pb.ActionProfileGroup) -> list[pb.ActionProfileGroup]:
        out = []
        for pid in self._profile_ids(q.action_profile_id):
            for gid, group in sorted(self.state.action_profiles[pid].groups.items()):
                if not q.group_id or gid == q.group_id:
                    out.append(self.codec.encode_group(pid, group))
        return out
