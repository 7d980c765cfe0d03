"""gNMI paths: parsed from and written as text, and matched against the switch's leaves.

A leaf is a tuple of elements, each ``(name, ((key, value), ...))`` with its
keys sorted: ``/interfaces/interface[name=leaf1-eth1]/state/oper-status`` is
``(("interfaces", ()), ("interface", (("name", "leaf1-eth1"),)), ("state", ()),
("oper-status", ()))``. A request's path (its prefix joined to it) selects
every leaf it is a prefix of, element by element, where ``*`` stands for any
one element name or key value, a key left out for any value, and ``...``
for any number of elements (gNMI specification 2.2.2.1, 3.5.1.3).
"""
from __future__ import annotations

from gnmi import gnmi_pb2 as pb

Elem = tuple[str, tuple[tuple[str, str], ...]]
Leaf = tuple[Elem, ...]
ORIGINS = ("", "openconfig")      # the models' origin: OpenConfig (the default)


class PathError(ValueError):
    """A path that is not well formed, or that names nothing the switch serves."""


def elems_of(path: pb.Path) -> tuple[Elem, ...]:
    """The elements of a ``gnmi.Path`` (its deprecated string ``element`` refused)."""
    if path.element:
        raise PathError("Path.element (deprecated since gNMI 0.4) is not supported: use Path.elem")
    return tuple((e.name, tuple(sorted(e.key.items()))) for e in path.elem)


def join(prefix: pb.Path | None, path: pb.Path) -> tuple[Elem, ...]:
    """A request's prefix and one of its paths as one element sequence."""
    for p in (prefix, path):
        if p is not None and p.origin not in ORIGINS:
            raise PathError(f"origin {p.origin!r} is not served (only OpenConfig's: '' or 'openconfig')")
    head = elems_of(prefix) if prefix is not None else ()
    return head + elems_of(path)


def to_path(elems: tuple[Elem, ...]) -> pb.Path:
    return pb.Path(elem=[pb.PathElem(name=name, key=dict(keys)) for name, keys in elems])


class PathCache:
    """``cache[i]``: leaf i's ``gnmi.Path``, made when first asked for (a
    16-port switch has ~1,500 leaves; most are never asked for)."""

    def __init__(self, leaves: list[Leaf]):
        self.leaves = leaves
        self._made: dict[int, pb.Path] = {}

    def __getitem__(self, i: int) -> pb.Path:
        path = self._made.get(i)
        if path is None:
            path = self._made[i] = to_path(self.leaves[i])
        return path


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("]", "\\]")


def format_elems(elems: tuple[Elem, ...]) -> str:
    """``/a/b[k=v]/c``: the path as gnmic and the docs write it."""
    out = []
    for name, keys in elems:
        out.append(name + "".join(f"[{k}={_escape(v)}]" for k, v in keys))
    return "/" + "/".join(out)


def format_path(path: pb.Path) -> str:
    return format_elems(elems_of(path))


def parse_elems(text: str) -> tuple[Elem, ...]:
    """The inverse of ``format_elems``; a key value may hold ``/`` and escaped ``]``."""
    if not text.startswith("/"):
        raise PathError(f"path {text!r}: must start with '/'")
    elems: list[Elem] = []
    i, n = 1, len(text)
    while i < n:
        j = i
        while j < n and text[j] not in "/[":
            j += 1
        name = text[i:j]
        if not name:
            raise PathError(f"path {text!r}: empty element at character {i}")
        keys = []
        while j < n and text[j] == "[":
            eq = text.find("=", j)
            if eq < 0:
                raise PathError(f"path {text!r}: key without '=' at character {j}")
            key, k, value = text[j + 1:eq], eq + 1, []
            while k < n and text[k] != "]":
                if text[k] == "\\" and k + 1 < n:
                    k += 1
                value.append(text[k])
                k += 1
            if k >= n or not key:
                raise PathError(f"path {text!r}: unterminated or empty key at character {j}")
            keys.append((key, "".join(value)))
            j = k + 1
        elems.append((name, tuple(sorted(keys))))
        if j < n and text[j] != "/":
            raise PathError(f"path {text!r}: unexpected {text[j]!r} at character {j}")
        i = j + 1
    return tuple(elems)


def parse_path(text: str) -> pb.Path:
    return to_path(parse_elems(text))


def _elem_matches(pattern: Elem, elem: Elem) -> bool:
    name, keys = pattern
    if name != "*" and name != elem[0]:
        return False
    have = dict(elem[1])
    return all(k in have and (v == "*" or v == have[k]) for k, v in keys)


def matches(pattern: tuple[Elem, ...], leaf: Leaf) -> bool:
    """Whether ``pattern`` selects ``leaf`` (a prefix of it, with wildcards)."""
    if not pattern:
        return True
    head, rest = pattern[0], pattern[1:]
    if head[0] == "...":
        return any(matches(rest, leaf[i:]) for i in range(len(leaf) + 1))
    return bool(leaf) and _elem_matches(head, leaf[0]) and matches(rest, leaf[1:])


def select(pattern: tuple[Elem, ...], leaves: list[Leaf]) -> list[int]:
    """Indexes of the leaves ``pattern`` selects; none is a ``PathError``."""
    chosen = [i for i, leaf in enumerate(leaves) if matches(pattern, leaf)]
    if not chosen:
        raise PathError(f"unknown path {format_elems(pattern)}: the switch serves "
                        "/interfaces/interface[name=IF]/state/... and "
                        "/qos/interfaces/interface[interface-id=IF]/output/queues/queue[name=N]/"
                        "state/... (docs/telemetry.md)")
    return chosen
