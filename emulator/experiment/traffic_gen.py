"""Generated traffic: a ``pattern: poisson`` entry of ``traffic:`` as flows.

The HPCC simulator's generator (alibaba-edu/High-Precision-Congestion-Control
``traffic_gen/traffic_gen.py``), in fabric units:

* every source host starts flows at Poisson arrivals, exponential gaps of
  mean ``mean_size x 8 / (rate x load)`` -- HPCC's ``avg_inter_arrival =
  1 / (bandwidth x load / 8 / avg)`` -- with ``rate`` the fabric rate of the
  host's own link, so each host link is offered ``load`` of its rate (in
  message bytes: headers, as in HPCC, not counted);
* each flow goes to a destination drawn uniformly among the other hosts of
  the entry (``hosts``, default every host) on the source's plane (no route
  joins planes);
* its size is drawn from the entry's distribution (``flow_sizes.py``),
  multiplied by ``size_scale``, rounded and clamped to [``min_bytes``,
  ``max_bytes``]; ``mean_size`` is the exact mean of those scaled, clamped
  sizes, so the clamping does not change the load;
* arrivals fall in [``start_us``, ``start_us + duration_us``) (a Poisson
  process on the window: HPCC also drops the arrival that first passes it).

Deterministic: each source host draws from its own generator, seeded from
the entry's ``seed`` and the host's name, so a seed gives the same flows
every time and on every machine, and adding a host leaves the others' flows
as they were. The flows are sorted by start time, and then go through the
same path as any other flow (``model._expand_flows``: QPs, ``start_ns``).

``generated_summary(exp)`` is ``summary.json``'s ``generated_traffic``: per
poisson entry what was offered.
"""
from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emulator.experiment.flow_sizes import DISTRIBUTIONS
from emulator.schema.limits import MAX_MESSAGE_BYTES
from emulator.schema.load import FieldError
from emulator.schema.experiment import PoissonTrafficSpec

if TYPE_CHECKING:  # pragma: no cover
    from emulator.experiment.resolved import Experiment
    from emulator.schema.experiment import PoissonTrafficSpec
    from emulator.topo import Fabric

# More flows than this from one entry is a typo (a duration in ns, a tiny
# size_scale), not an experiment: each is a QP and a process's work.
MAX_GENERATED_FLOWS = 100_000


@dataclass(frozen=True)
class GeneratedFlow:
    start_ns: int            # fabric ns
    src: str
    dst: str
    size_bytes: int


def host_rate_bps(fabric: "Fabric", host: str) -> int:
    """The fabric rate of a host's (first) link: what its offered load is a share of."""
    return fabric.links[fabric.ports(host)[0].link_index].rate_bps


def size_bounds(t: "PoissonTrafficSpec") -> tuple[int, int]:
    return t.min_bytes, (t.max_bytes if t.max_bytes is not None else MAX_MESSAGE_BYTES)


def mean_size_bytes(t: "PoissonTrafficSpec") -> float:
    """The mean flow size of the entry: its distribution scaled and clamped."""
    low, high = size_bounds(t)
    return DISTRIBUTIONS[t.distribution].clamped_mean(t.size_scale, low, high)


def mean_interarrival_ns(t: "PoissonTrafficSpec", rate_bps: float) -> float:
    """HPCC's ``avg_inter_arrival``: mean size x 8 / (rate x load), in fabric ns."""
    return mean_size_bytes(t) * 8e9 / (rate_bps * t.load)


def entry_hosts(t: "PoissonTrafficSpec", fabric: "Fabric") -> list[str]:
    """The entry's hosts (sources and destinations), checked: real hosts,
    each with another of the entry's hosts on its plane (``FieldError``)."""
    every = [h.name for h in fabric.hosts()]
    if t.hosts is None:
        hosts = every
    else:
        for j, h in enumerate(t.hosts):
            if h not in every:
                raise FieldError(f"hosts[{j}]", f"{h!r} is not a host of fabric {fabric.name!r}")
        hosts = list(t.hosts)
    plane = {h: fabric.node(h).plane for h in hosts}
    for h in hosts:
        if not any(d != h and plane[d] == plane[h] for d in hosts):
            raise FieldError("hosts", f"{h} has no other host on its ({plane[h]}) plane to send to")
    return hosts


