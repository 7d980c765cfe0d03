"""The fabric as its topology draws it, animated over fabric time.

Tiers from bottom to top: hosts, leaves, spines, super spines, each spread
evenly, hosts under their leaf. Every link is a line coloured by its
utilisation over the run (the busier direction: bytes x 8 / (rate x span),
from ``summary.json``'s port counters). On top, three traces the slider and
play button animate (``series``):

* ``queues``: a marker at each switch egress port, a quarter of the way
  along its link, sized and coloured by the port's queued bytes (all
  priorities) at the instant; its ``customdata`` is [node, port, bytes];
* ``pfc``: a thick red segment over each link direction paused at the
  instant (the paused transmitter's end), hover: who paused it, since when,
  its total paused time;
* ``ecn``: an orange cross at each port that ECN-marked since the previous
  instant, sized by the count.
"""
from __future__ import annotations

from plotly.colors import sample_colorscale, sequential

from emulator.experiment.plots.congestion import pause_intervals
from emulator.report.rundata import RunData, tier
from emulator.report.series import Paused, counts_between, depth_at, frame_times, paused_at
from emulator.rundir import RunDir

UTIL_BANDS = (0.2, 0.4, 0.6, 0.8, 1.01)       # upper bounds of the link colour bands
TRACE_NAMES = ("queues", "pfc", "ecn")


def _colorscale(name: str) -> list[list]:
    """Plotly's sequential scale ``name`` as [[fraction, colour], ...], as graph_objects
    spell a named scale out (Plotly.js's own scale of the same name has other colours)."""
    colours = getattr(sequential, name)
    return [[i / (len(colours) - 1), c] for i, c in enumerate(colours)]


LINK_SCALE, QUEUE_SCALE = _colorscale("Viridis"), _colorscale("Reds")


def layout_positions(data: RunData) -> dict[str, tuple[float, float]]:
    """{node: (x, y)}: y the tier, x evenly spread; hosts in the order of their leaf."""
    fabric = data.fabric
    order = {n.name: i for i, n in enumerate(fabric.nodes)}

    def host_key(h):
        leaves = [p.peer for p in fabric.ports(h.name)]
        return (min((order.get(l, 0) for l in leaves), default=0), order[h.name])

    tiers: dict[int, list[str]] = {}
    for n in sorted(fabric.nodes, key=lambda n: host_key(n) if n.role == "host"
                    else (order[n.name],)):
        tiers.setdefault(tier(n.role), []).append(n.name)
    pos = {}
    for y, names in tiers.items():
        for i, name in enumerate(names):
            pos[name] = ((i + 0.5) / len(names), float(y))
    return pos


def link_utilisation(data: RunData) -> dict[int, tuple[float, str]]:
    """{link index: (utilisation 0..1, hover text)} from the switch ports' counters."""
    span_s = data.end_ns / 1e9
    by_port = {(p["node"], int(p["port"])): p for p in data.summary["ports"]}
    out = {}
    for i, link in enumerate(data.fabric.links):
        p = by_port.get((link.b, link.b_port))
        if p is None or link.rate_bps <= 0 or span_s <= 0:
            out[i] = (0.0, f"{link.a}–{link.b}: no counters")
            continue
        capacity = link.rate_bps * span_s / 8
        down, up = p["tx_bytes"] / capacity, p["rx_bytes"] / capacity
        out[i] = (max(up, down), f"{link.a}:{link.a_port} ↔ {link.b}:{link.b_port} "
                  f"{link.rate_bps / 1e9:g} Gbps<br>{link.a}→{link.b} {100 * up:.1f} %, "
                  f"{link.b}→{link.a} {100 * down:.1f} % of the run")
    return out


def _along(pos, a: str, b: str, f: float) -> tuple[float, float]:
    (xa, ya), (xb, yb) = pos[a], pos[b]
    return xa + (xb - xa) * f, ya + (yb - ya) * f


def _link_traces(data: RunData, pos) -> list[dict]:
    util = link_utilisation(data)
    # the scale as a list: by its name, plotly.colors imports its validators (~0.1 s)
    colours = sample_colorscale(LINK_SCALE, [b - 0.1 for b in UTIL_BANDS])
    traces = []
    for band, (hi, colour) in enumerate(zip(UTIL_BANDS, colours)):
        lo = UTIL_BANDS[band - 1] if band else 0.0
        xs, ys = [], []
        for i, link in enumerate(data.fabric.links):
            if lo <= util[i][0] < hi or (band == len(UTIL_BANDS) - 1 and util[i][0] >= hi):
                xs += [pos[link.a][0], pos[link.b][0], None]
                ys += [pos[link.a][1], pos[link.b][1], None]
        traces.append(dict(type="scatter", x=xs, y=ys, mode="lines", hoverinfo="skip",
                           line=dict(color=colour, width=2.5),
                           name=f"links {100 * lo:.0f}–{min(100, 100 * hi):.0f} % busy"))
    mids = [_along(pos, l.a, l.b, 0.5) for l in data.fabric.links]
    traces.append(dict(
        type="scatter", x=[m[0] for m in mids], y=[m[1] for m in mids], mode="markers",
        name="link utilisation",
        marker=dict(size=7, color=[100 * util[i][0] for i in range(len(mids))],
                    colorscale=LINK_SCALE, cmin=0, cmax=100, opacity=0.6,
                    colorbar=dict(title=dict(text="link busy %"), x=1.02, len=0.5, y=0.25)),
        hovertext=[util[i][1] for i in range(len(mids))], hoverinfo="text", showlegend=False))
    return traces


