"""Reading and writing the files of a run: raw logs, stats.json, result CSVs.

The bottom layer of the results code (it imports no other results module):
the raw per-process logs the switches and host agents write into the run
directory (formats in ``docs/lossless.md``, "Raw logs"), the switches'
``{sw}.stats.json``, and the CSV files of the results directory, written and
read back in one number format.

Missing or partly written raw logs (a process killed mid-line) are
tolerated: what cannot be parsed is skipped. A raw CSV may start with a
header line naming its columns (in any order); without one the columns are
in the order ``docs/lossless.md`` gives.
"""
from __future__ import annotations

import csv
import json
import math
from itertools import compress, islice, tee
from operator import itemgetter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Collection, Iterable, Mapping

from emulator.atomic import atomic_open
from emulator.rundir import RawDir

if TYPE_CHECKING:  # pragma: no cover
    from emulator.experiment.model import Experiment

# Raw log columns (docs/lossless.md) and how to parse each.
RAW_COLUMNS: dict[str, tuple[tuple[str, Callable], ...]] = {
    "qdepth": (("t_ns", int), ("port", int), ("priority", int), ("depth_bytes", int)),
    "events": (("t_ns", int), ("port", int), ("priority", int), ("event", str),
               ("value", float)),
    "qp": (("t_ns", int), ("qpn", int), ("rate_bps", float), ("alpha", float), ("event", str)),
    "cnp": (("t_ns", int), ("local_qpn", int), ("remote_qpn", int), ("direction", str)),
    "flows": (("t_ns", int), ("flow_id", int), ("acked_bytes", int)),
    "pfc": (("t_ns", int), ("priority", int), ("quanta", int)),
    "int": (("t_ns", int), ("qpn", int), ("hop", int), ("qlen_bytes", int), ("tx_bytes", int),
            ("ts_ns", int), ("rate_mbps", int), ("u", float), ("window_bytes", int)),
    "drops": (("t_ns", int), ("priority", int), ("reason", str), ("bytes", int)),
}
SWITCH_LOGS = RawDir.SWITCH_LOGS
HOST_LOGS = RawDir.HOST_LOGS


# ------------------------------------------------------------------ raw logs

def _int(v: str) -> int:
    """int() takes surrounding blanks; "1e3" or "7.0" (rare) go through float."""
    try:
        return int(v)
    except ValueError:
        return int(float(v))


def _converter(kind: Callable) -> Callable[[str], object]:
    return {int: _int, float: float}.get(kind, str.strip)


def read_raw_csv(path: str | Path, kind: str) -> list[dict]:
    """Rows of one raw log as dicts (``RAW_COLUMNS[kind]``); [] if missing."""
    columns = read_raw_columns(path, kind)
    names = list(columns)
    return [dict(zip(names, values)) for values in zip(*columns.values())]


def read_raw_columns(path: str | Path, kind: str) -> dict[str, list]:
    """One raw log's columns (``RAW_COLUMNS[kind]``: name -> its values, a
    value per row), rows that cannot be parsed left out; empty lists if the
    log is missing. (A 32-host all-to-all's hosts log 233k rows: as columns,
    not a dict per row.)"""
    cols = RAW_COLUMNS[kind]
    order = [name for name, _ in cols]
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        text = ""
    lines = text.splitlines()
    # no quotes: the csv module's rows are the lines split at commas (its parser
    # was most of the reading of a 32-host all-to-all's 233k-row hosts' logs)
    rows = [line.split(",") if line else [] for line in lines] if '"' not in text and "\0" not in text \
        else list(csv.reader(lines))
    index = {name: i for i, name in enumerate(order)}
    if rows:
        first = [c.strip() for c in rows[0]]
        if first and first[0] and not _numeric(first[0]):      # a header line
            if all(name in first for name in order):
                index = {name: first.index(name) for name in order}
            rows = rows[1:]
    convert = [(index[name], _converter(kind_)) for name, kind_ in cols]
    columns = _convert_columns(rows, convert)
    if columns is None:     # a row at a time: the rows that fail are left out
        out = []
        for r in rows:
            try:
                out.append(tuple(conv(r[i]) for i, conv in convert))
            except (IndexError, ValueError):
                continue    # a truncated or malformed line
        columns = [list(c) for c in zip(*out)] if out else [[] for _ in order]
    return dict(zip(order, columns))


_FAST = {_int: int, float: float, str.strip: str.strip}


