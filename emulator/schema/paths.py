"""Dotted paths into an experiment file's data: what ``--set key.path=value``
and a ``sweep:`` change before the file is validated.

    path_tokens("traffic[0].size_bytes") == ["traffic", 0, "size_bytes"]   # or traffic.0.size_bytes
    set_path(data, "qos.ecn.kmax_bytes", 60000)      # a copy; missing mappings are created
"""
from __future__ import annotations

import copy
import json
import re
from typing import Any

_TOKEN = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def path_tokens(dotted: str) -> list[str | int]:
    """``traffic[0].size_bytes`` / ``traffic.0.size_bytes`` -> ['traffic', 0, 'size_bytes']."""
    tokens: list[str | int] = []
    for part in dotted.split("."):
        if not part:
            raise ValueError(f"{dotted!r}: empty component")
        for m in _TOKEN.finditer(part):
            key, index = m.groups()
            tokens.append(int(index) if index is not None else
                          int(key) if key.isdigit() else key)
        if "".join(m.group(0) for m in _TOKEN.finditer(part)) != part:
            raise ValueError(f"{dotted!r}: cannot parse {part!r}")
    return tokens


def set_path(data: dict, dotted: str, value: Any) -> dict:
    """A deep copy of ``data`` with ``dotted`` set to ``value`` (mappings created as needed)."""
    out = copy.deepcopy(data)
    tokens = path_tokens(dotted)
    cur: Any = out
    for i, tok in enumerate(tokens):
        last = i == len(tokens) - 1
        where = ".".join(map(str, tokens[:i + 1]))
        if isinstance(tok, int):
            if not isinstance(cur, list) or not -len(cur) <= tok < len(cur):
                raise KeyError(f"{where}: no list item {tok}")
            if last:
                cur[tok] = copy.deepcopy(value)
            else:
                cur = cur[tok]
            continue
        if not isinstance(cur, dict):
            raise KeyError(f"{where}: not a mapping")
        if last:
            cur[tok] = copy.deepcopy(value)
        else:
            if cur.get(tok) is None:
                cur[tok] = [] if isinstance(tokens[i + 1], int) else {}
            cur = cur[tok]
    return out


# A sweep point's run directory is "<parameter>=<value>" (``point_name``),
# "#<i>" appended if two values label alike: one file name of at most 255 bytes.
MAX_POINT_NAME_BYTES = 255 - 8


def value_label(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        text = repr(value)
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, separators=(",", ":"), sort_keys=True)
    else:
        text = str(value)
    return re.sub(r"[\s/\\:]+", "_", text)


def point_name(parameter: str, value: Any) -> str:
    """The run directory name of a sweep point: ``<parameter>=<value_label>``."""
    return f"{parameter}={value_label(value)}"
