"""Raw per-process logs of a run -> time series in fabric units (CSV).

The switches and host agents write raw logs into the run directory
(formats in ``docs/lossless.md``, "Raw logs"), stamped with the shared
``CLOCK_MONOTONIC`` of the dilated run. ``write_results`` converts them to
fabric time and units and writes one CSV per quantity into the results
directory::

    fabric time_ns = (t_ns - t0_ns) / D     (t0_ns: monotonic ns of the agents' common start)
    fabric rate    = dilated rate x D        (Gbps; bits per fabric ns)
    bytes, quanta, priorities, ports: unchanged

``queue_depth.csv``, ``flow_rate.csv``, ``dcqcn_rate.csv``, ``pfc_events.csv``,
``ecn_marks.csv``, ``cnp.csv``, ``drops.csv``, ``int_hops.csv``: their columns and
sources in ``docs/lossless.md``, "Result CSVs".
Every file is written, with its header, even when no log had rows for it.
Reading the raw logs (tolerant of partly written ones) and the CSV number
format are ``results_io``'s.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from emulator.experiment import pfcwd_results
from emulator.experiment.ideal_fct import flow_paths
from emulator.link_faults import DROP_EVENT, UNCLASSIFIED, class_name
from emulator.experiment.results_io import (HOST_LOGS, SWITCH_LOGS, RawLogs, read_node_logs,
                                            write_csv)
from emulator.rundir import RunDir

if TYPE_CHECKING:  # pragma: no cover
    from emulator.experiment.model import Experiment

RESULT_COLUMNS: dict[str, tuple[str, ...]] = {
    RunDir.QUEUE_DEPTH_CSV: ("time_ns", "node", "port", "priority", "depth_bytes"),
    RunDir.FLOW_RATE_CSV: ("time_ns", "flow_id", "src", "dst", "rate_gbps"),
    RunDir.DCQCN_RATE_CSV: ("time_ns", "host", "qpn", "flow_id", "rate_gbps", "alpha", "event"),
    RunDir.PFC_EVENTS_CSV: ("time_ns", "node", "port", "peer", "priority", "event", "quanta"),
    RunDir.ECN_MARKS_CSV: ("time_ns", "node", "port", "priority", "depth_bytes"),
    RunDir.CNP_CSV: ("time_ns", "host", "qpn", "flow_id", "direction"),
    RunDir.DROPS_CSV: ("time_ns", "node", "port", "priority", "bytes", "reason"),
    RunDir.INT_HOPS_CSV: ("time_ns", "host", "qpn", "flow_id", "hop", "node", "port",
                          "qlen_bytes", "tx_bytes", "ts_ns", "rate_gbps", "u", "window_bytes"),
}
PFC_EVENTS = ("pause_tx", "resume_tx", "pause_rx", "resume_rx")
# drops.csv's reason of a traffic manager's drop (a full queue or headroom);
# the others are the link faults' (emulator/link_faults.py: link_down,
# random_loss) and the receivers' checks of corrupted frames (fcs_error, icrc_error)
QUEUE_DROP = "queue"


def _drop_class(c: int) -> int | str:
    """drops.csv's priority of a drop: the class, "pfc" for a PFC frame, ""
    for a frame dropped before it was classified (a bad FCS or ICRC)."""
    return "" if c == UNCLASSIFIED else class_name(c)
# Window of the per-flow goodput in flow_rate.csv (fabric ns): ACKs come every
# few packets, so a rate over one sampling interval would be all steps.
RATE_WINDOW_NS = 20_000
RATE_WINDOW_ACKS = 4


def _rate_window_ns(samples: list[tuple[float, int]]) -> float:
    """RATE_WINDOW_NS, or RATE_WINDOW_ACKS median gaps between acked-bytes steps if longer."""
    steps = [t for (t, b), (_, b_prev) in zip(samples[1:], samples) if b != b_prev]
    gaps = sorted(b - a for a, b in zip(steps, steps[1:]))
    return max(RATE_WINDOW_NS, RATE_WINDOW_ACKS * gaps[len(gaps) // 2]) if gaps else RATE_WINDOW_NS


# ---------------------------------------------------------------- conversion

@dataclass
class Results:
    """A run's time series in fabric units: rows of the result CSVs, time-sorted."""

    queue_depth: list[dict] = field(default_factory=list)
    # tuples in flow_rate.csv's column order, not dicts: a 64-host all-to-all's
    # 2.4 M rows took ~0.8 GB as dicts
    flow_rate: list[tuple] = field(default_factory=list)
    dcqcn_rate: list[dict] = field(default_factory=list)
    pfc_events: list[dict] = field(default_factory=list)
    ecn_marks: list[dict] = field(default_factory=list)
    cnp: list[dict] = field(default_factory=list)
    drops: list[dict] = field(default_factory=list)
    int_hops: list[dict] = field(default_factory=list)
    pfcwd_events: list[dict] = field(default_factory=list)   # written with the watchdog on
    end_ns: float = 0.0       # the latest fabric time any log reached

    def tables(self) -> dict[str, list]:
        return {RunDir.QUEUE_DEPTH_CSV: self.queue_depth, RunDir.FLOW_RATE_CSV: self.flow_rate,
                RunDir.DCQCN_RATE_CSV: self.dcqcn_rate, RunDir.PFC_EVENTS_CSV: self.pfc_events,
                RunDir.ECN_MARKS_CSV: self.ecn_marks, RunDir.CNP_CSV: self.cnp,
                RunDir.DROPS_CSV: self.drops, RunDir.INT_HOPS_CSV: self.int_hops}


