"""A run's results in the formats of the HPCC ns-3 RDMA simulator.

The HPCC simulator (alibaba-edu/High-Precision-Congestion-Control,
``simulation/scratch/third.cc``) writes three result files; ``write_hpcc``
writes ours in the same layouts, so that HPCC's analysis scripts (e.g.
``analysis/fct_analysis.py``, which reads fct.txt with awk: ``$4`` dport,
``$5`` size, ``$6`` start, ``$7`` fct, ``$8`` standalone fct) read them.
Every time is fabric nanoseconds since the run's t0 (the agents' common
start), as integers; sizes are bytes. The input is a run's time series
(``timeseries.load_results``), its summary and the experiment: nothing
here reads a log.

Node ids, interface indices and the layouts of ``fct.txt``, ``pfc.txt``, ``qlen.txt``
and of the input files ``topology.txt`` and ``flow.txt``: ``docs/design-notes.md``,
"HPCC simulator formats".
"""
from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from emulator.atomic import atomic_write_text

from emulator.experiment.ideal_fct import (
    ROCEV2_UDP_DPORT,
    flow_paths,
    flow_priority,
    standalone_fct_ns,
)
from emulator.experiment.distributions import port_depths_at
from emulator.rundir import RunDir

if TYPE_CHECKING:  # pragma: no cover
    from emulator.experiment.model import Experiment
    from emulator.experiment.timeseries import Results
    from emulator.topo import Fabric

QLEN_BUCKET_BYTES = 1000       # HPCC: kb = qlen / 1000
MAX_QLEN_SAMPLES = 2_000_000   # per port; a longer run is sampled more coarsely



# ------------------------------------------------------------ node numbering

def node_ids(fabric: "Fabric") -> dict[str, int]:
    """HPCC node id of every node: hosts 0..H-1, then switches (leaves, spines)."""
    names = [h.name for h in fabric.hosts()] + [s.name for s in fabric.switches()]
    return {name: i for i, name in enumerate(names)}


def node_type(fabric: "Fabric", node: str) -> int:
    """HPCC's node type: 0 host, 1 switch."""
    return 1 if fabric.node(node).is_switch else 0


def hpcc_ifindex(fabric: "Fabric", node: str, port_no: int) -> int:
    """HPCC's device index of a port: the P4 port on a switch, 1 on a host."""
    return port_no if fabric.node(node).is_switch else 1


def ip_hex(ip: str) -> str:
    """``10.0.1.2`` -> ``0a000102`` (HPCC's ``%08x``)."""
    return f"{int(ipaddress.IPv4Address(ip)):08x}"


# -------------------------------------------------------------------- writers

def write_hpcc(exp: "Experiment", out_dir: "str | Path | RunDir", results: "Results",
               flows: Sequence[Mapping] = (), *, dport: int = ROCEV2_UDP_DPORT,
               qlen_interval_ns: float = 100,
               qlen_dump_interval_ns: float | None = None) -> dict[str, Path]:
    """Write fct.txt, pfc.txt, qlen.txt, topology.txt and flow.txt into ``out_dir``.

    ``results``: the run's time series (``timeseries.load_results``; only its
    ``pfc_events``, ``queue_depth`` and ``end_ns`` are read). ``flows``: the
    summary's (their ``fct_ns``, ``complete``); without them fct.txt is
    empty. Returns {file name: path}.
    """
    rd = RunDir.of(out_dir)
    rd.path.mkdir(parents=True, exist_ok=True)
    fabric = exp.fabric
    ids = node_ids(fabric)
    written: dict[str, Path] = {}

    def put(name: str, lines: list[str]) -> None:
        path = rd.file(name)
        atomic_write_text(path, "".join(line + "\n" for line in lines))
        written[name] = path

    put(rd.FCT_TXT, fct_lines(exp, flows, dport=dport))
    put(rd.PFC_TXT, pfc_lines(fabric, results.pfc_events))
    end_ns = max(results.end_ns, _flows_end_ns(flows))
    put(rd.QLEN_TXT, qlen_lines(fabric, results.queue_depth, end_ns, qlen_interval_ns,
                                qlen_dump_interval_ns))
    put(rd.TOPOLOGY_TXT, topology_lines(fabric))
    put(rd.FLOW_TXT, flow_lines(exp, ids, dport=dport))
    return written


def _flows_end_ns(flows: Sequence[Mapping]) -> float:
    end = 0.0
    for f in flows:
        if f.get("fct_ns") is not None:
            end = max(end, f.get("start_ns", 0) + f["fct_ns"])
    return end