def _node_trace(data: RunData, pos) -> dict:
    nodes = data.fabric.nodes
    return dict(
        type="scatter", x=[pos[n.name][0] for n in nodes], y=[pos[n.name][1] for n in nodes],
        mode="markers+text", name="nodes", text=[n.name for n in nodes],
        textposition=["bottom center" if n.role == "host" else "top center" for n in nodes],
        customdata=[[n.name, n.role] for n in nodes],
        marker=dict(size=[12 if n.role == "host" else 20 for n in nodes],
                    symbol=["circle" if n.role == "host" else "square" for n in nodes],
                    color=["#4c78a8" if n.role == "host" else "#54a24b" for n in nodes],
                    line=dict(color="black", width=1)),
        hovertext=[f"{n.name} ({n.role})" for n in nodes], hoverinfo="text")


def _egress_ports(data: RunData) -> list[tuple[str, int, str]]:
    """(switch, port, peer) of every switch port, in the fabric's order."""
    return [(n.name, p.port_no, p.peer) for n in data.fabric.switches()
            for p in data.fabric.ports(n.name)]


class FabricFrames:
    """What each slider instant shows (``series``), read from the run's CSVs once."""

    def __init__(self, data: RunData, frames: int):
        self.times = [float(round(t)) for t in frame_times(data.end_ns, frames)]
        cols = ("time_ns", "node", "port", "priority", "depth_bytes")
        by_queue = depth_at(data.columns(RunDir.QUEUE_DEPTH_CSV, cols), self.times)
        self.depth: dict[tuple[str, int], list[int]] = {}
        self.by_priority: dict[tuple[str, int], dict[int, list[int]]] = {}
        for (node, port, prio), vals in by_queue.items():
            tot = self.depth.setdefault((node, port), [0] * len(self.times))
            for i, v in enumerate(vals):
                tot[i] += v
            self.by_priority.setdefault((node, port), {})[prio] = vals
        marks = ((t, (node, int(port))) for t, node, port in
                 data.columns(RunDir.ECN_MARKS_CSV, ("time_ns", "node", "port")))
        self.ecn = counts_between(marks, self.times)
        events = data.rows(RunDir.PFC_EVENTS_CSV)
        self.pauses = pause_intervals(events, data.fabric, data.end_ns)
        self.paused = paused_at(self.pauses, self.times)
        self.max_depth = max((max(v) for v in self.depth.values()), default=0)


def _queue_trace(ff: FabricFrames, ports, pos, i: int) -> dict:
    xs, ys, custom, size = [], [], [], []
    for node, port, peer in ports:
        x, y = _along(pos, node, peer, 0.25)
        depth = ff.depth.get((node, port), [0] * len(ff.times))[i]
        prios = ", ".join(f"prio {p}: {v[i]:,} B" for p, v in
                          sorted(ff.by_priority.get((node, port), {}).items()) if v[i])
        xs.append(x)
        ys.append(y)
        custom.append([node, port, depth, peer, prios])
        size.append(round(6 + 22 * (depth / ff.max_depth) ** 0.5, 1) if ff.max_depth else 6)
    return dict(type="scatter", x=xs, y=ys, mode="markers", name="queues", customdata=custom,
                hovertemplate="%{customdata[0]}:%{customdata[1]} → %{customdata[3]}<br>"
                              "queued %{customdata[2]:,} B %{customdata[4]}<extra></extra>",
                marker=dict(size=size, color=[c[2] for c in custom], colorscale=QUEUE_SCALE,
                            cmin=0, cmax=max(ff.max_depth, 1), line=dict(color="grey", width=0.5),
                            colorbar=dict(title=dict(text="queued B"), x=1.02, len=0.5, y=0.78)))


