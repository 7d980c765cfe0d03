"""Per-flow timelines: when each flow ran, and the rate of the slowest over time.

* ``flow_timeline``: one row per flow (``summary.json``'s flows) from its start
  to its completion (an incomplete flow's bar runs to the end of the run, in
  red); a triangle at the start, a dot at the completion, a red X on a flow
  that retransmitted or timed out (the hover gives the counts).
* ``rate_figure``: the goodput over time (``flow_rate.csv``) of the
  ``MAX_RATE_FLOWS`` flows with the longest FCT, and where the run logged them
  the congestion control's rate (DCQCN's, ``dcqcn_rate.csv``, as steps) and
  HPCC's window (``int_hops.csv``, right axis). Series past
  ``series.MAX_POINTS`` are decimated (the report states it).
"""
from __future__ import annotations

from plotly.colors import qualitative

from emulator.report.rundata import RunData
from emulator.report.series import MAX_POINTS, decimate
from emulator.rundir import RunDir

MAX_RATE_FLOWS = 8
MAX_MARKED_FLOWS = 400


def _flow_label(f: dict) -> str:
    return f"flow {f['flow_id']} {f['src']}→{f['dst']}"


def flow_timeline(data: RunData, notes: list[str]) -> dict | None:
    flows = sorted(data.summary.get("flows") or [], key=lambda f: (f.get("start_ns", 0),
                                                                   f["flow_id"]))
    if not flows:
        return None
    bars = {True: ([], [], []), False: ([], [], [])}     # x, y, hover by completion
    many = len(flows) > MAX_MARKED_FLOWS
    starts, ends, trouble = ([], [], []), ([], [], []), ([], [], [])
    for row, f in enumerate(flows):
        a_us = f.get("start_ns", 0) / 1000
        done = bool(f.get("complete")) and f.get("fct_ns") is not None
        b_us = (f.get("start_ns", 0) + f["fct_ns"]) / 1000 if done else data.end_ns / 1000
        text = (f"{_flow_label(f)} {f.get('bytes', 0):,} B<br>start {a_us:.2f} µs, "
                + (f"FCT {f['fct_ns'] / 1000:.2f} µs" if done else "did not complete")
                + (f", slowdown {f['fct_slowdown']:.2f}" if f.get("fct_slowdown") else "")
                + f"<br>retransmitted packets {f.get('retransmitted_packets', 0)}, "
                  f"timeouts {f.get('timeouts', 0)}")
        xs, ys, hs = bars[done]
        xs += [a_us, b_us, None]
        ys += [row, row, None]
        hs += [text, text, None]
        for (px, py, ph), x, t in ((starts, a_us, None), (ends, b_us, text)):
            px.append(x)
            py.append(row)
            ph.append(t)
        if f.get("retransmitted_packets") or f.get("timeouts"):
            trouble[0].append(b_us)
            trouble[1].append(row)
            trouble[2].append(text)
    traces = []
    for done, colour, name in ((True, "#4c78a8", "ran (complete)"), (False, "red", "incomplete")):
        xs, ys, hs = bars[done]
        if xs:
            # with markers, their hover; without (many flows), the bars' ends'
            traces.append(dict(type="scatter", x=xs, y=ys, mode="lines", name=name,
                               line=dict(color=colour, width=3),
                               **(dict(hovertext=hs, hoverinfo="text") if many
                                  else dict(hoverinfo="skip"))))
    if many:        # thousands of SVG markers take seconds to draw
        notes.append(f"Flow timeline: {len(flows)} flows; the start and completion markers "
                     f"are left out above {MAX_MARKED_FLOWS} flows (each bar still runs from "
                     "its start to its completion; hover either end for the flow).")
        starts = ends = ([], [], [])
    for (xs, ys, hs), name, marker in (
            (starts, "start", dict(symbol="triangle-right", color="green", size=7)),
            (ends, "completion", dict(symbol="circle", color="black", size=5)),
            (trouble, "retransmissions / timeouts", dict(symbol="x", color="red", size=11))):
        if xs:
            traces.append(dict(type="scatter", x=xs, y=ys, mode="markers", name=name,
                               marker=marker, **(dict(hovertext=hs, hoverinfo="text") if hs[0]
                                                 else dict(hoverinfo="skip"))))
    labelled = len(flows) <= 40
    return dict(data=traces, layout=dict(
        title=dict(text=f"Flows: start to completion ({len(flows)} flows)"),
        xaxis=dict(title=dict(text="fabric time (µs)")), height=min(900, 250 + 12 * len(flows)),
        hovermode="closest",
        yaxis=dict(title=dict(text="flow (by start)"), autorange="reversed",
                   showticklabels=labelled,
                   **(dict(tickvals=list(range(len(flows))),
                           ticktext=[_flow_label(f) for f in flows]) if labelled else {}))))


