"""Decoded P4Runtime entities: the form a target keeps and matches on.

``emulator.p4.codec`` decodes (and validates) P4Runtime messages into these
values and encodes them back; the embedded target stores them in its
``SwitchState`` and its pipeline compiles them. Values are ints, not
bytestrings, and entries are keyed the way P4Runtime identifies them, so a
Read returns what a Write stored. Nothing here knows about a target.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Match of one field: ("exact", value) | ("lpm", value, prefix_len)
#                   | ("ternary", value, mask) | ("range", low, high)
# (an optional match is stored as exact). Fields missing from an entry's
# match are wildcards (don't-care).
FieldMatch = tuple


@dataclass(frozen=True)
class ActionCall:
    action_id: int
    params: tuple[tuple[int, int], ...]  # (param_id, value), sorted by id

    def param(self, param_id: int) -> int:
        for pid, value in self.params:
            if pid == param_id:
                return value
        raise KeyError(param_id)


@dataclass
class TableEntry:
    table_id: int
    match: dict[int, FieldMatch]      # field_id -> FieldMatch
    priority: int = 0                 # ternary/range tables only
    action: ActionCall | None = None  # direct action, or
    member_id: int | None = None      # action-profile member, or
    group_id: int | None = None       # action-profile group
    metadata: bytes = b""             # controller cookie, returned on Read

    def key(self) -> tuple:
        """Identity of the entry within its table (P4Runtime: match + priority)."""
        return (self.priority, tuple(sorted(self.match.items())))


@dataclass
class ActionProfileGroup:
    group_id: int
    members: list[tuple[int, int]] = field(default_factory=list)  # (member_id, weight)
    max_size: int = 0