def _pfc_trace(ff: FabricFrames, pos, i: int) -> dict:
    xs, ys, hover = [], [], []
    for (node, port, peer, prio), p in sorted(ff.paused[i].items()):
        if node not in pos or peer not in pos:
            continue
        text = (f"{node}:{port} → {peer} prio {prio} PAUSED by {peer}<br>since "
                f"{p.since_ns / 1000:.2f} µs; paused {p.total_ns / 1000:.2f} µs in the run")
        a, b = pos[node], _along(pos, node, peer, 0.6)
        xs += [a[0], b[0], None]
        ys += [a[1], b[1], None]
        hover += [text, text, None]
    return dict(type="scatter", x=xs or [None], y=ys or [None], mode="lines+markers", name="pfc",
                line=dict(color="red", width=7), marker=dict(size=4, color="red"),
                hovertext=hover or [None], hoverinfo="text", opacity=0.75)


def _ecn_trace(ff: FabricFrames, ports, pos, i: int) -> dict:
    xs, ys, hover, size, custom = [], [], [], [], []
    for node, port, peer in ports:
        n = ff.ecn.get((node, port), [0] * len(ff.times))[i]
        if n:
            x, y = _along(pos, node, peer, 0.4)
            xs.append(x)
            ys.append(y)
            size.append(8 + min(20, 2 * n ** 0.5))
            hover.append(f"{node}:{port} → {peer}: {n} ECN marks since the previous instant")
            custom.append([node, port, n])
    return dict(type="scatter", x=xs or [None], y=ys or [None], mode="markers", name="ecn",
                customdata=custom or [None], hovertext=hover or [None], hoverinfo="text",
                marker=dict(symbol="x", color="orange", size=size or [0],
                            line=dict(color="darkorange", width=1)))


def _label(t_ns: float) -> str:
    return f"{t_ns / 1000:.1f}"


def fabric_figure(data: RunData, frames: int) -> tuple[dict, FabricFrames]:
    """The animated fabric (slider: ``frames`` instants) as Plotly figure JSON,
    and what its frames show."""
    pos = layout_positions(data)
    ports = _egress_ports(data)
    ff = FabricFrames(data, frames)
    static = [*_link_traces(data, pos), _node_trace(data, pos)]
    traces = list(range(len(static), len(static) + len(TRACE_NAMES)))

    def animated(i):
        return [_queue_trace(ff, ports, pos, i), _pfc_trace(ff, pos, i), _ecn_trace(ff, ports, pos, i)]

    names = [f"{t:.0f}" for t in ff.times]      # a frame's name: its instant in fabric ns
    frame_list = [dict(name=names[i], data=animated(i), traces=traces,
                       layout=dict(title=dict(text=_title(data, ff, i))))
                  for i in range(len(ff.times))]
    layout = dict(
        title=dict(text=_title(data, ff, 0), font=dict(size=15)), height=620,
        hovermode="closest", xaxis=dict(visible=False, range=[-0.03, 1.03]),
        yaxis=dict(visible=False, range=[-0.5, max(p[1] for p in pos.values()) + 0.5]),
        legend=dict(orientation="h", x=0, y=1.0, yanchor="bottom"),
        margin=dict(l=10, r=10, t=100, b=110), **_controls(ff.times, names))
    # the first frame's traces are the figure's own: one build serves both
    return dict(data=[*static, *frame_list[0]["data"]], layout=layout, frames=frame_list), ff


def _controls(times: list[float], names: list[str]) -> dict:
    """The slider (one step per frame) and the play / pause buttons."""
    step_args = dict(mode="immediate", frame=dict(duration=0, redraw=True),
                     transition=dict(duration=0))
    return dict(
        sliders=[dict(active=0, currentvalue=dict(prefix="fabric time (µs): "), x=0.16, len=0.84,
                      y=0, yanchor="top", pad=dict(t=20),
                      steps=[dict(method="animate", label=_label(t), args=[[n], step_args])
                             for t, n in zip(times, names)])],
        updatemenus=[dict(type="buttons", direction="left", x=0, y=0, xanchor="left",
                          yanchor="top", pad=dict(t=50),
                          buttons=[dict(label="▶ play", method="animate",
                                        args=[None, dict(step_args, frame=dict(duration=300,
                                                                               redraw=True),
                                                         fromcurrent=True)]),
                                   dict(label="❚❚ pause", method="animate",
                                        args=[[None], step_args])])])


def _title(data: RunData, ff: FabricFrames, i: int) -> str:
    queued = sum(v[i] for v in ff.depth.values())
    return (f"{data.fabric.name}: fabric time {ff.times[i] / 1000:.2f} µs<br>"
            f"{queued:,} B queued, {len(ff.paused[i])} link directions paused, "
            f"{sum(v[i] for v in ff.ecn.values())} ECN marks since the previous instant")


__all__ = ["FabricFrames", "TRACE_NAMES", "fabric_figure", "layout_positions", "link_utilisation"]