def _rng(seed: int, host: str) -> random.Random:
    digest = hashlib.sha256(f"poisson/{seed}/{host}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def poisson_flows(t: "PoissonTrafficSpec", fabric: "Fabric") -> list[GeneratedFlow]:
    """The flows of a poisson entry, sorted by (start, src, dst); a
    ``FieldError`` (relative to the entry) if they cannot be generated."""
    cdf = DISTRIBUTIONS[t.distribution]
    hosts = entry_hosts(t, fabric)
    plane = {h: fabric.node(h).plane for h in hosts}
    low, high = size_bounds(t)
    start_ns = t.start_us * 1000
    window_ns = t.duration_us * 1000
    gaps = {h: mean_interarrival_ns(t, host_rate_bps(fabric, h)) for h in hosts}
    expected = sum(window_ns / g for g in gaps.values())
    if expected > MAX_GENERATED_FLOWS:
        raise FieldError("duration_us", f"would generate about {expected:,.0f} flows, more than "
                                        f"{MAX_GENERATED_FLOWS:,}: shorten duration_us or lower "
                                        "load, or raise size_scale")
    flows = []
    for src in hosts:
        rng = _rng(t.seed, src)
        others = [d for d in hosts if d != src and plane[d] == plane[src]]
        t_ns = 0.0
        while True:
            t_ns += -math.log(1.0 - rng.random()) * gaps[src]
            if t_ns >= window_ns:
                break
            dst = others[min(len(others) - 1, int(rng.random() * len(others)))]
            size = min(high, max(low, round(cdf.size_at(rng.random()) * t.size_scale)))
            flows.append(GeneratedFlow(int(start_ns + t_ns), src, dst, int(size)))
    flows.sort(key=lambda f: (f.start_ns, f.src, f.dst))
    return flows


def generated_summary(exp: "Experiment") -> list[dict]:
    """Per poisson entry: its parameters, the flows it made and the load they
    offer -- their bytes over the entry's hosts' link capacity in the window
    (``offered_load``; per source host: ``offered_load_min``/``_max``), which
    the Poisson draw makes close to ``load``, not equal."""
    out = []
    for i, t in enumerate(exp.spec.traffic or ()):
        if not isinstance(t, PoissonTrafficSpec):
            continue
        flows = [f for f in exp.flows if f.entry == i]
        hosts = entry_hosts(t, exp.fabric)
        window_s = t.duration_us / 1e6
        per_host = {h: 0 for h in hosts}
        for f in flows:
            per_host[f.src] += f.size_bytes
        capacity = {h: host_rate_bps(exp.fabric, h) * window_s / 8 for h in hosts}   # bytes
        loads = [per_host[h] / capacity[h] for h in hosts]
        total = sum(per_host.values())
        out.append({
            "entry": i, "pattern": t.pattern, "distribution": t.distribution, "load": t.load,
            "duration_us": t.duration_us, "start_us": t.start_us, "seed": t.seed,
            "size_scale": t.size_scale, "hosts": len(hosts), "flows": len(flows),
            "bytes": total, "mean_size_bytes": round(total / len(flows), 1) if flows else None,
            "expected_mean_size_bytes": round(mean_size_bytes(t), 1),
            "offered_load": round(total / sum(capacity.values()), 4),
            "offered_load_min": round(min(loads), 4), "offered_load_max": round(max(loads), 4),
        })
    return out


__all__ = ["GeneratedFlow", "MAX_GENERATED_FLOWS", "entry_hosts", "generated_summary",
           "host_rate_bps", "mean_interarrival_ns", "mean_size_bytes", "poisson_flows"]
