"""How the experiment's RoCE flows cross the fabric, and their ideal FCT.

The model of a flow on the fabric that both summary.json and the HPCC files
need: the path its packets take (``FabricPaths``), the 802.1p priority they
carry (``flow_priority``), the frames of its message (``frame_sizes``), and
its standalone FCT (``standalone_fct_ns``), the reference of every FCT
slowdown.

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

import dataclasses
import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emulator.p4.ecmp import ecmp_hash
from emulator.topo import compute_routes, longest_prefix_match
from emulator.wire import (  # noqa: F401 (ROCEV2_UDP_DPORT re-exported for the HPCC writer)
    ACK_FRAME_BYTES, INT_MAX_HOPS, INT_UDP_DPORT, RETH_BYTES, ROCE_FRAMING, ROCEV2_UDP_DPORT,
    Framing, int_bytes, roce_sport,
)
from emulator.ib.sm import sweep
from emulator.experiment.workload_qps import workload_qps

if TYPE_CHECKING:  # pragma: no cover
    from emulator.experiment.model import Experiment, Flow
    from emulator.topo import Fabric

IP_PROTO_UDP = 17
# Frame bytes as the NIC builds them (emulator/wire.py): RoCE headers, RETH
# on a WRITE's first/only packet, payload padded to 4 bytes, ICRC; an ACK
# carries AETH and the ICRC.
ROCE_DATA_PRIORITY = 3        # docs/lossless.md: DSCP 26 -> priority 3 (lossless)


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

    def __init__(self, fabric: "Fabric", dport: int = ROCEV2_UDP_DPORT):
        """``dport``: the UDP destination port of the flows' packets (their
        ECMP hash): RoCEv2's, or ``int_md.INT_UDP_DPORT`` for QPs with INT."""
        self.fabric = fabric
        self.dport = dport
        self.int_hops_memo: tuple | None = None   # (experiment, int_max_hops of it)
        self._routes_memo: dict[tuple[str, str], object] = {}
        self._hops_memo: dict[tuple[str, int], Hop] = {}
        self._ip_memo: dict[str, int] = {}       # host -> its IP as an int (a workload: ~7,000 paths)
        if fabric.link_layer == "infiniband":      # the subnet manager's LFTs
            self.routes, self.subnet = None, sweep(fabric)
        else:
            self.routes, self.subnet = compute_routes(fabric), None

    def path(self, src: str, dst: str, sport: int, dport: int | None = None) -> list[Hop]:
        """Hops from host ``src`` to host ``dst`` for UDP ``sport`` -> ``dport``
        (None: the paths' own; on InfiniBand: on the LFTs to ``dst``'s LID,
        whatever the port)."""
        if dport is None:
            dport = self.dport
        if self.subnet is not None:
            return self._lft_path(src, dst)
        fabric, plan = self.fabric, self.fabric.addresses
        dip = plan.host_ip(dst)
        h = ecmp_hash(self._ip_int(src), self._ip_int(dst), IP_PROTO_UDP, sport, dport)
        hops = [self._hop(src, fabric.ports(src)[0].port_no)]
        for _ in range(4 * len(fabric.nodes)):
            cur = hops[-1].peer
            if cur == dst:
                return hops
            if not fabric.node(cur).is_switch:
                break
            route = self._route(cur, dip)
            if route is None:
                break
            # The controller installs an ECMP group's members in next-hop (port)
            # order, one each; the pipeline picks member hash % size.
            nh = route.next_hops[h % len(route.next_hops)] if route.is_ecmp else route.next_hops[0]
            hops.append(self._hop(cur, nh.port_no))
        raise ValueError(f"no route from {src} to {dst} in fabric {fabric.name}")

    def _ip_int(self, host: str) -> int:
        ip = self._ip_memo.get(host)
        if ip is None:
            ip = self._ip_memo[host] = int(ipaddress.IPv4Address(self.fabric.addresses.host_ip(host)))
        return ip

    def flow_path(self, flow: "Flow") -> list[Hop]:
        return self.path(flow.src, flow.dst, flow.udp_sport)

    def ack_path(self, flow: "Flow") -> list[Hop]:
        """The path of the flow's ACKs: from the responder's QP back to the requester."""
        return self.path(flow.dst, flow.src, roce_sport(flow.dst_qpn))

    def _lft_path(self, src: str, dst: str) -> list[Hop]:
        fabric, subnet = self.fabric, self.subnet
        dlid = subnet.lid[dst]
        hops = [self._hop(src, fabric.ports(src)[0].port_no)]
        while hops[-1].peer != dst:
            node = hops[-1].peer
            if len(hops) > len(fabric.nodes) or not fabric.node(node).is_switch:
                raise ValueError(f"no route from {src} to {dst} in fabric {fabric.name}")
            hops.append(self._hop(node, subnet.lft[node][dlid]))
        return hops

    def _route(self, switch: str, dip: str):
        """The switch's route to ``dip`` (an LPM over its routes), once per
        pair: every flow of an all-to-all asks each switch on its path."""
        key = (switch, dip)
        if key not in self._routes_memo:
            self._routes_memo[key] = longest_prefix_match(self.routes[switch], dip)
        return self._routes_memo[key]

    def _hop(self, node: str, port_no: int) -> Hop:
        key = (node, port_no)
        hop = self._hops_memo.get(key)
        if hop is None:
            port = self.fabric.port(node, port_no)
            link = self.fabric.links[port.link_index]
            hop = self._hops_memo[key] = Hop(node, port_no, port.peer, link.rate_bps, link.delay_ns)
        return hop


