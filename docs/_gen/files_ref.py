"""The result files' reference, from ``emulator.rundir.RunDir`` (the one place
that names a run directory's entries), the CSV columns the writers use, and
the time series' descriptions in ``emulator.experiment.timeseries``."""
from __future__ import annotations

import inspect
import re


def _entries() -> list[tuple[str, str]]:
    """``(file name, what it is)`` in RunDir's order: a comment line names the
    group of names assigned after it, up to the tuple that gathers them."""
    from emulator.rundir import RunDir
    out, group, in_comment = [], "", False
    for line in inspect.getsource(RunDir).splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            text = stripped.lstrip("#").strip()
            group = f"{group} {text}" if in_comment else text
            in_comment = True
            continue
        in_comment = False
        m = re.match(r"\s{4}([A-Z_, ]+)=\s*(.*)$", line)
        if not m:
            continue
        value, _, trailing = m.group(2).partition("#")
        names = re.findall(r'"([^"]+)"', value)
        if not names:                   # a tuple of names: the group ends
            group = ""
            continue
        out += [(n, trailing.strip() or group) for n in names if "*" not in n]
    return out


def _timeseries_docs() -> dict[str, str]:
    import emulator.experiment.timeseries as ts
    docs, name = {}, None
    for line in (ts.__doc__ or "").splitlines():
        m = re.match(r"``([\w.]+\.csv)``", line)
        if m:
            name = m.group(1)
            docs[name] = ""
        elif name and line.startswith("    "):
            docs[name] += " " + line.strip()
        else:
            name = None
    return {k: v.strip() for k, v in docs.items()}


def _columns() -> dict[str, tuple[str, ...]]:
    from emulator.experiment.distributions import BUCKET_COLUMNS, QUEUE_COLUMNS
    from emulator.experiment.telemetry import HEADER as TELEMETRY_COLUMNS
    from emulator.experiment.timeseries import RESULT_COLUMNS
    from emulator.rundir import RunDir
    return {**RESULT_COLUMNS, RunDir.FCT_SLOWDOWN_CSV: BUCKET_COLUMNS,
            RunDir.QUEUE_DEPTH_DIST_CSV: QUEUE_COLUMNS, RunDir.TELEMETRY_CSV: TELEMETRY_COLUMNS}


def _plain(text: str) -> str:
    """Text outside code spans: ``<`` is no HTML tag, ``[...]`` no link."""
    return text.replace("<", "&lt;").replace("[", "\\[").replace("]", "\\]")


def _cell(text: str) -> str:
    text = " ".join(text.replace("``", "`").split()).replace("|", "\\|")
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else _plain(p) for p in parts)


def files_page() -> str:
    cols, series = _columns(), _timeseries_docs()
    out = ["# Result files", "",
           "Every entry a run directory may hold, generated from `emulator/rundir.py` "
           "(`RunDir`, the one place that names them), with the columns the CSV writers use, "
           "when the site is built. Times in files are fabric ns, rates fabric Gbit/s. "
           "What is written when, and how to read it: [Read a run's results](../how-to/results.md); "
           "`summary.json`'s keys: [summary.json](summary.md); the raw logs under `run/`: "
           "[lossless design](../lossless.md).", "",
           "| entry | what it is | columns |", "|---|---|---|"]
    for name, what in _entries():
        desc = series.get(name) or what
        columns = ", ".join(f"`{c}`" for c in cols.get(name, ()))
        shown = name.replace("{:g}", "<D>")
        out.append(f"| `{shown}` | {_cell(desc)} | {columns} |")
    return "\n".join(out) + "\n"
