"""``report.html``: one self-contained page of a run, written atomically.

Plotly's JavaScript is inlined once at the top of the page (no CDN, no
server: the file opens offline from disk); each figure is a ``div`` and its
Plotly call. A figure is Plotly's figure JSON as plain dicts and lists
(``{"data": [{"type": "scatter", ...}], "layout": {...}, "frames": [...]}``),
serialised as it is: ``plotly.graph_objects`` would validate every property
of every frame's traces, most of a report's building time. The page's own
markup is plain HTML: headings, the verdict and timing tables, the
decimation notes, and the run directory's files as relative links.
"""
from __future__ import annotations

import html
import json
import pkgutil
from functools import cache
from pathlib import Path

from plotly import io as pio
from plotly.offline import get_plotlyjs

from emulator.atomic import atomic_write_text
from emulator.experiment.outdir import write_entry
from emulator.rundir import RunDir

STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1200px;color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;margin-top:1.6em}
table.kv{border-collapse:collapse}table.kv td,table.kv th{border:1px solid #ddd;padding:3px 8px;
text-align:left;font-size:0.92em}.ok{color:#1a7f37;font-weight:bold}.bad{color:#c62828;
font-weight:bold}.note{background:#fff8e1;padding:6px 10px;border-left:4px solid #f0b400}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:1em}"""


TEMPLATE = "plotly"      # the template graph_objects apply by default (plotly.io.templates)


@cache
def template() -> dict:
    """Plotly's ``TEMPLATE`` as its package ships it (what ``plotly.io.templates``
    loads, unvalidated too), read once per process."""
    return json.loads(pkgutil.get_data("plotly", f"package_data/templates/{TEMPLATE}.json"))


def figure_html(fig: dict, div_id: str) -> str:
    """A figure's ``div`` and its Plotly call (the library itself is in the page's head);
    ``fig`` is figure JSON, drawn in ``TEMPLATE`` unless its layout names one."""
    fig = dict(fig, layout={"template": template(), **fig.get("layout", {})})
    return pio.to_html(fig, validate=False, full_html=False, include_plotlyjs=False,
                       div_id=div_id, auto_play=False,
                       config=dict(displaylogo=False, responsive=True))


def kv_table(rows: list[tuple[str, object]]) -> str:
    return ('<table class="kv">' + "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in rows) + "</table>")


def section(title: str, body: str, anchor: str) -> str:
    return f'<section id="{anchor}"><h2>{html.escape(title)}</h2>{body}</section>'


def notes_html(notes: list[str]) -> str:
    if not notes:
        return "<p>Every series is drawn whole: nothing was decimated.</p>"
    return "".join(f'<p class="note">{html.escape(n)}</p>' for n in notes)


def files_html(rd: RunDir, base: Path) -> str:
    """Every entry of the run directory: name (a link relative to ``base``), size, what it is."""
    rows = []
    for p in sorted(rd.path.iterdir(), key=lambda p: (p.is_dir(), p.name)):
        if p.name.startswith("."):
            continue
        if p.is_dir():
            size = f"{sum(1 for _ in p.iterdir())} files"
        else:
            size = f"{p.stat().st_size:,} B"
        href = html.escape(str(p.relative_to(base)) + ("/" if p.is_dir() else ""))
        rows.append(f'<tr><td><a href="{href}">{html.escape(p.name)}</a></td><td>{size}</td>'
                    f"<td>{html.escape(describe(p.name))}</td></tr>")
    return (f"<p>In <code>{html.escape(str(rd.path.resolve()))}</code>:</p>"
            '<table class="kv"><tr><th>file</th><th>size</th><th>what</th></tr>'
            + "".join(rows) + "</table>")


_WHAT = {
    RunDir.SUMMARY: "the run's results (every key: docs/results.md)",
    RunDir.RAW: "configs, raw logs and raw results of the switches and agents",
    RunDir.REPORT_HTML: "this page", RunDir.QUEUE_DEPTH_CSV: "egress queue depth over time",
    RunDir.FLOW_RATE_CSV: "per-flow goodput over time", RunDir.DCQCN_RATE_CSV: "DCQCN rate changes",
    RunDir.PFC_EVENTS_CSV: "PFC pause/resume frames sent and received",
    RunDir.ECN_MARKS_CSV: "ECN marks", RunDir.CNP_CSV: "CNPs sent and received",
    RunDir.DROPS_CSV: "drops (queues, link faults)", RunDir.INT_HOPS_CSV: "HPCC's INT records",
    RunDir.FCT_SLOWDOWN_CSV: "FCT slowdown by flow-size bucket",
    RunDir.QUEUE_DEPTH_DIST_CSV: "queue-depth percentiles per port",
    RunDir.HOSTS_CSV: "per-host results (endpoints)",
    RunDir.PFCWD_EVENTS_CSV: "PFC watchdog: storms detected and restored",
    RunDir.COLLECTIVES_CSV: "collectives, nccl-tests' columns",
    RunDir.COLLECTIVES_TXT: "collectives, nccl-tests' text output",
    RunDir.COLLECTIVES_JSON: "collectives, nccl-tests' JSON", RunDir.TRAINING_JSON: "training steps",
    RunDir.CAPTURE: "all ports' captures in one pcapng", RunDir.PCAP_DIR: "per-port captures",
    RunDir.COMPARISON_CSV: "the comparison's table", RunDir.COMPARISON_JSON: "the comparison",
}


def describe(name: str) -> str:
    if name in _WHAT:
        return _WHAT[name]
    if name in RunDir.HPCC:
        return "HPCC's simulator format"
    if name.endswith(".png"):
        return "figure"
    if (Path(name).suffix == "" or name.startswith(RunDir.CALIBRATION)):
        return "a run directory inside this one"
    return ""


def write_page(rd: RunDir, title: str, body: str) -> Path:
    """``rd``'s report.html: Plotly inlined, then ``body``; written atomically
    and recorded as the run's (``outdir.write_entry``: one the run did not
    write is never overwritten)."""
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><style>{STYLE}</style>"
            f'<script type="text/javascript">{get_plotlyjs()}</script></head>'
            f"<body>{body}</body></html>")
    return write_entry(rd.path, rd.REPORT_HTML, lambda path: atomic_write_text(path, page))


__all__ = ["describe", "figure_html", "files_html", "kv_table", "notes_html", "section",
           "write_page"]
