"""A run's results in the formats of the HPCC ns-3 RDMA simulator, and ideal FCTs.

The HPCC simulator (alibaba-edu/High-Precision-Congestion-Control,
``simulation/scratch/third.cc``) writes three result files; ``write_hpcc``
writes ours in the same layouts, so that HPCC's analysis scripts (e.g.
``analysis/fct_analysis.py``, which reads fct.txt with awk: ``$4`` dport,
``$5`` size, ``$6`` start, ``$7`` fct, ``$8`` standalone fct) read them.
Every time is fabric nanoseconds since the run's t0 (the agents' common
start), as integers; sizes are bytes.

Node ids (HPCC numbers its nodes 0..N-1 and tags each host 0 / switch 1):
the fabric's hosts first, in ``fabric.hosts()`` order (id 0..H-1), then its
switches in ``fabric.switches()`` order -- leaves then spines, i.e. device
id order -- (id H..H+S-1). ``node_ids(fabric)`` returns this map; it is
stable for a given topology file. Interface indices (HPCC's ``ifindex``:
device 0 is the loopback, NICs 1..) are the P4 port number on a switch
(ports are numbered from 1 in link order, as HPCC numbers devices) and 1 on
a host (its only NIC, our ``<host>-eth0``).

``fct.txt`` -- third.cc ``qp_finish``, ``"%08x %08x %u %u %lu %lu %lu %lu"``::

    sip dip sport dport size start_ns fct_ns standalone_fct_ns

  one line per *completed* flow, in completion order (as HPCC writes them
  when the QP completes). ``sip``/``dip``: the hosts' real IPv4 addresses as
  8 lower-case hex digits (10.0.1.2 -> ``0a000102``; HPCC's
  ``ip_to_node_id`` does not apply, use ``node_ids``); ``sport``: the QP's
  UDP source port (49152 + QPN); ``dport``: 4791 (RoCEv2) unless
  ``write_hpcc(dport=...)`` says otherwise -- fct_analysis.py's ``-t 0``
  keeps only ``dport == 100`` (``-t 1``: 200), so pass ``dport=100`` to
  analyse with its defaults; ``size``: message bytes; ``start_ns``: the
  flow's scheduled start; ``fct_ns``: summary ``fct_ns`` (post to last ACK);
  ``standalone_fct_ns``: ``standalone_fct_ns()`` below.

``pfc.txt`` -- third.cc ``get_pfc``, ``"%lu %u %u %u %u"``::

    time_ns node_id node_type ifindex type

  one line per PFC frame *received* (HPCC traces ``QbbPfc`` in the receiving
  device: the node whose transmission is paused): switches' ``pause_rx`` /
  ``resume_rx`` events and hosts' ``pfc.csv`` rows; ``type`` 1 = pause
  (quanta > 0), 0 = resume (quanta 0); ``node_type`` 0 host, 1 switch.
  Sorted by time.

``qlen.txt`` -- third.cc ``monitor_buffer``: every ``qlen_interval_ns``
  (HPCC's QLEN_MON_INTERVAL, default 100 ns) the egress bytes of every switch
  port, summed over its 8 priority queues, are binned in 1 KB buckets
  (``bucket = bytes // 1000``, HPCC's ``qlen / 1000``); the cumulative
  histograms are dumped as::

      time: <t_ns>
      <node_id> <ifindex> <count of bucket 0> <count of bucket 1> ...

  one line per switch port (node id, then port, ascending), every
  ``qlen_dump_interval_ns`` (HPCC's fixed 100 ms; default here: one dump at
  the end of the run). The queue depth between samples is the last value
  the switch logged (``{sw}.qdepth.csv`` logs changes), 0 before any.

Two HPCC *input* files describe the same fabric and traffic, so the HPCC
simulator can rerun the experiment for comparison: ``topology.txt``
(``node_num switch_num link_num`` / switch ids / ``src dst <rate>Gbps
<delay>ms 0`` per link, in link order so the ifindex numbering matches) and
``flow.txt`` (``flow_num`` / ``src dst 3 <dport> <size> <start_s>``).

Standalone FCT (``standalone_fct_ns``): the flow alone on the fabric, on the
path its packets take (ECMP resolved with the pipeline's hash on the QP's
5-tuple, as the switches do), in fabric units (the topology's rates and
delays): its frames (RoCE headers, RETH on a WRITE's first packet, payload
padded to 4 bytes, ICRC, plus 24 bytes of preamble/FCS/IFG) sent back to
back at the first link's rate, stored and forwarded at every hop: the exact
completion time of the last frame through that tandem of links (serializing
all of them at the bottleneck plus every other hop's store-and-forward of
the first/last frame, plus every link's propagation delay), then the ACK of
the last packet back over the reverse path (its serialization at every hop
plus propagation). HPCC's is ``2 x propagation + one MTU per hop + all
bytes at the bottleneck``: the same idea, ours counts the ACK and the exact
frame sizes. The host agents' NIC emits each frame at the start of its
pacing slot (it models the host link's propagation but not its
serialization), so a measured FCT may come out a frame time or two below
this ideal: slowdowns can be marginally < 1 (fct_analysis.py clamps them
to 1).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from emulator.ethernet import WIRE_OVERHEAD_BYTES

if TYPE_CHECKING:  # pragma: no cover
    from emulator.experiment.model import Experiment, Flow
    from emulator.experiment.results import Results
    from emulator.topo import Fabric

ROCEV2_UDP_DPORT = 4791
IP_PROTO_UDP = 17
# Frame bytes as the NIC builds them (emulator/agents/nic.py): Ethernet 14 +
# IPv4 20 + UDP 8 + BTH 12, RETH 16 on a WRITE's first/only packet, payload
# padded to 4 bytes, ICRC 4; an ACK adds AETH 4 and the ICRC.
ROCE_HDR_BYTES = 14 + 20 + 8 + 12
RETH_BYTES = 16
ICRC_BYTES = 4
ACK_FRAME_BYTES = ROCE_HDR_BYTES + 4 + ICRC_BYTES
QLEN_BUCKET_BYTES = 1000       # HPCC: kb = qlen / 1000
MAX_QLEN_SAMPLES = 2_000_000   # per port; a longer run is sampled more coarsely

HPCC_FILES = ("fct.txt", "pfc.txt", "qlen.txt", "topology.txt", "flow.txt")


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


# --------------------------------------------------------------------- paths

@dataclass(frozen=True)
class Hop:
    """One link a packet crosses: leaving ``node`` by ``port_no`` toward ``peer``."""

    node: str
    port_no: int
    peer: str
    rate_bps: int       # fabric (undilated) rate
    delay_ns: int       # fabric propagation delay


class FabricPaths:
    """The path a 5-tuple takes through the fabric, as the switches route it."""

    def __init__(self, fabric: "Fabric"):
        from emulator.topo import compute_routes
        self.fabric = fabric
        self.routes = compute_routes(fabric)

    def path(self, src: str, dst: str, sport: int, dport: int = ROCEV2_UDP_DPORT) -> list[Hop]:
        """Hops from host ``src`` to host ``dst`` for UDP ``sport`` -> ``dport``."""
        from emulator.dataplane.pipeline import ecmp_hash
        from emulator.topo import longest_prefix_match

        fabric, plan = self.fabric, self.fabric.addresses
        sip, dip = plan.host_ip(src), plan.host_ip(dst)
        h = ecmp_hash(int(ipaddress.IPv4Address(sip)), int(ipaddress.IPv4Address(dip)),
                      IP_PROTO_UDP, sport, dport)
        hops = [self._hop(src, fabric.ports(src)[0].port_no)]
        for _ in range(4 * len(fabric.nodes)):
            cur = hops[-1].peer
            if cur == dst:
                return hops
            if not fabric.node(cur).is_switch:
                break
            route = longest_prefix_match(self.routes[cur], dip)
            if route is None:
                break
            # The controller installs an ECMP group's members in next-hop (port)
            # order, one each; the pipeline picks member hash % size.
            nh = route.next_hops[h % len(route.next_hops)] if route.is_ecmp else route.next_hops[0]
            hops.append(self._hop(cur, nh.port_no))
        raise ValueError(f"no route from {src} to {dst} in fabric {fabric.name}")

    def flow_path(self, flow: "Flow") -> list[Hop]:
        return self.path(flow.src, flow.dst, flow.udp_sport)

    def ack_path(self, flow: "Flow") -> list[Hop]:
        """The path of the flow's ACKs: from the responder's QP back to the requester."""
        from emulator.experiment.model import ROCE_SPORT_BASE
        return self.path(flow.dst, flow.src, ROCE_SPORT_BASE + (flow.dst_qpn & 0x3FFF))

    def _hop(self, node: str, port_no: int) -> Hop:
        port = self.fabric.port(node, port_no)
        link = self.fabric.links[port.link_index]
        return Hop(node, port_no, port.peer, link.rate_bps, link.delay_ns)


# ----------------------------------------------------------- standalone FCT

def frame_sizes(size_bytes: int, mtu_bytes: int, op: str = "write") -> tuple[int, int, int, int]:
    """(packets, first, middle, last) wire bytes of a message's frames.

    Wire bytes include the 24 bytes of preamble/FCS/IFG. With one packet,
    first == last is the only packet.
    """
    n = max(1, -(-size_bytes // mtu_bytes))
    reth = RETH_BYTES if op == "write" else 0

    def wire(payload: int, first: bool) -> int:
        return (ROCE_HDR_BYTES + (reth if first else 0) + payload + (-payload & 3)
                + ICRC_BYTES + WIRE_OVERHEAD_BYTES)

    last_payload = size_bytes - (n - 1) * mtu_bytes
    if n == 1:
        only = wire(size_bytes, True)
        return 1, only, only, only
    return n, wire(mtu_bytes, True), wire(mtu_bytes, False), wire(last_payload, False)


def tandem_completion_ns(n: int, first: int, middle: int, last: int,
                         rates_bps: list[int], delays_ns: list[int]) -> float:
    """When the last of n back-to-back frames has crossed a tandem of
    store-and-forward links (serialization at each link's rate, then its
    propagation delay), the first entering link 1 at time 0.

    Exact: the max-plus longest path through the (frame, link) grid. With the
    frames all equal but the first and the last, an optimal path switches
    links only at frames 1, 2, n-1 or n, so a dynamic program over those
    four frames per link suffices (O(links)).
    """
    if n < 1 or not rates_bps:
        return 0.0

    def prefix(p: int) -> int:        # bytes of frames 1..p
        if p <= 0:
            return 0
        if n == 1:
            return first
        return first + max(0, min(p, n - 1) - 1) * middle + (last if p >= n else 0)

    cand = sorted({p for p in (1, 2, n - 1, n) if 1 <= p <= n})
    best: dict[int, float] = {}
    for i, rate in enumerate(rates_bps):
        ns_per_byte = 8e9 / rate
        if i == 0:
            best = {p: ns_per_byte * prefix(p) for p in cand}
            continue
        best = {p: max(best[q] + ns_per_byte * (prefix(p) - prefix(q - 1))
                       for q in cand if q <= p)
                for p in cand}
    return best[n] + sum(delays_ns)


def standalone_fct_ns(exp: "Experiment", flow: "Flow", paths: FabricPaths | None = None) -> int:
    """The flow's ideal FCT alone on its path, fabric ns (see the module docstring)."""
    paths = paths or FabricPaths(exp.fabric)
    fwd = paths.flow_path(flow)
    back = paths.ack_path(flow)
    n, first, middle, last = frame_sizes(flow.size_bytes, exp.spec.nic.mtu_bytes, flow.op)
    data_ns = tandem_completion_ns(n, first, middle, last,
                                   [h.rate_bps for h in fwd], [h.delay_ns for h in fwd])
    ack = ACK_FRAME_BYTES + WIRE_OVERHEAD_BYTES
    ack_ns = sum(ack * 8e9 / h.rate_bps + h.delay_ns for h in back)
    return int(round(data_ns + ack_ns))


