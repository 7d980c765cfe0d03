"""Names and ids of a P4Info's sections: the index every P4Info lookup and
the codec share, and the error a missing name or id raises. The bottom of
``emulator.p4``: it imports nothing of the package."""
from __future__ import annotations

from typing import Any, Iterable

from p4.config.v1 import p4info_pb2

MatchType = p4info_pb2.MatchField.MatchType
# Match types for which a table needs entry priorities (P4Runtime spec 9.1).
PRIORITY_MATCH_TYPES = frozenset({MatchType.TERNARY, MatchType.RANGE, MatchType.OPTIONAL})


class P4InfoError(KeyError):
    """A name or id that the P4Info does not have."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class NamedIndex:
    """Index of one P4Info section by id, full name and alias."""

    def __init__(self, kind: str, items: Iterable[Any]):
        self.kind = kind
        self.by_id: dict[int, Any] = {}
        self.by_name: dict[str, Any] = {}
        for item in items:
            pre = item.preamble
            self.by_id[pre.id] = item
            self.by_name[pre.name] = item
        for item in self.by_id.values():  # aliases never shadow full names
            if item.preamble.alias:
                self.by_name.setdefault(item.preamble.alias, item)

    def get(self, key: Any) -> Any:
        if isinstance(key, int):
            found = self.by_id.get(key)
        else:
            found = self.by_name.get(key)
        if found is None:
            raise P4InfoError(f"no {self.kind} {key!r} in the P4Info")
        return found

    def find(self, key: Any) -> Any | None:
        return self.by_id.get(key) if isinstance(key, int) else self.by_name.get(key)


def by_id_or_name(kind: str, items: Iterable[Any], key: Any, owner: str) -> Any:
    for item in items:
        if (isinstance(key, int) and item.id == key) or item.name == key:
            return item
    raise P4InfoError(f"{owner} has no {kind} {key!r}")