def _convert_columns(rows: list[list[str]], convert) -> list[list] | None:
    """``read_raw_columns``' rows converted a column at a time (a call per
    cell was most of their reading), or None if a cell would need ``_int``'s
    float fallback or fails: then a row at a time decides. Short rows
    (a line cut off) are left out, as there."""
    need = max(i for i, _ in convert) + 1
    rows = [r for r in rows if len(r) >= need]
    try:
        return [list(map(_FAST[conv], [r[i] for r in rows])) for i, conv in convert]
    except ValueError:
        return None


def _numeric(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def read_stats(path: str | Path) -> dict:
    """A switch's ``stats.json``; {} if missing or unreadable."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def stats_by_port_priority(stats: Mapping) -> dict[tuple[int, int], dict]:
    """(port, priority) -> counters, from a switch's stats.json.

    Accepts the per-port, per-priority layouts a stats writer may use::

        {"ports": [{"port": 1, ..., "priorities": [{"priority": 3, "tx_packets": ..}, ..]}]}
        {"ports": [{"port": 1, ..., "priorities": {"3": {"tx_packets": ..}, ..}}]}
        {"ports": [{"port": 1, "priority": 3, "tx_packets": ..}, ..]}   # one entry per queue
        {"queues": [{"port": 1, "priority": 3, ...}, ..]}
    """
    out: dict[tuple[int, int], dict] = {}

    def add(port, prio, counters) -> None:
        if port is None or prio is None or not isinstance(counters, Mapping):
            return
        try:
            key = (int(port), int(prio))
        except (TypeError, ValueError):
            return
        merged = out.setdefault(key, {})
        merged.update({k: v for k, v in counters.items() if k not in ("port", "priority")})

    for p in stats.get("ports", []) or []:
        if not isinstance(p, Mapping):
            continue
        prios = p.get("priorities", p.get("queues"))
        if isinstance(prios, Mapping):
            for prio, c in prios.items():
                add(p.get("port"), prio, c)
        elif isinstance(prios, list):
            for c in prios:
                if isinstance(c, Mapping):
                    add(p.get("port"), c.get("priority"), c)
        elif "priority" in p:
            add(p.get("port"), p.get("priority"), p)
    for q in stats.get("queues", []) or []:
        if isinstance(q, Mapping):
            add(q.get("port"), q.get("priority"), q)
    return out


@dataclass
class RawLogs:
    """Every raw log of a run directory, parsed, in raw (dilated) units."""

    switch: dict[str, dict[str, list[dict]]] = field(default_factory=dict)   # sw -> kind -> rows
    host: dict[str, dict[str, list[dict]]] = field(default_factory=dict)     # host -> kind -> rows
    stats: dict[str, dict] = field(default_factory=dict)                     # sw -> stats.json


def read_raw_logs(exp: "Experiment", run_dir: str | Path | RawDir) -> RawLogs:
    rawdir = RawDir(run_dir)
    raw = RawLogs()
    for sw in exp.fabric.switches():
        raw.switch[sw.name] = read_node_logs(rawdir, sw.name, SWITCH_LOGS)
        raw.stats[sw.name] = read_stats(rawdir.stats(sw.name))
    for h in exp.fabric.hosts():
        raw.host[h.name] = read_node_logs(rawdir, h.name, HOST_LOGS)
    return raw


def read_node_logs(run_dir: str | Path | RawDir, node: str, kinds,
                   as_columns: Collection[str] = ()) -> dict[str, list[dict] | dict[str, list]]:
    """One switch's or host's raw logs (``kinds``: SWITCH_LOGS or HOST_LOGS):
    a node at a time, for a reader that converts and lets go of each. The
    kinds in ``as_columns`` as ``read_raw_columns`` gives them, the others as rows."""
    rawdir = run_dir if isinstance(run_dir, RawDir) else RawDir(run_dir)
    return {k: (read_raw_columns if k in as_columns else read_raw_csv)(rawdir.log(node, k), k)
            for k in kinds}


# --------------------------------------------------------------- result CSVs

def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}" if abs(v) < 1e15 else str(int(v))
    return str(v)


def _fmt_time(v: float) -> str:
    """Fabric ns with 0.1 ns resolution (dilated clocks tick finer than 1 fabric ns)."""
    r = round(v, 1)
    return str(int(r)) if r == int(r) else f"{r:.1f}"


# Rows formatted a chunk at a time, a column at a time: a call per cell was
# most of a 32-host all-to-all's CSV writing (250k rows).
WRITE_CHUNK_ROWS = 65536


def _fmt_column(values: list | tuple, fmt: Callable) -> list | tuple:
    """One column's cells as ``fmt`` writes them; ints and texts (not
    ``time_ns``'s) go to the csv writer as they are (it writes str() of them)."""
    types = set(map(type, values))
    if fmt is _fmt:
        if types <= {int, str}:
            return values
        if types == {float}:
            return [f"{v:.6g}" if abs(v) < 1e15 else str(int(v)) for v in values]
    elif types == {float} and min(values) >= 0 and math.isfinite(sum(values)):
        # _fmt_time's text: .1f rounds as round(v, 1) does (correctly), an integral one
        # without its ".0" (no "-0": not negative, -0.0 + 0.0 is 0.0; no inf or nan:
        # round raises on them)
        return [t[:-2] if t[-2:] == ".0" else t for t in [f"{v + 0.0:.1f}" for v in values]]
    return list(map(fmt, values))


def write_csv(path: str | Path, columns: Iterable[str], rows: Iterable[Mapping | tuple]) -> Path:
    """A result CSV: header, then ``columns`` of each row (``time_ns`` to 0.1 ns,
    floats .6g); written whole or not at all (``emulator.atomic``). The rows:
    mappings, or tuples of their values in ``columns``' order."""
    path = Path(path)
    columns = tuple(columns)
    fmts = [_fmt_time if c == "time_ns" else _fmt for c in columns]
    with atomic_open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        it = iter(rows)
        while chunk := list(islice(it, WRITE_CHUNK_ROWS)):
            keys = range(len(columns)) if isinstance(chunk[0], tuple) else columns
            cells = [list(map(itemgetter(k), chunk)) for k in keys]
            w.writerows(zip(*(_fmt_column(col, f) for col, f in zip(cells, fmts))))
    return path


def read_result_csv(path: str | Path) -> list[dict]:
    """Rows of a result CSV written by ``write_csv``, numbers parsed; [] if missing."""
    try:
        with Path(path).open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError:
        return []
    return [{k: _number(v) for k, v in r.items() if v is not None} for r in rows]


def read_result_columns(path: str | Path, columns: tuple[str, ...],
                        where: Mapping[str, Collection[str]] | None = None):
    """Rows of a result CSV as tuples of ``columns`` (numbers parsed), one
    at a time: for files too big to hold as dicts (a 64-host all-to-all's
    flow_rate.csv has 2.4 M rows). Nothing if the file is missing.
    ``where``: {column: texts}, only the rows whose cell in each such column
    is one of its texts (as written: ``"7"``), tested before any number is
    parsed -- a few flows' rows of millions cost little more than reading them."""
    try:
        fh = Path(path).open(newline="")
    except OSError:
        return
    with fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            return
        idx = [header.index(c) for c in columns]
        selected = reader
        for c, texts in (where or {}).items():
            # the test of each row in C (compress, itemgetter): a Python test
            # per row was most of the time of a few flows' rows of millions
            rows, cells = tee(selected)
            selected = compress(rows, map(frozenset(texts).__contains__,
                                          map(itemgetter(header.index(c)), cells)))
        for row in selected:
            yield tuple(_number(row[i]) for i in idx)


TAIL_BYTES = 65536


def last_time_ns(path: str | Path) -> int | float | None:
    """``time_ns`` of a result CSV's last row: its latest, the rows being
    time-sorted as ``timeseries`` writes them (a 64-host all-to-all's
    flow_rate.csv has 2.4 M rows: its end, not all of it, is read); None if
    the file is missing or has no rows."""
    try:
        fh = Path(path).open("rb")
    except OSError:
        return None
    with fh:
        header = next(csv.reader([fh.readline().decode(errors="replace")]), [])
        if "time_ns" not in header:
            return None
        body = fh.tell()
        size = fh.seek(0, 2)
        fh.seek(max(body, size - TAIL_BYTES))
        tail = fh.read().decode(errors="replace").splitlines()
    # the first line of the tail may be cut; the last whole row is the latest
    rows = [r for r in csv.reader(tail[1:] if size - TAIL_BYTES > body else tail) if r]
    if not rows:
        return None
    return _number(rows[-1][header.index("time_ns")])


def _number(v: str) -> int | float | str:
    """An int, else a float, else the text (a digits test first: a raised
    ValueError per float cell was most of a 100k-row CSV's reading time)."""
    if (v[1:] if v[:1] in "+-" else v).isdigit():
        return int(v)
    try:
        return float(v)
    except ValueError:
        return v


__all__ = ["HOST_LOGS", "RAW_COLUMNS", "RawLogs", "SWITCH_LOGS", "last_time_ns", "read_node_logs", "read_raw_columns", "read_raw_csv", "read_raw_logs",
           "read_result_csv", "read_stats", "stats_by_port_priority", "write_csv"]