def standalone_fcts(exp: "Experiment") -> dict[int, int]:
    """flow_id -> standalone FCT (fabric ns) of every flow of the experiment."""
    paths = FabricPaths(exp.fabric)
    return {f.flow_id: standalone_fct_ns(exp, f, paths) for f in exp.flows}


# -------------------------------------------------------------------- writers

def write_hpcc(exp: "Experiment", run_dir: str | Path, out_dir: str | Path, t0_ns: int,
               summary: Mapping | None = None, *, results: "Results | None" = None,
               dport: int = ROCEV2_UDP_DPORT, qlen_interval_ns: float = 100,
               qlen_dump_interval_ns: float | None = None) -> dict[str, Path]:
    """Write fct.txt, pfc.txt, qlen.txt, topology.txt and flow.txt into ``out_dir``.

    ``results``: the raw logs already converted (``results.load_results``);
    read from ``run_dir`` with ``t0_ns`` if not given. ``summary``: the run's
    summary (flows' ``fct_ns``, ``complete``); without it fct.txt is empty.
    Returns {file name: path}.
    """
    from emulator.experiment.results import load_results

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    res = results if results is not None else load_results(exp, run_dir, t0_ns)
    fabric = exp.fabric
    ids = node_ids(fabric)
    written: dict[str, Path] = {}

    def put(name: str, lines: list[str]) -> None:
        path = out_dir / name
        path.write_text("".join(line + "\n" for line in lines))
        written[name] = path

    put("fct.txt", fct_lines(exp, summary, dport=dport))
    put("pfc.txt", pfc_lines(fabric, res.pfc_events))
    end_ns = max(res.end_ns, _summary_end_ns(summary))
    put("qlen.txt", qlen_lines(fabric, res.queue_depth, end_ns, qlen_interval_ns,
                               qlen_dump_interval_ns))
    put("topology.txt", topology_lines(fabric))
    put("flow.txt", flow_lines(exp, ids, dport=dport))
    return written