def _int_hop_row(paths, flows: dict, host: str, qp_flow: dict, r: dict, ft) -> dict:
    """One INT record a sender logged, with the switch port that wrote it:
    the ``hop``-th switch on the flow's path (``ideal_fct.flow_paths``)."""
    fid = qp_flow.get((host, r["qpn"]), "")
    node = port = ""
    flow = flows.get(fid)
    if flow is not None:
        path = paths.flow_path(flow)
        if 0 <= r["hop"] < len(path) - 1:
            node, port = path[r["hop"] + 1].node, path[r["hop"] + 1].port_no
    return {"time_ns": ft(r["t_ns"]), "host": host, "qpn": r["qpn"], "flow_id": fid,
            "hop": r["hop"], "node": node, "port": port, "qlen_bytes": r["qlen_bytes"],
            "tx_bytes": r["tx_bytes"], "ts_ns": r["ts_ns"], "rate_gbps": r["rate_mbps"] / 1000,
            "u": r["u"], "window_bytes": r["window_bytes"]}


def qp_flow_map(exp: "Experiment") -> dict[tuple[str, int], int]:
    """(host, local QPN) -> flow id, for both ends of every flow."""
    out: dict[tuple[str, int], int] = {}
    for f in exp.flows:
        out[(f.src, f.src_qpn)] = f.flow_id
        out.setdefault((f.dst, f.dst_qpn), f.flow_id)
    return out


