"""A run's ``report.html`` from its run directory (``write_report``)."""
from __future__ import annotations

import html
import time
from pathlib import Path

from emulator.experiment.pfcwd_results import watchdog_totals
from emulator.experiment.summary_file import parse_summary
from emulator.report.dist_fig import collectives_figures, fct_cdf, queue_percentiles, slowdown_figure
from emulator.report.fabric_fig import fabric_figure
from emulator.report.flows_fig import flow_timeline, rate_figure
from emulator.report.page import figure_html, files_html, kv_table, notes_html, section, write_page
from emulator.report.rundata import RunData
from emulator.report.series import FRAMES
from emulator.report.telemetry_fig import telemetry_figures
from emulator.rundir import RunDir


def verdict_rows(s: dict) -> tuple[bool, list[tuple[str, object]]]:
    """(good, rows): whether the run is complete and kept up, and why."""
    flows = s.get("flows") or []
    done = sum(1 for f in flows if f.get("complete"))
    fid = s.get("fidelity") or {}
    good = bool(s.get("complete")) and not s.get("fell_behind")
    rows = [("complete", s.get("complete")), ("flows complete", f"{done} of {len(flows)}"),
            ("fell behind", s.get("fell_behind")),
            ("fidelity", f"rule {fid.get('rule')}, worst lateness ratio {fid.get('worst_ratio')}"
                         + (f"; behind: {', '.join(map(str, fid['behind']))}"
                            if fid.get("behind") else ""))]
    if s.get("aborted"):
        rows.append(("aborted", s["aborted"]))
    drops = sum(p.get("drops", 0) for p in s.get("ports") or [])
    rows.append(("switch drops", drops))
    wd = watchdog_totals(s)
    if wd is not None:
        rows.append(("PFC watchdog: storms detected / restored / frames dropped",
                     " / ".join(f"{n:,}" for n in wd)))
    coll = s.get("collectives")
    if coll is not None:
        rows.append(("collectives", "complete" if coll.get("complete") else
                     "failed: " + "; ".join(coll.get("errors") or ["incomplete"])))
    if s.get("isolation") is not None:
        rows.append(("tenants isolated", s["isolation"].get("isolated")))
    return good, rows


def timing_rows(s: dict) -> list[tuple[str, object]]:
    vt = s.get("virtual_time") or {}
    rows = [("time", s.get("time")), ("dilation", s.get("dilation")),
            ("dilation chosen by", s.get("dilation_chosen_by")),
            ("fabric time", f"{(s.get('fabric_ns') or 0) / 1000:,.2f} µs"),
            ("wall time", f"{s.get('wall_s')} s"), ("target", s.get("target")),
            ("link layer", s.get("link_layer"))]
    if vt:
        rows.append(("virtual time", f"{vt.get('windows')} windows of lookahead "
                                     f"{vt.get('lookahead_ns')} ns, {vt.get('members')} members"))
    if s.get("time") != "virtual":
        rows.append(("how", "dilated: every link runs D times slower in wall time; results "
                            "are converted back to fabric time"))
    else:
        rows.append(("how", "virtual: every process advances fabric time in conservative "
                            "windows; a rerun is bit-identical"))
    return rows


def watchdog_table(s: dict) -> str:
    """The PFC watchdog's storms, one row per event (summary.json's ``switches[].pfc_watchdog``)."""
    switches = [sw for sw in s.get("switches") or [] if sw.get("pfc_watchdog")]
    if not switches:
        return ""
    events = sorted((e["time_ns"], sw["node"], e) for sw in switches
                    for e in sw["pfc_watchdog"].get("events", []))
    rows = [(f"{t / 1000:,.3f} µs", f"{node} port {e['port']} (to {e['peer']}) priority "
                                    f"{e['priority']}: {e['event'].replace('_', ' ')} ({e['action']})")
            for t, node, e in events]
    return kv_table(rows or [("no storm", "no queue was held paused past detection")])


def extra_tables(s: dict) -> str:
    """Training and storage results, where the workload had them."""
    coll = s.get("collectives") or {}
    out = []
    if coll.get("training"):
        out.append(training_html(coll["training"]))
    if coll.get("storage"):
        st = coll["storage"]
        out.append("<h3>Storage</h3>" + kv_table([(k, v) for k, v in st.items()]))
    return "".join(out)


