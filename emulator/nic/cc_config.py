"""A congestion-control state machine's parameters from its agent-config
dict: the one reading that ``DcqcnParams``, ``HpccParams`` and
``emulator.nic.ib_cc.IbCcParams`` share (missing keys take the dataclass's
defaults, an unknown key or a bad value is a ValueError naming
``section.key``, then the params' own ``validate()``)."""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, TypeVar

P = TypeVar("P")


def params_from_config(cls: type[P], d: dict | None, section: str,
                       convert: Callable[[str, Any], Any]) -> P:
    """``cls()`` with ``d``'s keys set: ``enabled`` must be a bool, every
    other value goes through ``convert(key, value)`` (which returns what to
    set or raises ValueError)."""
    p = cls()
    if d is None:
        return p
    if not isinstance(d, dict):
        raise ValueError(f"{section} must be an object")
    known = {f.name for f in fields(cls)}
    for k, v in d.items():
        if k not in known:
            raise ValueError(f"{section}.{k}: unknown key (known: {', '.join(sorted(known))})")
        if k == "enabled":
            if not isinstance(v, bool):
                raise ValueError(f"{section}.enabled: expected true/false, got {v!r}")
        else:
            v = convert(k, v)
        setattr(p, k, v)
    p.validate()
    return p


def number(section: str, key: str, v: Any) -> Any:
    """``v`` if it is an int or a float (not a bool)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{section}.{key}: expected a number, got {v!r}")
    return v


def integer(section: str, key: str, v: Any) -> int:
    """``v`` if it is an int (not a bool)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{section}.{key}: expected an integer, got {v!r}")
    return v
