"""``--set key.path=value`` on the command line: the experiment file's data,
changed before it is validated, so an override is checked like the file.

    data = apply_sets(read_experiment_data(path), ["nic.mtu_bytes=4096",
                                                   "traffic[0].size_bytes=65536"])

The path is the sweep's (``emulator.schema.paths.path_tokens``:
``a.b``, ``a[0].b`` or ``a.0.b``); the value is YAML (``10``, ``true``,
``auto``, ``{enabled: false}``), as it would be written in the file.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from emulator.errors import ConfigError
from emulator.schema.load import parse_yaml, show
from emulator.schema.paths import path_tokens, set_path


def parse_set(item: str) -> tuple[str, Any]:
    """``"a.b=value"`` -> ``("a.b", parsed value)``; a ConfigError names the item."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError("--set", item, "expected key.path=value")
    try:
        path_tokens(key)
    except ValueError as e:
        raise ConfigError("--set", key, str(e)) from None
    try:      # the files' reader: a value is bounded like a file (depth, values, aliases)
        value = parse_yaml(text, "--set") if text.strip() else ""
    except ConfigError as e:
        raise ConfigError("--set", key, f"value {show(text)} is not YAML: "
                                        f"{e.field + ': ' if e.field else ''}{e.reason}") from None
    return key, value


def apply_sets(data: Any, items: Mapping[str, Any] | Iterable[str] | None) -> Any:
    """``data`` with every override applied in order (a new object; ``data`` is
    kept). ``items``: ``--set`` strings (``"a.b=yaml"``), or a mapping of paths
    to Python values (the library's ``set=``)."""
    if not items:
        return data
    pairs = list(items.items()) if isinstance(items, Mapping) else [parse_set(i) for i in items]
    if not isinstance(data, dict):
        raise ConfigError("--set", "", "the file is not a mapping at its top level")
    for key, value in pairs:
        try:
            data = set_path(data, key, value)
        except (KeyError, ValueError) as e:
            raise ConfigError("--set", key, f"cannot set it: {e.args[0]}") from None
    return data


__all__ = ["apply_sets", "parse_set"]
