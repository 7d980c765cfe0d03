"""Reading configuration files and turning every validation failure into one line.

The ONE YAML loader (topology and experiment files; ``reading.py`` reads
them within bounds no file can hang or exhaust) and the ONE translator
from a pydantic ``ValidationError`` to ``ConfigError("FILE", "field.path",
"reason")``, so that every file and process config reports a bad value the
same way::

    FILE: clos.spines: must be >= 1 (got 0)
    FILE: links[3].speed: unknown field (expected one of: a, b, rate_gbps, delay_us)

A validator that knows which field is wrong raises ``FieldError(field,
reason)``; the translator appends ``field`` to the location pydantic gives.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Optional, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError

from emulator.atomic import atomic_write_text
from emulator.errors import ConfigError
# Files are read (regular files only, bounded in size, depth and values) by reading.py.
from emulator.schema.reading import (  # noqa: F401  (the loader's API)
    MAX_PROCESS_CONFIG_BYTES, parse_yaml, read_text, read_yaml,
)

M = TypeVar("M", bound=BaseModel)


class FieldError(ValueError):
    """A validator's complaint about one field: ``field`` is relative to the
    model that raises it (dotted, ``[i]`` for list items; "" for the model)."""

    def __init__(self, field: str, reason: str):
        super().__init__(reason)
        self.field, self.reason = field, reason


class StrictSpec(BaseModel):
    """Base of every schema model: unknown keys are errors, no type coercion
    (``"2"`` is not an integer, ``true`` is not a number), and every number
    is finite (``.inf`` and ``.nan`` are YAML floats, but no rate, time or
    factor of a fabric is infinite)."""
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class ProcessConfig(StrictSpec):
    """Base of a process's JSON config: the runner builds it and writes
    ``model_dump_json()``; the process reads it back with ``load``.
    ``vtime_socket``: set when the run is in virtual time -- the
    coordinator's socket (``emulator.vtime``) the process's clock joins."""

    vtime_socket: Optional[str] = None

    @classmethod
    def load(cls: type[M], path: str | Path) -> M:
        return load_json(cls, path)

    def write(self, path: str | Path) -> None:
        # whole or not at all: a process's config is read by it, and by
        # whoever watches a run (a monitoring client reads a switch's port)
        atomic_write_text(path, self.model_dump_json(indent=1))


def validate(model: type[M], data: Any, source: str | Path, *, prefix: str = "") -> M:
    """``model`` validated from parsed data; errors name ``prefix.field``."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise config_error(e, source, model, prefix) from None


def load_json(model: type[M], path: str | Path) -> M:
    """A process's JSON config file, validated by ``model``."""
    text = read_text(path, "JSON config", MAX_PROCESS_CONFIG_BYTES)
    try:
        return model.model_validate_json(text)
    except ValidationError as e:
        raise config_error(e, path, model) from None


# --------------------------------------------------------------- translating