def load_results(exp: "Experiment", run_dir: str | Path, t0_ns: int,
                 raw: RawLogs | None = None) -> Results:
    """Read the run directory's raw logs and convert them to fabric units."""
    d = float(exp.dilation)
    res = Results()
    end = 0.0

    def ft(t_ns: int) -> float:
        nonlocal end
        x = (t_ns - t0_ns) / d
        if x > end:
            end = x
        return x

    def many(ts: list[int]) -> list[float]:      # ft of each: a host's 10^5 samples
        nonlocal end
        xs = [(t - t0_ns) / d for t in ts]
        end = max(end, max(xs, default=end))
        return xs
    ft.many = many

    # a node's raw logs at a time (unless given whole): read, converted, let go
    for sw in exp.fabric.switches():
        logs = raw.switch[sw.name] if raw is not None else read_node_logs(run_dir, sw.name, SWITCH_LOGS)
        _switch_rows(res, exp.fabric, sw.name, logs, ft, exp.spec.switch.pfc_watchdog.action)
    qp_flow = qp_flow_map(exp)
    flows = {f.flow_id: f for f in exp.flows}
    paths = None
    for h in exp.fabric.hosts():
        host = h.name
        logs = (raw.host[host] if raw is not None
                else read_node_logs(run_dir, host, HOST_LOGS, as_columns=("flows",)))
        port = exp.fabric.ports(host)[0]
        for r in logs["pfc"]:
            q = r["quanta"]
            res.pfc_events.append({"time_ns": ft(r["t_ns"]), "node": host, "port": port.port_no,
                                   "peer": port.peer, "priority": r["priority"],
                                   "event": "pause_rx" if q > 0 else "resume_rx", "quanta": q})
        for r in logs["qp"]:
            res.dcqcn_rate.append({"time_ns": ft(r["t_ns"]), "host": host, "qpn": r["qpn"],
                                   "flow_id": qp_flow.get((host, r["qpn"]), ""),
                                   "rate_gbps": r["rate_bps"] * d / 1e9, "alpha": r["alpha"],
                                   "event": r["event"]})
        if logs["int"] and paths is None:
            paths = flow_paths(exp)
        for r in logs["int"]:
            res.int_hops.append(_int_hop_row(paths, flows, host, qp_flow, r, ft))
        for r in logs["cnp"]:
            res.cnp.append({"time_ns": ft(r["t_ns"]), "host": host, "qpn": r["local_qpn"],
                            "flow_id": qp_flow.get((host, r["local_qpn"]), ""),
                            "direction": r["direction"]})
        for r in logs["drops"]:
            res.drops.append({"time_ns": ft(r["t_ns"]), "node": host, "port": port.port_no,
                              "priority": _drop_class(r["priority"]), "bytes": r["bytes"],
                              "reason": r["reason"]})
        _flow_rate_rows(res, flows, host, logs["flows"], ft)
    for rows in (*res.tables().values(), res.pfcwd_events):
        if rows is not res.flow_rate:
            rows.sort(key=_sort_key)
    res.flow_rate.sort(key=itemgetter(0, 1))      # _sort_key's order: time, then flow
    res.end_ns = end
    return res


def _switch_rows(res: Results, fabric, sw: str, logs: dict, ft, wd_action: str) -> None:
    """A switch's queue depth samples and port events (PFC, ECN marks, drops) into ``res``."""
    def peer_of(node: str, port: int) -> str:
        try:
            return fabric.port(node, port).peer
        except KeyError:
            return ""

    for r in logs["qdepth"]:
        res.queue_depth.append({"time_ns": ft(r["t_ns"]), "node": sw, "port": r["port"],
                                "priority": r["priority"], "depth_bytes": r["depth_bytes"]})
    for r in logs["events"]:
        ev, t = r["event"], ft(r["t_ns"])
        base = {"time_ns": t, "node": sw, "port": r["port"]}
        if ev in PFC_EVENTS:
            res.pfc_events.append({**base, "peer": peer_of(sw, r["port"]),
                                   "priority": r["priority"], "event": ev,
                                   "quanta": int(r["value"]) if ev.startswith("pause") else 0})
        elif ev == "ecn_mark":
            res.ecn_marks.append({**base, "priority": r["priority"],
                                  "depth_bytes": int(r["value"])})
        elif ev == "drop":
            res.drops.append({**base, "priority": r["priority"], "bytes": int(r["value"]),
                              "reason": QUEUE_DROP})
        elif ev.startswith(DROP_EVENT):
            res.drops.append({**base, "priority": _drop_class(r["priority"]),
                              "bytes": int(r["value"]), "reason": ev[len(DROP_EVENT):]})
        elif ev in pfcwd_results.EVENTS:
            res.pfcwd_events.append(pfcwd_results.event_row(sw, peer_of(sw, r["port"]), r, t,
                                                            wd_action))