PHASE_COLOURS = {"compute": "#9e9e9e", "tp": "#1f77b4", "ep": "#9467bd", "pp": "#ff7f0e",
                 "dp": "#2ca02c"}


def training_html(t: dict) -> str:
    """The training loop's results; a parallelism-shaped step's as its phase
    breakdown: a bar of the mean step split by phase, and each phase's time and share."""
    if "phases" not in t:
        return "<h3>Training</h3>" + kv_table([(k, v) for k, v in t.items()])
    st = t["step_time_us"]
    bar = "".join(f'<div title="{p}: {v["time_us"]:.1f} µs" style="width:{100 * v["share"]:.2f}%;'
                  f'background:{PHASE_COLOURS.get(p, "#ccc")};height:1.4em;display:inline-block">'
                  "</div>" for p, v in t["phases"].items() if v["share"] > 0)
    rows = [("parallelism", ", ".join(f"{k} {v}" for k, v in t["parallelism"].items())),
            ("step time", f"{st['mean']:.1f} µs mean, {st['p50']:.1f} p50, {st['max']:.1f} max "
                          f"over {t['steps']} steps x {t['nranks']} ranks"),
            *((f"{p}", f"{v['time_us']:.1f} µs ({v['share']:.1%}; most in a rank's step "
                       f"{v['time_max_us']:.1f} µs)") for p, v in t["phases"].items()),
            ("#wrong", t["wrong"]), ("lost fraction", t["lost_fraction"])]
    return ("<h3>Training step by phase</h3><p>Each rank's step split into what it was doing: "
            "computing, or waiting on the tensor-parallel all-reduce (tp), the MoE all-to-all "
            "(ep), the pipeline's activations or gradients (pp, with the pipeline's bubble), the "
            "data-parallel reduction (dp: past the overlap, if any). docs/training.md.</p>"
            f'<div style="width:100%;white-space:nowrap">{bar}</div>'
            + kv_table(rows))


def run_sections(data: RunData, notes: list[str], frames: int, prefix: str = "") -> list[str]:
    """The figure sections of one run (``prefix``: unique div ids in a comparison)."""
    fig, ff = fabric_figure(data, frames)
    notes.append(f"Fabric: the slider shows {len(ff.times)} instants "
                 f"{ff.times[-1] / max(len(ff.times) - 1, 1) / 1000:.2f} µs apart; at each, every "
                 "queue's depth at that instant (its last sample at or before it) and the ECN "
                 "marks since the previous instant; queue_depth.csv has every sample.")
    out = [section("Fabric", "<p>Drag the slider or press play: queue depth (red dots at each "
                   "egress port), PFC pauses (thick red: the paused transmitter's end of the link;"
                   " hover for who paused it and for how long), ECN marks (orange crosses). "
                   "Link colour: utilisation over the whole run.</p>"
                   + figure_html(fig, f"{prefix}fabric"), f"{prefix}fabric-section")]
    tel = telemetry_figures(data, notes)
    if tel:
        out.append(section("Telemetry (gNMI)", "<p>What the gNMI collector sampled from the "
                           "switches (telemetry.csv; docs/telemetry.md): at exact fabric times, "
                           "every <code>telemetry.sample_us</code>.</p>"
                           + "".join(figure_html(f, f"{prefix}telemetry{i}")
                                     for i, f in enumerate(tel)), f"{prefix}telemetry"))
    flows = [(f, n) for f, n in ((flow_timeline(data, notes), "timeline"),
                                 (rate_figure(data, notes), "rates")) if f is not None]
    if flows:
        out.append(section("Flows", "".join(figure_html(f, f"{prefix}{n}") for f, n in flows),
                           f"{prefix}flows"))
    dists = [(f, n) for f, n in ((fct_cdf({data.summary.get('experiment', 'run'): data}, notes),
                                  "fct-cdf"),
                                 (slowdown_figure({"run": data}), "slowdown"),
                                 (queue_percentiles(data, notes), "queue-pct")) if f is not None]
    if dists:
        out.append(section("Distributions", "".join(figure_html(f, f"{prefix}{n}")
                                                    for f, n in dists), f"{prefix}dists"))
    wd = watchdog_table(data.summary)
    if wd:
        out.append(section("PFC watchdog", "<p>Storms the switches' PFC watchdog detected and "
                           "restored (fabric time; pfcwd_events.csv).</p>" + wd, f"{prefix}pfcwd"))
    coll = collectives_figures(data)
    extra = extra_tables(data.summary)
    if coll or extra:
        out.append(section("Workload", "".join(figure_html(f, f"{prefix}coll{i}")
                                               for i, f in enumerate(coll)) + extra,
                           f"{prefix}workload"))
    return out


