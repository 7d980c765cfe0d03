"""Reading a configuration file so that no file can hang, exhaust or crash the reader.

What a user hands the emulator (experiment and topology files, ``--set``
values, a process's JSON config) is read here, within bounds that no real
file comes near, and refused in one ``ConfigError`` line past them:

* **Only regular files** (after following symlinks). A character device
  (``/dev/zero``, ``/dev/urandom``) never ends, a FIFO without a writer
  blocks forever, a directory or socket has no text: they are refused by
  their ``stat`` before they are opened, and by ``fstat`` of what was opened
  (``O_NONBLOCK``: opening a FIFO swapped in meanwhile does not wait).
* **At most** ``FABRIC_EMU_MAX_CONFIG_BYTES`` **bytes** (default 1 MiB; the
  largest shipped file is about 3 KB). At most that many bytes plus one are
  read, so a 50 MB file is refused after 1 MiB, not parsed for minutes.
* **YAML at most** ``MAX_YAML_DEPTH`` **levels deep, of at most**
  ``MAX_YAML_VALUES`` **values**, counted while the document is composed
  (``_BoundedComposer``), before any large object exists. Every scalar, list
  and mapping counts, keys included, and an alias counts as all it repeats,
  so ``*a`` x 10 nested nine times ("billion laughs") is refused at once
  instead of being validated as 10**9 values. The shipped files are at most
  5 levels deep and 160 values; 64 levels is what Python's stack
  takes comfortably through construction and validation, and 50,000 values
  are some 7,000 listed flows or an explicit fabric of 3,500 hosts -- past
  what one machine runs (``limits.NODE_MEMORY_BYTES`` per node) -- and
  are composed and refused within a few tenths of a second.

Events come from libyaml when PyYAML has it, and the garbage collector is paused
while a document is built (why, measured: ``docs/design-notes.md``, "Reading
configuration files").
"""
from __future__ import annotations

import gc
import os
import stat
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer, ComposerError
from yaml.constructor import SafeConstructor
from yaml.events import (
    AliasEvent, MappingEndEvent, MappingStartEvent, ScalarEvent, SequenceEndEvent,
    SequenceStartEvent,
)
from yaml.nodes import MappingNode, ScalarNode, SequenceNode
from yaml.reader import Reader
from yaml.resolver import Resolver

from emulator.errors import ConfigError

MAX_CONFIG_BYTES_ENV = "FABRIC_EMU_MAX_CONFIG_BYTES"
DEFAULT_MAX_CONFIG_BYTES = 1 << 20
# A process's JSON config is the runner's output, not the user's: its size
# follows the experiment (a host's flows, up to traffic_gen's 100,000 per
# generated entry at ~150 bytes each), so its bound only keeps a stray huge
# file out of memory.
MAX_PROCESS_CONFIG_BYTES = 1 << 28
MAX_YAML_DEPTH = 64
MAX_YAML_VALUES = 50_000
_DEEP = f"lists and mappings nested more than {MAX_YAML_DEPTH} levels deep"

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"))