def fct_lines(exp: "Experiment", flows: Sequence[Mapping], *, dport: int = ROCEV2_UDP_DPORT,
              standalone: Mapping[int, int] | None = None) -> list[str]:
    plan = exp.fabric.addresses
    by_id = {f.flow_id: f for f in exp.flows}
    done = []
    for s in flows:
        f = by_id.get(s.get("flow_id"))
        if f is None or not s.get("complete") or s.get("fct_ns") is None:
            continue
        done.append((s["start_ns"] + s["fct_ns"], f, s))
    if not done:
        return []
    if standalone is None:
        standalone = {f.flow_id: s["standalone_fct_ns"] for _, f, s in done
                      if s.get("standalone_fct_ns") is not None}
        missing = [f for _, f, _s in done if f.flow_id not in standalone]
        if missing:
            paths = flow_paths(exp)
            standalone = dict(standalone)
            standalone.update({f.flow_id: standalone_fct_ns(exp, f, paths) for f in missing})
    done.sort(key=lambda x: (x[0], x[1].flow_id))
    return [f"{ip_hex(plan.host_ip(f.src))} {ip_hex(plan.host_ip(f.dst))} {f.udp_sport} {dport} "
            f"{f.size_bytes} {int(s['start_ns'])} {int(s['fct_ns'])} {int(standalone[f.flow_id])}"
            for _, f, s in done]


def pfc_lines(fabric: "Fabric", pfc_events: list[dict]) -> list[str]:
    ids = node_ids(fabric)
    rows = []
    for e in pfc_events:
        if e["event"] not in ("pause_rx", "resume_rx"):
            continue
        typ = 1 if e["event"] == "pause_rx" else 0
        rows.append((int(round(e["time_ns"])), ids[e["node"]], node_type(fabric, e["node"]),
                     hpcc_ifindex(fabric, e["node"], e["port"]), typ))
    rows.sort()
    return [" ".join(map(str, r)) for r in rows]


def qlen_lines(fabric: "Fabric", queue_depth: list[dict], end_ns: float,
               interval_ns: float = 100, dump_interval_ns: float | None = None) -> list[str]:
    import numpy as np      # deferred: as in distributions.py, NumPy only where it is used

    ids = node_ids(fabric)
    if interval_ns <= 0:
        raise ValueError("qlen interval must be > 0")
    end_ns = max(0.0, float(end_ns))
    if end_ns / interval_ns > MAX_QLEN_SAMPLES:
        interval_ns = end_ns / MAX_QLEN_SAMPLES
    samples = np.arange(0.0, end_ns + interval_ns / 2, interval_ns)
    buckets: dict[tuple[int, int], np.ndarray] = {
        (ids[sw], hpcc_ifindex(fabric, sw, port)): depth // QLEN_BUCKET_BYTES
        for (sw, port), depth in port_depths_at(fabric, queue_depth, samples).items()}
    dumps = []
    if dump_interval_ns:
        k = 1
        while k * dump_interval_ns < end_ns:
            dumps.append(k * dump_interval_ns)
            k += 1
    dumps.append(end_ns)
    lines = []
    for t_dump in dumps:
        upto = int(np.searchsorted(samples, t_dump, side="right"))
        lines.append(f"time: {int(round(t_dump))}")
        for key in sorted(buckets):
            counts = np.bincount(buckets[key][:upto]) if upto else np.zeros(0, dtype=np.int64)
            lines.append(" ".join([f"{key[0]} {key[1]}", *map(str, counts.tolist())]))
    return lines


def _rate_str(rate_bps: int) -> str:
    return f"{rate_bps / 1e9:g}Gbps"


def _delay_str(delay_ns: int) -> str:
    return f"{delay_ns / 1e6:.9g}ms"


def topology_lines(fabric: "Fabric") -> list[str]:
    ids = node_ids(fabric)
    switches = [ids[s.name] for s in fabric.switches()]
    lines = [f"{len(ids)} {len(switches)} {len(fabric.links)}", " ".join(map(str, switches))]
    for l in fabric.links:
        lines.append(f"{ids[l.a]} {ids[l.b]} {_rate_str(l.rate_bps)} {_delay_str(l.delay_ns)} 0")
    return lines


def flow_lines(exp: "Experiment", ids: Mapping[str, int] | None = None, *,
               dport: int = ROCEV2_UDP_DPORT, priority: int | None = None) -> list[str]:
    ids = ids or node_ids(exp.fabric)
    pg = flow_priority(exp) if priority is None else priority
    flows = sorted(exp.flows, key=lambda f: (f.start_fabric_ns, f.flow_id))
    return [str(len(flows))] + [
        f"{ids[f.src]} {ids[f.dst]} {pg} {dport} {f.size_bytes} {f.start_fabric_ns / 1e9:.9f}"
        for f in flows]

__all__ = ["fct_lines", "flow_lines", "hpcc_ifindex", "ip_hex", "node_ids",
           "node_type", "pfc_lines", "qlen_lines", "topology_lines", "write_hpcc"]
