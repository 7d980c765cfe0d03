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
    cols = RAW_COLUMNS[kind]
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        return []
    order = [name for name, _ in cols]
    first = [c.strip() for c in rows[0]]
    if first and first[0] and not _numeric(first[0]):      # a header line
        if all(name in first for name in order):
            index = {name: first.index(name) for name in order}
        else:
            index = {name: i for i, name in enumerate(order)}
        rows = rows[1:]
    else:
        index = {name: i for i, name in enumerate(order)}
    convert = [(name, index[name], _converter(kind_)) for name, kind_ in cols]
    out = []
    for r in rows:
        try:
            out.append({name: conv(r[i]) for name, i, conv in convert})
        except (IndexError, ValueError):
            continue    # a truncated or malformed line
    return out


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


def read_node_logs(run_dir: str | Path | RawDir, node: str, kinds) -> dict[str, list[dict]]:
    """One switch's or host's raw logs (``kinds``: SWITCH_LOGS or HOST_LOGS):
    a node at a time, for a reader that converts and lets go of each."""
    rawdir = run_dir if isinstance(run_dir, RawDir) else RawDir(run_dir)
    return {k: read_raw_csv(rawdir.log(node, k), k) for k in kinds}


# --------------------------------------------------------------- result CSVs

def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}" if abs(v) < 1e15 else str(int(v))
    return str(v)


def _fmt_time(v: float) -> str:
    """Fabric ns with 0.1 ns resolution (dilated clocks tick finer than 1 fabric ns)."""
    r = round(v, 1)
    return str(int(r)) if r == int(r) else f"{r:.1f}"


def write_csv(path: str | Path, columns: Iterable[str], rows: Iterable[Mapping | tuple]) -> Path:
    """A result CSV: header, then ``columns`` of each row (``time_ns`` to 0.1 ns,
    floats .6g); written whole or not at all (``emulator.atomic``)."""
    path = Path(path)
    columns = tuple(columns)
    with atomic_open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        fmts = [_fmt_time if c == "time_ns" else _fmt for c in columns]
        for r in rows:
            # a row: a mapping, or its values in ``columns``' order (a tuple)
            values = r if isinstance(r, tuple) else [r[c] for c in columns]
            w.writerow([f(v) for f, v in zip(fmts, values)])
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
        tests = [(header.index(c), frozenset(texts)) for c, texts in (where or {}).items()]
        for row in reader:
            for i, texts in tests:
                if row[i] not in texts:
                    break
            else:
                yield tuple(_number(row[i]) for i in idx)


def _number(v: str) -> int | float | str:
    """An int, else a float, else the text (a digits test first: a raised
    ValueError per float cell was most of a 100k-row CSV's reading time)."""
    if (v[1:] if v[:1] in "+-" else v).isdigit():
        return int(v)
    try:
        return float(v)
    except ValueError:
        return v


__all__ = ["HOST_LOGS", "RAW_COLUMNS", "RawLogs", "SWITCH_LOGS", "read_node_logs", "read_raw_csv", "read_raw_logs",
           "read_result_csv", "read_stats", "stats_by_port_priority", "write_csv"]