def slowest_flows(data: RunData, n: int = MAX_RATE_FLOWS) -> list[dict]:
    flows = data.summary.get("flows") or []
    return sorted(flows, key=lambda f: (-(f.get("fct_ns") or float("inf"))
                                        if f.get("complete") else -float("inf"),
                                        f["flow_id"]))[:n]


def _by_flow(rows, wanted: set, key: int = 1) -> dict:
    out: dict = {}
    for r in rows:
        if r[key] in wanted:
            out.setdefault(r[key], []).append(r)
    return out


def rate_figure(data: RunData, notes: list[str]) -> dict | None:
    """Rates over time of the slowest flows; a decimated series appends to ``notes``."""
    shown = slowest_flows(data)
    if not shown:
        return None
    wanted = {f["flow_id"] for f in shown}
    only = {"flow_id": {str(fid) for fid in wanted}}      # the CSVs' text of those ids

    def of_shown(name, columns):
        return data.columns(name, ("time_ns", "flow_id", *columns), where=only)

    goodput = _by_flow(of_shown(RunDir.FLOW_RATE_CSV, ("rate_gbps",)), wanted)
    cc = _by_flow(of_shown(RunDir.DCQCN_RATE_CSV, ("rate_gbps", "host")), wanted)
    window = _by_flow((r for r in of_shown(RunDir.INT_HOPS_CSV, ("window_bytes", "hop"))
                       if r[3] == 0), wanted)
    src = {f["flow_id"]: f["src"] for f in shown}
    traces = []
    worst = 1
    for f, colour in zip(shown, qualitative.Plotly * 4):
        fid, label = f["flow_id"], _flow_label(f)
        series = (
            ("goodput", goodput.get(fid, []), dict(color=colour, width=2), "y", "linear"),
            ("CC rate", [r for r in cc.get(fid, []) if r[3] == src[fid]],
             dict(color=colour, width=1, dash="dot"), "y", "hv"),
            ("HPCC window", window.get(fid, []), dict(color=colour, width=1, dash="dash"), "y2",
             "hv"))
        for what, rows, line, axis, shape in series:
            if not rows:
                continue
            ts, ys, k = decimate([r[0] / 1000 for r in rows],
                                 [r[2] / (1000 if axis == "y2" else 1) for r in rows])
            worst = max(worst, k)
            traces.append(dict(type="scatter", x=ts, y=ys, mode="lines", name=f"{label} {what}",
                               legendgroup=str(fid), line=dict(line, shape=shape), yaxis=axis))
    if worst > 1:
        notes.append(f"Flow rates: series of more than {MAX_POINTS} samples are drawn as the "
                     f"means of runs of consecutive samples (up to {worst} per point).")
    return dict(data=traces, layout=dict(
        title=dict(text=f"Rate over time of the {len(shown)} flows with the longest FCT "
                        "(solid: goodput; dotted: DCQCN rate; dashed: HPCC window, right axis)"),
        xaxis=dict(title=dict(text="fabric time (µs)")), yaxis=dict(title=dict(text="Gbps")),
        height=460, yaxis2=dict(title=dict(text="window (KB)"), overlaying="y", side="right",
                                showgrid=False)))


__all__ = ["MAX_RATE_FLOWS", "flow_timeline", "rate_figure", "slowest_flows"]