# ----------------------------------------------------------- standalone FCT

def link_framing(fabric: "Fabric", int_max_hops: int = 0) -> Framing:
    """The frames of a fabric's link layer (``wire.Framing``); with
    ``int_max_hops`` records of INT in every data frame and ACK (HPCC)."""
    if fabric.link_layer == "infiniband":
        # deferred: ib.headers defines Scapy layers, which the runner never imports
        from emulator.ib.headers import IB_FRAMING
        return IB_FRAMING
    if int_max_hops:
        return dataclasses.replace(ROCE_FRAMING,
                                   hdr_bytes=ROCE_FRAMING.hdr_bytes + int_bytes(int_max_hops))
    return ROCE_FRAMING


def uses_int(exp: "Experiment") -> bool:
    """Do the experiment's QPs carry INT (its congestion control is HPCC)?"""
    return getattr(exp.spec, "cc", "dcqcn") == "hpcc"


def qp_ends(exp: "Experiment") -> tuple:
    """Every requester QP of the run: the plain flows' and the workload's
    (``workload_qps``: its collectives and storage reads), each with
    ``src``, ``dst``, ``udp_sport`` and ``dst_qpn``."""
    return (*exp.flows, *workload_qps(exp))


def int_max_hops(exp: "Experiment", paths: "FabricPaths | None" = None) -> int:
    """The INT records an HPCC source reserves: the most switches a QP of
    the experiment (or its ACKs) crosses -- 0 when no QP carries INT."""
    if not uses_int(exp):
        return 0
    paths = paths or FabricPaths(exp.fabric, INT_UDP_DPORT)
    memo = paths.int_hops_memo                 # asked per flow (standalone_fct_ns): once per run
    if memo is not None and memo[0] is exp:
        return memo[1]
    most = max((len(p) - 1 for f in qp_ends(exp) for p in (paths.flow_path(f), paths.ack_path(f))),
               default=0)
    if most > INT_MAX_HOPS:
        raise ValueError(f"a path crosses {most} switches: INT holds {INT_MAX_HOPS} records")
    paths.int_hops_memo = (exp, most)
    return most