def _summary_end_ns(summary: Mapping | None) -> float:
    end = 0.0
    for f in (summary or {}).get("flows", []):
        if f.get("fct_ns") is not None:
            end = max(end, f.get("start_ns", 0) + f["fct_ns"])
    return end


def fct_lines(exp: "Experiment", summary: Mapping | None, *, dport: int = ROCEV2_UDP_DPORT,
              standalone: Mapping[int, int] | None = None) -> list[str]:
    plan = exp.fabric.addresses
    by_id = {f.flow_id: f for f in exp.flows}
    done = []
    for s in (summary or {}).get("flows", []):
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
            paths = FabricPaths(exp.fabric)
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
    import numpy as np

    ids = node_ids(fabric)
    if interval_ns <= 0:
        raise ValueError("qlen interval must be > 0")
    end_ns = max(0.0, float(end_ns))
    if end_ns / interval_ns > MAX_QLEN_SAMPLES:
        interval_ns = end_ns / MAX_QLEN_SAMPLES
    samples = np.arange(0.0, end_ns + interval_ns / 2, interval_ns)
    series: dict[tuple[str, int], dict[int, list[tuple[float, int]]]] = {}
    for r in queue_depth:
        series.setdefault((r["node"], r["port"]), {}).setdefault(r["priority"], []).append(
            (r["time_ns"], r["depth_bytes"]))
    buckets: dict[tuple[int, int], np.ndarray] = {}
    for sw in fabric.switches():
        for p in fabric.ports(sw):
            total = np.zeros(len(samples), dtype=np.int64)
            for rows in series.get((sw.name, p.port_no), {}).values():
                rows.sort(key=lambda x: x[0])
                t = np.array([x[0] for x in rows], dtype=float)
                d = np.array([x[1] for x in rows], dtype=np.int64)
                idx = np.searchsorted(t, samples, side="right") - 1
                total += np.where(idx >= 0, d[np.maximum(idx, 0)], 0)
            buckets[(ids[sw.name], hpcc_ifindex(fabric, sw.name, p.port_no))] = \
                np.maximum(total, 0) // QLEN_BUCKET_BYTES
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
    from emulator.experiment.summary import flow_priority
    ids = ids or node_ids(exp.fabric)
    pg = flow_priority(exp) if priority is None else priority
    flows = sorted(exp.flows, key=lambda f: (f.start_fabric_ns, f.flow_id))
    return [str(len(flows))] + [
        f"{ids[f.src]} {ids[f.dst]} {pg} {dport} {f.size_bytes} {f.start_fabric_ns / 1e9:.9f}"
        for f in flows]


__all__ = ["FabricPaths", "HPCC_FILES", "Hop", "ROCEV2_UDP_DPORT", "fct_lines", "flow_lines",
           "frame_sizes", "hpcc_ifindex", "ip_hex", "node_ids", "node_type", "pfc_lines",
           "qlen_lines", "standalone_fct_ns", "standalone_fcts", "tandem_completion_ns",
           "topology_lines", "write_hpcc"]
