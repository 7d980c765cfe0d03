"""A comparison's ``report.html``: its runs side by side (``fabric-emu compare``)."""
from __future__ import annotations

import html
from pathlib import Path

from emulator.report.build import verdict_rows
from emulator.report.dist_fig import fct_cdf, slowdown_figure
from emulator.report.fabric_fig import fabric_figure
from emulator.report.page import figure_html, files_html, kv_table, notes_html, section, write_page
from emulator.report.rundata import RunData
from emulator.rundir import RunDir

COMPARE_FRAMES = 30         # per run: each run's own report has the full slider


def write_compare_report(out_dir, runs: dict[str, str | Path]) -> Path:
    """``out_dir/report.html``: {label: run directory} side by side -- each
    run's verdict and animated fabric, their FCT CDFs and slowdowns together."""
    rd = RunDir.of(out_dir)
    data = {label: RunData.load(d) for label, d in runs.items()}
    notes: list[str] = []
    cells = []
    for i, (label, d) in enumerate(data.items()):
        fig, ff = fabric_figure(d, COMPARE_FRAMES)
        fig["layout"].update(height=520, showlegend=False)
        fig["layout"]["title"]["font"] = dict(size=12)
        good, verdict = verdict_rows(d.summary)
        link = html.escape(str(d.rd.report_html.relative_to(rd.path))
                           if d.rd.path.is_relative_to(rd.path) else str(d.rd.report_html))
        cells.append(f"<div><h3>{html.escape(label)} <span class=\"{'ok' if good else 'bad'}\">"
                     f"{'complete' if good else 'NOT complete'}</span></h3>"
                     f'<p><a href="{link}">its own report</a></p>'
                     + kv_table(verdict) + figure_html(fig, f"fabric{i}") + "</div>")
    notes.append(f"Each run's fabric has {COMPARE_FRAMES} slider instants here; its own report "
                 "has more.")
    together = [f for f in (fct_cdf(data, notes), slowdown_figure(data)) if f is not None]
    body = (f"<h1>Comparison: {html.escape(', '.join(data))}</h1>"
            + section("Runs side by side", f'<div class="grid">{"".join(cells)}</div>', "runs")
            + (section("FCT", "".join(figure_html(f, f"together{i}")
                                      for i, f in enumerate(together)), "fct") if together else "")
            + section("Decimation", notes_html(notes), "decimation")
            + section("Files", files_html(rd, rd.path), "files"))
    return write_page(rd, "comparison: fabric-emu report", body)


__all__ = ["write_compare_report"]