# What summary.json gains after the results are written: how D was chosen
# (``experiment.dilation``). The figure sections never read it.
LATE_KEYS = ("dilation_chosen_by", "dilation_reruns", "dilation_calibration")
# run directory -> (its summary but LATE_KEYS, frames, sections, notes, seconds taken)
_prepared: dict[Path, tuple[dict, int, list[str], list[str], float]] = {}


def _early(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k not in LATE_KEYS}


def prepare_report(run_dir, summary_text: str, frames: int = FRAMES) -> None:
    """The figure sections of ``run_dir``'s report.html, built from its
    result files and the summary.json about to be written (``summary_text``)
    while the run's PNG figures are drawn (``results.while_figures_draw``):
    ``write_report`` takes them if the summary.json it reads then is this
    one (but ``LATE_KEYS``). On any failure nothing is kept, and
    ``write_report`` builds them itself (raising as it would have)."""
    t0 = time.monotonic()
    rd = RunDir.of(run_dir)
    key = rd.path.resolve()
    _prepared.pop(key, None)
    try:
        summary = _early(parse_summary(summary_text, rd.summary))
        notes: list[str] = []
        sections = run_sections(RunData.of_summary(rd, summary), notes, frames)
    except Exception:       # noqa: BLE001 -- write_report redoes it, where an error shows
        return
    _prepared[key] = (summary, frames, sections, notes, time.monotonic() - t0)


def _sections(data: RunData, frames: int) -> tuple[list[str], list[str], float]:
    """(figure sections, decimation notes, seconds taken before): those
    ``prepare_report`` built for this summary, else built now."""
    early = _early(data.summary)
    kept = _prepared.pop(data.rd.path.resolve(), None)
    if kept is not None and kept[0] == early and kept[1] == frames:
        return kept[2], kept[3], kept[4]
    notes: list[str] = []
    return run_sections(RunData(data.rd, early, data.fabric), notes, frames), notes, 0.0


def write_report(run_dir, frames: int = FRAMES) -> Path:
    """Build ``report.html`` in ``run_dir`` from its files; its path.
    ``rundata.NotARunDir`` (one line) if the directory holds no run."""
    t0 = time.monotonic()
    data = RunData.load(run_dir)
    s = data.summary
    figures, notes, before_s = _sections(data, frames)
    good, verdict = verdict_rows(s)
    name = str(s.get("experiment", data.rd.path.name))
    head = (f"<h1>{html.escape(name)} <span class=\"{'ok' if good else 'bad'}\">"
            f"{'complete' if good else 'NOT complete / fell behind'}</span></h1>"
            f"<p>{html.escape(str(s.get('source', '')))}: topology "
            f"{html.escape(str(s.get('topology', '')))}, {len(data.fabric.switches())} switches,"
            f" {len(data.fabric.hosts())} hosts, {len(s.get('flows') or [])} flows.</p>")
    body = (head + "".join(figures)
            + '<div class="grid">' + section("Verdict", kv_table(verdict), "verdict")
            + section("How the run was timed", kv_table(timing_rows(s)), "timing") + "</div>"
            + section("Decimation", notes_html(notes), "decimation")
            + section("Files of the run directory", files_html(data.rd, data.rd.path), "files")
            + f"<p><small>report built in {before_s + time.monotonic() - t0:.1f} s from the run "
              "directory's files (fabric-emu report DIR rebuilds it)</small></p>")
    return write_page(data.rd, f"{name}: fabric-emu report", body)


__all__ = ["LATE_KEYS", "prepare_report", "run_sections", "timing_rows", "verdict_rows",
           "write_report"]