def base_rtt_ns(exp: "Experiment") -> int:
    """HPCC's T (its GLOBAL_T): the largest base RTT of a QP of the
    experiment (``qp_ends``), fabric ns -- an MTU frame out over every hop
    of its path (serialization and propagation), its ACK back over the
    ACK's path; INT bytes included when the QPs carry them."""
    dport = INT_UDP_DPORT if uses_int(exp) else ROCEV2_UDP_DPORT
    paths = FabricPaths(exp.fabric, dport)
    framing = link_framing(exp.fabric, int_max_hops(exp, paths) if dport == INT_UDP_DPORT else 0)
    data = framing.frame_bytes(RETH_BYTES, exp.spec.nic.mtu_bytes) + framing.wire_overhead_bytes
    ack = framing.ack_frame_bytes + framing.wire_overhead_bytes
    best = 0.0
    for f in qp_ends(exp):
        rtt = sum(data * 8e9 / h.rate_bps + h.delay_ns for h in paths.flow_path(f)) \
            + sum(ack * 8e9 / h.rate_bps + h.delay_ns for h in paths.ack_path(f))
        best = max(best, rtt)
    return int(round(best))


def frame_sizes(size_bytes: int, mtu_bytes: int, op: str = "write",
                framing: Framing = ROCE_FRAMING) -> tuple[int, int, int, int]:
    """(packets, first, middle, last) wire bytes of a message's frames.

    Wire bytes: on Ethernet with the 24 bytes of preamble/FCS/IFG, on
    InfiniBand the packet alone. With one packet, first == last is the
    only packet.
    """
    n = max(1, -(-size_bytes // mtu_bytes))
    reth = RETH_BYTES if op == "write" else 0

    def wire(payload: int, first: bool) -> int:
        return framing.frame_bytes(reth if first else 0, payload) + framing.wire_overhead_bytes

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
    paths = paths or flow_paths(exp)
    fwd = paths.flow_path(flow)
    back = paths.ack_path(flow)
    framing = link_framing(exp.fabric, int_max_hops(exp, paths))
    n, first, middle, last = frame_sizes(flow.size_bytes, exp.spec.nic.mtu_bytes, flow.op,
                                         framing)
    data_ns = tandem_completion_ns(n, first, middle, last,
                                   [h.rate_bps for h in fwd], [h.delay_ns for h in fwd])
    ack = framing.ack_frame_bytes + framing.wire_overhead_bytes
    ack_ns = sum(ack * 8e9 / h.rate_bps + h.delay_ns for h in back)
    return int(round(data_ns + ack_ns))


def standalone_fcts(exp: "Experiment") -> dict[int, int]:
    """flow_id -> standalone FCT (fabric ns) of every flow of the experiment."""
    paths = flow_paths(exp)
    return {f.flow_id: standalone_fct_ns(exp, f, paths) for f in exp.flows}


def flow_paths(exp: "Experiment") -> FabricPaths:
    """The paths of the experiment's flows (with INT, on INT's UDP port)."""
    return FabricPaths(exp.fabric, INT_UDP_DPORT if uses_int(exp) else ROCEV2_UDP_DPORT)


# ------------------------------------------------------------------ priority

def _get(obj, key):
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)


def flow_priority(exp: Experiment) -> int:
    """The 802.1p priority of the experiment's RoCE data (and ACK) packets.

    ``qos.roce_priority`` of the experiment (a DSCP-to-priority map applied
    to ``qos.roce_dscp`` is honoured too, should a QoS section carry one),
    else 3 (docs/lossless.md: DSCP 26 -> priority 3).
    """
    qos = _get(exp.spec, "qos")
    if qos is None:
        return ROCE_DATA_PRIORITY
    candidates = [_get(qos, "roce_priority")]
    dscp_map = _get(qos, "dscp_to_priority")
    if isinstance(dscp_map, dict):
        dscp = _get(qos, "roce_dscp")
        if dscp is None:
            dscp = _get(_get(exp.spec, "nic"), "dscp")
        candidates += [dscp_map.get(dscp), dscp_map.get(str(dscp))]
    for c in candidates:
        if isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 7:
            return c
    return ROCE_DATA_PRIORITY


__all__ = ["ACK_FRAME_BYTES", "FabricPaths", "Hop", "ROCE_DATA_PRIORITY", "ROCEV2_UDP_DPORT",
           "flow_priority", "frame_sizes", "standalone_fct_ns", "standalone_fcts",
           "tandem_completion_ns"]
