"""Reference pages of the configuration files, from the pydantic models.

Every field of a model: its type, unit, default and bounds as pydantic holds
them, and its description from the comment the source puts beside (or just
above) it, so the page says what the code does and cannot drift from it.
"""
from __future__ import annotations

import inspect
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

# Units read off a field's name (the project's rule: units in names).
_UNITS = [("_bytes", "bytes"), ("_gbps", "Gbit/s"), ("_GBps", "GB/s"), ("_mbps", "Mbit/s"),
          ("_us", "µs (fabric)"), ("_unix_ns", "ns since the Unix epoch"),
          ("_ns", "ns (fabric)"), ("wall_s", "s (wall)"), ("_s", "s"),
          ("_blocks", "64-byte blocks"), ("_pkts", "packets"), ("_percent", "%")]
_COMMENT = re.compile(r"#\s?(.*)$")


@dataclass
class Row:
    name: str
    type: str
    unit: str
    default: str
    bounds: str
    doc: str


@dataclass
class Section:
    model: type[BaseModel]
    path: str                               # e.g. "qos.pfc"
    intro: str
    rows: list[Row] = field(default_factory=list)


def unit_of(name: str) -> str:
    for suffix, unit in _UNITS:
        if name.endswith(suffix):
            return unit
    return ""


def _comments(model: type[BaseModel]) -> dict[str, str]:
    """``field -> description``: the comment on the field's line, after the
    comment lines just above it."""
    try:
        lines, _ = inspect.getsourcelines(model)
    except (OSError, TypeError):
        return {}
    out, above = {}, []
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("#").strip())
            continue
        m = re.match(r"\s{4}(\w+)\s*:", line)
        if m and m.group(1) in model.model_fields:
            trailing = _COMMENT.search(line.split('"')[-1] if line.count('"') % 2 == 0 else "")
            parts = above + ([trailing.group(1).strip()] if trailing else [])
            out[m.group(1)] = " ".join(p for p in parts if p)
        above = []
    return out


def _intro(model: type[BaseModel]) -> str:
    doc = inspect.getdoc(model) or ""
    if model.__doc__ is None or doc == inspect.getdoc(BaseModel):
        return ""
    return doc.split("\n\n")[0].replace("\n", " ")


def _strip(tp: Any) -> tuple[Any, list[Any]]:
    """(the bare type, the Annotated metadata around it)."""
    meta: list[Any] = []
    while get_origin(tp) is Annotated:
        args = get_args(tp)
        tp, meta = args[0], meta + list(args[1:])
    return tp, meta


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _union_args(tp: Any) -> tuple | None:
    if get_origin(tp) in (Union, types.UnionType):
        return get_args(tp)
    return None


def type_text(tp: Any) -> str:
    tp, _ = _strip(tp)
    if tp is type(None):
        return "null"
    if (args := _union_args(tp)) is not None:
        return " \\| ".join(type_text(a) for a in args)
    origin = get_origin(tp)
    if origin is Literal:
        return " \\| ".join(f"`{a}`" if isinstance(a, str) else repr(a) for a in get_args(tp))
    if origin in (list, tuple, dict):
        inner = ", ".join(type_text(a) for a in get_args(tp) if a is not Ellipsis)
        return f"{origin.__name__}[{inner}]"
    if _is_model(tp):
        return f"[{title_of(tp)}](#{anchor(tp)})"
    if isinstance(tp, type):
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
            tp.__name__, tp.__name__)
    return str(tp).replace("typing.", "")


def _metadata(tp: Any) -> list[Any]:
    """Every constraint object on a type, through Optional and Annotated."""
    tp, meta = _strip(tp)
    out = []
    for m in meta:
        out.extend(m.metadata if isinstance(m, FieldInfo) else [m])
    for arg in _union_args(tp) or ():
        out.extend(_metadata(arg))
    return out


def bounds_text(info: FieldInfo) -> str:
    parts: list[str] = []
    for m in list(info.metadata) + _metadata(info.annotation):
        for cls, attr, op in ((at.Gt, "gt", ">"), (at.Ge, "ge", "≥"), (at.Lt, "lt", "<"),
                              (at.Le, "le", "≤")):
            if isinstance(m, cls):
                parts.append(f"{op} {_num(getattr(m, attr))}")
        if isinstance(m, at.MinLen):
            parts.append(f"at least {m.min_length} item{'s' if m.min_length != 1 else ''}")
        if isinstance(m, at.MaxLen):
            parts.append(f"at most {m.max_length} items")
        func = getattr(m, "func", None)
        if func is not None:
            if hasattr(func, "bounds"):
                low, high = func.bounds
                parts.append(f"{_num(low)} .. {_num(high)}")
            elif func.__doc__:
                parts.append(func.__doc__.strip())
    return "; ".join(dict.fromkeys(parts))