def show(value: Any) -> str:
    """A value as the user wrote it in YAML, shortened."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def join_path(prefix: str, field: str) -> str:
    """``prefix`` + ``field`` as one dotted path (``a`` + ``[0].b`` = ``a[0].b``)."""
    if not prefix:
        return field
    if not field:
        return prefix
    return prefix + field if field.startswith("[") else f"{prefix}.{field}"


_TYPE_NAMES = {
    "int_type": "an integer", "float_type": "a number", "string_type": "a string",
    "list_type": "a list", "tuple_type": "a list", "model_type": "a mapping",
    "dict_type": "a mapping", "model_attributes_type": "a mapping", "bool_type": "true or false",
}
# The input had the wrong shape for one branch of a union: another branch's
# error says more (``sizes: [6]`` vs ``sizes: {min_bytes: ...}``).
_SHAPE = {"list_type", "tuple_type", "model_type", "model_attributes_type", "dict_type"}


def config_error(exc: ValidationError, source: str | Path, model: type[BaseModel],
                 prefix: str = "") -> ConfigError:
    """The first error of ``exc`` (validating ``model``) as one line; how
    many more there were is appended as ``[+N more errors]``."""
    located = [(_walk(model, tuple(e["loc"])), e) for e in exc.errors(include_url=False)]
    path0 = located[0][0][0]
    # The first field's errors (its union branches' included): one that is
    # not "wrong shape" says what the value meant for that branch lacks.
    same = [x for x in located if x[0][0] == path0 or x[0][0].startswith((f"{path0}.", f"{path0}["))
            or not path0]
    # Of those, one about the value (a bound, finite) says more than "must be a
    # string" from a branch of another type (``values: [.inf]``: int | float | str).
    (path, at), e = next((x for x in same if x[1]["type"] not in _SHAPE and x[1]["type"] not in _TYPE_NAMES),
                         next((x for x in same if x[1]["type"] not in _SHAPE), same[0]))
    kind, value, ectx = e["type"], e.get("input"), e.get("ctx") or {}
    got = f" (got {show(value)})"
    error = ectx.get("error")
    if isinstance(error, FieldError):
        path, reason = join_path(path, error.field), error.reason
    elif kind == "missing":
        reason = "required"
    elif kind == "extra_forbidden":
        allowed = ", ".join(at.model_fields) if at is not None else ""
        reason = f"unknown field{f' (expected one of: {allowed})' if allowed else ''}"
    elif kind == "union_tag_field":
        # a discriminated union's unknown tag; its message is "FIELD: reason"
        tag, _, reason = str(e.get("msg", "")).partition(": ")
        path = join_path(path, tag)
        given = value.get(tag) if isinstance(value, Mapping) else None
        reason = f"required ({reason})" if given is None else f"{reason} (got {show(given)})"
    elif kind == "literal_error":
        expected = str(ectx.get("expected", "")).replace("'", "")
        reason = f"must be one of {expected}{got}"
    elif kind in _TYPE_NAMES:
        reason = f"must be {_TYPE_NAMES[kind]}{got}"
    elif kind == "greater_than":
        reason = f"must be > {ectx.get('gt')}{got}"
    elif kind == "greater_than_equal":
        reason = f"must be >= {ectx.get('ge')}{got}"
    elif kind == "less_than":
        reason = f"must be < {ectx.get('lt')}{got}"
    elif kind == "less_than_equal":
        reason = f"must be <= {ectx.get('le')}{got}"
    elif kind == "finite_number":
        reason = f"must be a finite number{got}"
    elif kind == "too_short":
        reason = f"must have at least {ectx.get('min_length')} item(s)"
    else:
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        scalar = not isinstance(value, (Mapping, list, tuple))
        reason = f"{msg[:1].lower()}{msg[1:]}{got if scalar else ''}"
    more = len({p for (p, _), _ in located} - {p for (p, _), _ in same})
    if more:
        reason += f" [+{more} more error{'s' if more > 1 else ''}]"
    return ConfigError(str(source), join_path(prefix, path), reason)


def _walk(model: type[BaseModel], loc: tuple) -> tuple[str, type[BaseModel] | None]:
    """(field path, model holding the last field) of a pydantic location:
    list indexes as ``[i]``, union branch tags (``str``, ``SizeRange``,
    ``function-after[...]``) left out."""
    path, holder = "", None
    cur: Any = model
    for part in loc:
        cur = _unwrap(cur)
        if _is_union(cur) and isinstance(part, str):
            cur = _branch(cur, part)
            continue
        if isinstance(cur, type) and issubclass(cur, BaseModel):
            holder = cur
            path = join_path(path, str(part))
            f = cur.model_fields.get(str(part))
            cur = f.annotation if f is not None else Any
        elif isinstance(part, int):
            path += f"[{part}]"
            args = get_args(cur)
            cur = args[0] if args else Any
        elif get_origin(cur) is dict:
            path = join_path(path, str(part))
            cur = get_args(cur)[1] if get_args(cur) else Any
        elif _looks_like_tag(str(part)):
            continue
        else:
            path = join_path(path, str(part))
            cur = Any
    return path, holder


def _unwrap(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    args = [a for a in get_args(tp) if a is not type(None)] if _is_union(tp) else None
    if args is not None and len(args) == 1:      # Optional[X] is X (None is its own check)
        return _unwrap(args[0])
    return tp


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, UnionType)


def _branch(tp: Any, tag: Any) -> Any:
    """The member of union ``tp`` that pydantic's tag ``tag`` names."""
    for arg in get_args(tp):
        a = _unwrap(arg)
        name = getattr(a, "__name__", "")
        if tag == name or (isinstance(tag, str) and get_origin(a) is not None
                           and tag.startswith(f"{getattr(get_origin(a), '__name__', '')}[")):
            return a
        if get_origin(a) is Literal and isinstance(tag, str) and tag.startswith("literal["):
            return a
    return Any


def _looks_like_tag(part: str) -> bool:
    return "[" in part or part.startswith("function-")