def max_config_bytes() -> int:
    """The size limit of a config file: ``FABRIC_EMU_MAX_CONFIG_BYTES`` or 1 MiB."""
    text = os.environ.get(MAX_CONFIG_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_CONFIG_BYTES
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(MAX_CONFIG_BYTES_ENV, "", f"must be a whole number of bytes > 0 (got {text[:40]!r})")
    return value


def _not_regular(path: str | Path, st: os.stat_result) -> str | None:
    """What a non-regular file is ("is a FIFO (named pipe), not a regular
    file"; a symlink's target named); None for a regular file."""
    if stat.S_ISREG(st.st_mode):
        return None
    kind = next((name for test, name in _KINDS if test(st.st_mode)), "a special file")
    real = os.path.realpath(path)
    where = f" ({real})" if real != os.path.abspath(path) else ""
    return f"is {kind}{where}, not a regular file"


def file_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be read as a config file ("no such file", "is a
    directory, not a regular file"), or None: for a reference to a file
    (an experiment's ``topology:``) to be refused where it is written."""
    try:
        return _not_regular(path, os.stat(path))
    except OSError as e:
        return (e.strerror or str(e)).lower()


def read_bytes(path: str | Path, what: str, max_bytes: int | None = None) -> bytes:
    """A regular file's bytes, at most ``max_bytes`` (None: the config file
    limit); anything else is a one-line ConfigError ``cannot read WHAT: why``."""
    name = str(path)
    limit = max_config_bytes() if max_bytes is None else max_bytes

    def refuse(why: str) -> ConfigError:
        return ConfigError(name, "", f"cannot read {what}: {why}")

    def too_large(size: str) -> ConfigError:
        hint = f" (set {MAX_CONFIG_BYTES_ENV} to raise it)" if max_bytes is None else ""
        return refuse(f"{size} bytes, more than the limit of {limit:,}{hint}")

    try:
        why = _not_regular(path, os.stat(path))       # a device or FIFO is not even opened
        if why is None:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise refuse(e.strerror or str(e)) from None
    if why is not None:
        raise refuse(why)
    try:
        st = os.fstat(fd)                             # what was opened, if swapped since
        if (why := _not_regular(path, st)) is not None:
            raise refuse(why)
        if st.st_size > limit:
            raise too_large(f"{st.st_size:,}")
        chunks, n = [], 0
        while n <= limit:                             # one byte past the limit tells
            chunk = os.read(fd, min(limit + 1 - n, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            n += len(chunk)
        if n > limit:                                 # (it grew since the fstat)
            raise too_large(f"more than {limit:,}")
        return b"".join(chunks)
    except OSError as e:
        raise refuse(e.strerror or str(e)) from None
    finally:
        os.close(fd)


def read_text(path: str | Path, what: str, max_bytes: int | None = None) -> str:
    """A config file's UTF-8 text (``read_bytes``); bytes that are not UTF-8
    (a binary file, another encoding) are a ConfigError naming the line."""
    data = read_bytes(path, what, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line, column = _line_column(data, e.start)
        raise ConfigError(str(path), f"line {line}",
                          f"cannot read {what}: not UTF-8 text (byte 0x{data[e.start]:02x} at column "
                          f"{column}); save it as UTF-8") from None


def read_yaml(path: str | Path, what: str) -> Any:
    return parse_yaml(read_text(path, what), str(path))


def _line_column(text: str | bytes, offset: int) -> tuple[int, int]:
    """1-based line and column of ``offset`` in ``text``."""
    nl = "\n" if isinstance(text, str) else b"\n"
    start = text.rfind(nl, 0, offset) + 1
    return text.count(nl, 0, offset) + 1, offset - start + 1


# ------------------------------------------------------------------ YAML

class _Bound(yaml.YAMLError):
    """A document past a bound: ``reason`` at ``mark``."""

    def __init__(self, reason: str, mark):
        super().__init__(reason)
        self.reason, self.mark = reason, mark


class _Frame:
    """An open list or mapping: its node, anchor, the value count before it,
    its subtree's height so far, a mapping's key awaiting its value."""
    __slots__ = ("node", "anchor", "start", "height", "key")

    def __init__(self, node, anchor, start):
        self.node, self.anchor, self.start, self.height, self.key = node, anchor, start, 0, None


class _BoundedComposer(Composer):
    """PyYAML's composer, iterative (no recursion, whatever the depth) and
    counting: depth and values (an alias adds its anchor's) are checked at
    each event, so a document past a bound is refused before the rest is read."""

    def __init__(self):
        super().__init__()
        self.values = 0
        self.sized: dict[str, tuple[int, int]] = {}     # anchor -> (values, height) once closed

    def compose_document(self):
        self.get_event()                                 # DocumentStart
        node = self._compose_tree()
        self.get_event()                                 # DocumentEnd
        self.anchors, self.sized = {}, {}
        return node

    def _compose_tree(self):
        stack: list[_Frame] = []
        while True:
            event = self.get_event()
            kind = type(event)
            if kind is ScalarEvent:
                tag = event.tag
                if tag is None or tag == "!":
                    tag = self.resolve(ScalarNode, event.value, event.implicit)
                node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
                size, height = 1, 0
                self._anchor(event, node, size, height)
            elif kind is SequenceStartEvent or kind is MappingStartEvent:
                cls = SequenceNode if kind is SequenceStartEvent else MappingNode
                tag = event.tag
                if tag is None or tag == "!":
                    tag = self.resolve(cls, None, event.implicit)
                node = cls(tag, [], event.start_mark, None, flow_style=event.flow_style)
                self._anchor(event, node, None, None)
                stack.append(_Frame(node, event.anchor, self.values))
                self._count(1, len(stack), event)
                continue
            elif kind is SequenceEndEvent or kind is MappingEndEvent:
                frame = stack.pop()
                node, height = frame.node, frame.height + 1
                node.end_mark = event.end_mark
                if frame.anchor is not None:
                    self.sized[frame.anchor] = (self.values - frame.start, height)
                size = 0                                  # (counted as it was composed)
            elif kind is AliasEvent:
                anchor = event.anchor
                if anchor not in self.anchors:
                    raise ComposerError(None, None, f"found undefined alias {anchor!r}", event.start_mark)
                if anchor not in self.sized:
                    raise _Bound(f"alias *{anchor} is inside its own anchor: it would repeat "
                                 "itself without end", event.start_mark)
                node = self.anchors[anchor]
                size, height = self.sized[anchor]
            else:
                raise ComposerError(None, None, f"unexpected {kind.__name__}", event.start_mark)
            self._count(size, len(stack) + height, event)
            if not stack:
                return node
            top = stack[-1]
            top.height = max(top.height, height)
            if top.node.__class__ is SequenceNode:
                top.node.value.append(node)
            elif top.key is None:
                top.key = node
            else:
                top.node.value.append((top.key, node))
                top.key = None

    def _anchor(self, event, node, size, height) -> None:
        anchor = event.anchor
        if anchor is None:
            return
        if anchor in self.anchors:
            raise _Bound(f"anchor &{anchor} is defined twice (first on line "
                         f"{self.anchors[anchor].start_mark.line + 1})", event.start_mark)
        self.anchors[anchor] = node
        if size is not None:
            self.sized[anchor] = (size, height)

    def _count(self, size: int, depth: int, event) -> None:
        self.values += size
        if depth > MAX_YAML_DEPTH:
            raise _Bound(_DEEP, event.start_mark)
        if self.values > MAX_YAML_VALUES:
            raise _Bound(f"more than {MAX_YAML_VALUES:,} values, an alias counting as all it repeats",
                         event.start_mark)


try:
    from yaml._yaml import CParser as _Parser     # libyaml's scanner and parser

    def _init_parser(loader, stream):
        _Parser.__init__(loader, stream)
    _BASES: tuple = (_Parser,)
except ImportError:                               # PyYAML built without libyaml
    from yaml.parser import Parser
    from yaml.scanner import Scanner

    def _init_parser(loader, stream):
        Reader.__init__(loader, stream)
        Scanner.__init__(loader)
        Parser.__init__(loader)
    _BASES = (Reader, Scanner, Parser)


class _Loader(_BoundedComposer, *_BASES, SafeConstructor, Resolver):
    """Safe loading (plain data only) through the bounded composer; repeated
    mapping keys are errors instead of the last one silently winning."""

    def __init__(self, stream):
        _init_parser(self, stream)
        _BoundedComposer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)


def _construct_mapping(loader: SafeConstructor, node: MappingNode, deep: bool = False):
    loader.flatten_mapping(node)
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, Hashable):
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, source: str) -> Any:
    """YAML text -> Python data; syntax errors and documents past the
    bounds become ConfigError("line N")."""
    bad = Reader.NON_PRINTABLE.search(text)
    if bad:                          # a character YAML does not allow (NUL, control bytes)
        line, column = _line_column(text, bad.start())
        raise ConfigError(source, f"line {line}", f"not YAML text: character U+{ord(bad.group()):04X} "
                                                  f"is not allowed (column {column})")
    collecting = gc.isenabled()
    gc.disable()
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeConstructor loader)
    except _Bound as e:
        raise ConfigError(source, f"line {e.mark.line + 1}",
                          f"{e.reason} (column {e.mark.column + 1})") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = e.problem or e.context or "invalid YAML"
        if problem == "exceeded maximum nesting depth":       # libyaml's own bound (1000)
            raise ConfigError(source, f"line {mark.line + 1}", f"{_DEEP} (column {mark.column + 1})") from None
        if mark is not None:
            raise ConfigError(source, f"line {mark.line + 1}",
                              f"YAML syntax error: {problem} (column {mark.column + 1})") from None
        raise ConfigError(source, "", f"YAML syntax error: {problem}") from None
    except yaml.YAMLError as e:
        raise ConfigError(source, "", f"YAML syntax error: {' '.join(str(e).split())}") from None
    finally:
        if collecting:
            gc.enable()