def _num(v: Any) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) >= 1:
        v = int(v)
    return f"{v:,}" if isinstance(v, int) and abs(v) >= 10_000 else f"{v:g}" if isinstance(v, float) else str(v)


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "**required**"
    if info.default_factory is not None:
        return "(computed)"
    v = info.default
    if v is PydanticUndefined:
        return ""
    if isinstance(v, BaseModel):
        return "(its defaults)"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"`{str(v).lower()}`"
    if isinstance(v, (int, float)):
        return f"`{_num(v)}`"
    return f"`{v!r}`" if not isinstance(v, str) else (f"`{v}`" if v else '`""`')


def _nested_models(tp: Any) -> list[type[BaseModel]]:
    tp, _ = _strip(tp)
    if _is_model(tp):
        return [tp]
    out = []
    for arg in get_args(tp):
        out.extend(_nested_models(arg))
    return out


def sections(root: type[BaseModel], path: str = "") -> list[Section]:
    """The root model and every model under it, depth first, each once."""
    seen: dict[type, Section] = {}

    def walk(model: type[BaseModel], where: str) -> None:
        if model in seen:
            return
        sec = seen[model] = Section(model, where, _intro(model))
        notes = _comments(model)
        hints = typing.get_type_hints(model, include_extras=True)
        for name, info in model.model_fields.items():
            tp = hints.get(name, info.annotation)
            sec.rows.append(Row(name, type_text(tp), unit_of(name), default_text(info),
                                bounds_text(info), notes.get(name, "")))
        for name, info in model.model_fields.items():
            for sub in _nested_models(hints.get(name, info.annotation)):
                walk(sub, f"{where}.{name}" if where else name)

    walk(root, path)
    return list(seen.values())


def anchor(model: type) -> str:
    return model.__name__.lstrip("_").lower()


def title_of(model: type) -> str:
    return model.__name__.lstrip("_")


def _plain(text: str) -> str:
    """Text outside code spans: ``<`` is no HTML tag, ``[...]`` no link."""
    return text.replace("<", "&lt;").replace("[", "\\[").replace("]", "\\]")


def _cell(text: str) -> str:
    """One table cell: no line breaks, pipes escaped, ``<`` outside code
    spans escaped (``<name>`` is not an HTML tag)."""
    text = " ".join(text.split())
    if "\\|" not in text:
        text = text.replace("|", "\\|")
    parts = re.split(r"(`+[^`]*`+)", text)
    return "".join(p if p.startswith("`") else _plain(p) for p in parts)


def render(secs: list[Section], title: str, intro: str) -> str:
    out = [f"# {title}", "", intro, ""]
    for sec in secs:
        name = sec.model.__name__
        out += [f"## {title_of(sec.model)} {{ #{anchor(sec.model)} }}", "",
                f"`{sec.path or '(the file)'}` -- `{sec.model.__module__}.{name}`", ""]
        if sec.intro:
            out += [_cell(sec.intro), ""]
        out += ["| field | type | unit | default | bounds | description |",
                "|---|---|---|---|---|---|"]
        for r in sec.rows:
            out.append(f"| `{r.name}` | {r.type} | {r.unit} | {r.default} | {_cell(r.bounds)} | "
                       f"{_cell(r.doc)} |")
        out.append("")
    return "\n".join(out)


def experiment_page() -> str:
    from emulator.schema.experiment import ExperimentSpec
    return render(sections(ExperimentSpec), "Experiment file",
                  "Every field of an experiment file, generated from the schema models "
                  "(`emulator/schema/`) when the site is built. A field's unit follows its name; "
                  "fabric times and rates are in the fabric's own units whatever the clock "
                  "(see [How time works](../explanation/time.md)). The `topology:` field takes a path "
                  "or an inline [topology](topology.md).")


def topology_page() -> str:
    from emulator.schema.topology import FabricSpec
    return render(sections(FabricSpec), "Topology file",
                  "Every field of a topology file, generated from the schema models "
                  "(`emulator/schema/topology.py`) when the site is built. A file gives one fabric "
                  "form: `clos`, `nodes` + `links`, or `servers` with `rail_optimized` or `clos` "
                  "(see [Write a topology](../how-to/topology.md)).")


def summary_page() -> str:
    from emulator.experiment.summary_file import RunSummary, SummaryFile
    written = render(sections(RunSummary), "summary.json",
                     "Every key of a run's `summary.json`, generated from its typed model "
                     "(`RunSummary` in `emulator/experiment/summary_file.py`, the file's one "
                     "writer) when the site is built. A key marked *always* is in every summary; one "
                     "with a default is absent from the file until the run sets it. The blocks typed `dict` are kept as the JSON they are; "
                     "what their keys mean: [Read a run's results](../how-to/results.md).")
    # in a written file "required" means "always there"
    written = written.replace("| **required** |", "| always |")
    seen = {anchor(s.model) for s in sections(RunSummary)}
    read = render([s for s in sections(SummaryFile)[1:] if anchor(s.model) not in seen], "", "")
    return (written + "\n\n# Checked when read back\n\n"
            "`fabric-emu show` and `Result.load` check these keys of the blocks "
            "(`SummaryFile`, the same module); every other key is kept as it is.\n"
            + read.split("\n", 3)[3])