def _flow_rate_rows(res: Results, flows: dict, host: str, acked: list | dict, ft) -> None:
    """Each flow's rate over time, from a host's (time, acked bytes) samples
    (its flows log: rows, or columns as ``read_raw_columns`` gives them), into
    ``res`` (columns, no call per sample: a 32-host all-to-all has 233k)."""
    if isinstance(acked, list):         # rows (``RawLogs``), not columns
        acked = {k: [r[k] for r in acked] for k in ("t_ns", "flow_id", "acked_bytes")}
    by_flow: dict[int, list[tuple[float, int]]] = {}
    for fid, sample in zip(acked["flow_id"], zip(ft.many(acked["t_ns"]), acked["acked_bytes"])):
        if fid in by_flow:
            by_flow[fid].append(sample)
        else:
            by_flow[fid] = [sample]
    out = res.flow_rate.append
    for fid, samples in by_flow.items():
        samples.sort()
        f = flows.get(fid)
        src, dst = (f.src, f.dst) if f else (host, "")
        # ACKs come every few packets, so acked bytes grow in steps: the
        # rate at each sample is taken over a trailing window of at least
        # RATE_WINDOW_NS and at least RATE_WINDOW_ACKS typical ACK gaps
        # (a slow flow's ACKs are far apart).
        window = _rate_window_ns(samples)
        ts = [t for t, _ in samples]
        acked_bytes = [b for _, b in samples]
        j = 0
        for i in range(1, len(ts)):
            t_b = ts[i]
            while j < i - 1 and t_b - ts[j + 1] >= window:
                j += 1
            t_a = ts[j]
            if t_b <= t_a:
                continue
            out((t_b, fid, src, dst, max(0, acked_bytes[i] - acked_bytes[j]) * 8 / (t_b - t_a)))


def _sort_key(row: dict):
    return (row["time_ns"], str(row.get("node", row.get("host", ""))),
            row.get("port", row.get("qpn", 0)), row.get("flow_id", 0) if row.get("flow_id") != ""
            else -1, str(row.get("priority", 0)))     # drops.csv's may be "pfc" or ""


# ------------------------------------------------------------------- writing

def write_results(exp: "Experiment", run_dir: str | Path, out_dir: "str | Path | RunDir",
                  t0_ns: int, *, results: Results | None = None,
                  on_written: Callable[[str], None] | None = None) -> dict[str, Path]:
    """Write the CSV time series of a run (see the module docstring) into ``out_dir``.

    ``t0_ns``: ``time.monotonic_ns()`` value of the agents' common start (the
    origin of fabric time). ``results``: the raw logs already converted
    (``load_results``); read from ``run_dir`` if not given. ``on_written``:
    called with each file's name once it is written (the plotter draws what
    it completes). Returns {file name: path}.
    """
    rd = RunDir.of(out_dir)
    rd.path.mkdir(parents=True, exist_ok=True)
    res = results if results is not None else load_results(exp, run_dir, t0_ns)
    files = {}
    for name, rows in res.tables().items():
        files[name] = write_csv(rd.file(name), RESULT_COLUMNS[name], rows)
        if on_written is not None:
            on_written(name)
    if exp.spec.switch.pfc_watchdog.enabled:
        files[rd.PFCWD_EVENTS_CSV] = write_csv(rd.file(rd.PFCWD_EVENTS_CSV), pfcwd_results.COLUMNS,
                                               res.pfcwd_events)
    return files


def monotonic_t0_from_unix(start_at_unix_ns: int) -> int:
    """The ``time.monotonic_ns()`` value of a wall-clock (``time.time_ns``) instant.

    The agents start together at ``start_at_unix_ns`` (what
    ``AgentGroup.start`` returns); raw logs stamp ``time.monotonic_ns()``.
    Call this in the runner's process, close to the start (the two clocks
    drift only under NTP slewing).
    """
    return time.monotonic_ns() + (int(start_at_unix_ns) - time.time_ns())


__all__ = ["PFC_EVENTS", "RESULT_COLUMNS", "Results", "load_results", "monotonic_t0_from_unix",
           "qp_flow_map", "write_results"]
