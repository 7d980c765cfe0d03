"""Per-host endpoint results of a run with an ``endpoints:`` section.

``add_endpoint_results`` extends summary.json (nothing changes without the
section):

* ``flows[]`` gain ``expect`` (delivered | dropped, ``endpoints.flow_expect``),
  ``tx_packets`` (data frames the sender's QP put on the wire, retransmissions
  included) and ``as_expected`` (delivered: complete and intact; dropped:
  nothing acked and nothing placed).
* ``hosts[]``: ``host``, ``server``, ``tenant``, ``dpu``, ``tx_bytes`` /
  ``rx_bytes`` (frames on the NIC's wire), ``tenant_drops`` (frames of another
  partition discarded), ``foreign_tx_packets_to_host`` (what the flows into
  it from other tenants sent), ``cpu_rx_drops``, ``host_cpu_busy`` and
  ``dpu_cpu_busy`` (busy / (elapsed x cores) over the agent's whole life),
  ``host_cpu_busy_active`` (the same over its active window: the common
  start to its last own flow's completion, which the linger and the
  foreign senders' retries do not dilute), ``goodput_gbps`` (bytes of its own
  flows sent / their span, fabric Gbps; null if it sent none).
* ``tenants{}``: per tenant, ``dpu``, ``flows``, ``complete``,
  ``goodput_gbps`` (mean over its own flows of bytes x 8 / FCT),
  ``host_cpu_busy_active`` (mean over its NICs that moved data).
* ``isolation``: ``foreign_flows``, ``foreign_tx_packets``, ``tenant_drops``,
  ``foreign_acked_bytes``, ``isolated`` (every host dropped exactly the
  foreign packets sent to it: all of them, none of its own tenant's; no
  foreign byte acked or placed).

``complete`` then means: every flow expected delivered is complete and
intact, and the run is isolated (flows expected dropped do not make a run
fail; a dropped flow that got through does).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table

from emulator.experiment.endpoints import DELIVERED, DROPPED, flow_expect, host_params
from emulator.experiment.results_io import write_csv
from emulator.rundir import RunDir

if TYPE_CHECKING:  # pragma: no cover
    from emulator.experiment.model import Experiment
    from emulator.experiment.summary_file import RunSummary

HOSTS_CSV_COLUMNS = ("host", "server", "tenant", "dpu", "tx_bytes", "rx_bytes", "tenant_drops",
                     "foreign_tx_packets_to_host", "host_cpu_busy", "host_cpu_busy_active",
                     "dpu_cpu_busy", "goodput_gbps")


def _busy(cpu: dict | None) -> float | None:
    return None if not cpu else cpu.get("busy_fraction")


def add_endpoint_results(exp: "Experiment", agent_results: dict[str, dict],
                         summary: "RunSummary") -> None:
    if exp.spec.endpoints is None:
        return
    d = exp.dilation
    sends = {s["flow_id"]: s for r in agent_results.values() for s in r.get("send", [])}
    flows = {f.flow_id: f for f in exp.flows}
    for fs in summary.flows:
        f, s = flows[fs["flow_id"]], sends.get(fs["flow_id"], {})
        fs["expect"] = flow_expect(exp, f)
        fs["tx_packets"] = int(s.get("tx_packets", 0))
        if fs["expect"] == DROPPED:
            fs["as_expected"] = (not s.get("complete") and int(s.get("acked_bytes", 0)) == 0
                                 and fs["delivered_bytes"] == 0)
        else:
            fs["as_expected"] = fs["complete"]

    hosts = []
    for h in exp.fabric.hosts():
        res = agent_results.get(h.name) or {}
        p = host_params(exp, h.name)
        ep, nic = res.get("endpoint") or {}, res.get("nic") or {}
        own = [fs for fs in summary.flows if fs["expect"] == DELIVERED
               and h.name in (fs["src"], fs["dst"])]
        mine = [sends.get(fs["flow_id"], {}) for fs in own if fs["src"] == h.name]
        hosts.append({
            "host": h.name, "server": p["server"], "tenant": p["tenant"], "dpu": p["dpu"],
            "tx_bytes": int(nic.get("tx_bytes", 0)), "rx_bytes": int(nic.get("rx_bytes", 0)),
            "tenant_drops": int(ep.get("tenant_drops", 0)),
            "foreign_tx_packets_to_host": sum(fs["tx_packets"] for fs in summary.flows
                                              if fs["expect"] == DROPPED and fs["dst"] == h.name),
            "cpu_rx_drops": int(ep.get("cpu_rx_drops", 0)),
            "host_cpu_busy": _busy(ep.get("host_cpu")),
            "host_cpu_busy_active": _active_busy(res, own, agent_results),
            "dpu_cpu_busy": _busy(ep.get("dpu_cpu")),
            "goodput_gbps": _span_gbps(mine, d),
        })
    summary.hosts = hosts
    summary.tenants = _tenants(summary.flows, hosts)
    dropped = [fs for fs in summary.flows if fs["expect"] == DROPPED]
    iso = {"foreign_flows": len(dropped),
           "foreign_tx_packets": sum(fs["tx_packets"] for fs in dropped),
           "tenant_drops": sum(h["tenant_drops"] for h in hosts),
           "foreign_acked_bytes": sum(int(sends.get(fs["flow_id"], {}).get("acked_bytes", 0))
                                      for fs in dropped)}
    iso["isolated"] = (all(h["tenant_drops"] == h["foreign_tx_packets_to_host"] for h in hosts)
                       and all(fs["as_expected"] for fs in dropped))
    summary.isolation = iso
    own_ok = all(fs["complete"] for fs in summary.flows if fs["expect"] == DELIVERED)
    # Flows expected dropped never complete; only what was expected to arrive counts.
    summary.complete = (summary.complete if not dropped else own_ok) and own_ok \
        and iso["isolated"]


def _active_busy(res: dict, own: list[dict], agent_results: dict[str, dict]) -> float | None:
    """Host CPU busy over [start, last completion of the host's own flows]."""
    cpu = (res.get("endpoint") or {}).get("host_cpu")
    start = res.get("start_at_unix_ns")
    if not cpu or not start:
        return None
    ends = []
    for r in agent_results.values():
        for e in r.get("send", []) + r.get("expect", []):
            if any(e["flow_id"] == fs["flow_id"] for fs in own) and e.get("complete_unix_ns"):
                ends.append(e["complete_unix_ns"])
    if not ends:
        return _busy(cpu)
    window = (max(ends) - start) * cpu["cores"]
    return round(min(1.0, cpu["busy_ns"] / window), 4) if window > 0 else None


def _span_gbps(sends: list[dict], d: float) -> float | None:
    done = [s for s in sends if s.get("complete") and s.get("post_unix_ns")]
    if not done:
        return None
    span_wall = max(s["complete_unix_ns"] for s in done) - min(s["post_unix_ns"] for s in done)
    return round(sum(s["bytes"] for s in done) * 8 / (span_wall / d), 3) if span_wall > 0 else None


def _tenants(flows: list[dict], hosts: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    by_host = {h["host"]: h for h in hosts}
    for name in dict.fromkeys(h["tenant"] for h in hosts if h["tenant"]):
        members = {h["host"] for h in hosts if h["tenant"] == name}
        own = [fs for fs in flows if fs["expect"] == DELIVERED and fs["src"] in members]
        rates = [fs["bytes"] * 8 / fs["fct_ns"] for fs in own if fs["complete"] and fs["fct_ns"]]
        active = [by_host[m]["host_cpu_busy_active"] for m in sorted(members)
                  if any(m in (fs["src"], fs["dst"]) for fs in own)
                  and by_host[m]["host_cpu_busy_active"] is not None]
        out[name] = {"dpu": sorted({by_host[m]["dpu"] for m in members}) == [True],
                     "flows": len(own), "complete": sum(fs["complete"] for fs in own),
                     "goodput_gbps": round(sum(rates) / len(rates), 3) if rates else None,
                     "host_cpu_busy_active": round(sum(active) / len(active), 4) if active else None}
    return out


def write_hosts_csv(rd: RunDir, summary: "RunSummary") -> dict[str, Path]:
    """``hosts.csv``: one row per NIC (``HOSTS_CSV_COLUMNS``); {} without endpoints."""
    if summary.hosts is None:
        return {}
    rows = [{k: ("" if h[k] is None else h[k]) for k in HOSTS_CSV_COLUMNS} for h in summary.hosts]
    return {rd.HOSTS_CSV: write_csv(rd.hosts_csv, HOSTS_CSV_COLUMNS, rows)}


def render_endpoints(summary: dict) -> Table | None:
    if "hosts" not in summary:
        return None
    iso = summary["isolation"]
    t = Table(title=f"endpoints: {iso['foreign_flows']} foreign flows sent "
                    f"{iso['foreign_tx_packets']:,} packets, tenant drops {iso['tenant_drops']:,}"
                    f" -> {'isolated' if iso['isolated'] else 'NOT ISOLATED'}")
    for col in ("host", "tenant", "dpu", "goodput Gbps", "host CPU busy (active)",
                "DPU CPU busy", "tenant drops / foreign sent"):
        t.add_column(col)

    def pct(v):
        return "-" if v is None else f"{v:.2f}"
    for h in summary["hosts"]:
        if not (h["tx_bytes"] or h["rx_bytes"]):
            continue                          # an idle NIC (e.g. a storage port)
        t.add_row(h["host"], h["tenant"] or "-", "yes" if h["dpu"] else "no",
                  "-" if h["goodput_gbps"] is None else f"{h['goodput_gbps']:.1f}",
                  f"{pct(h['host_cpu_busy'])} ({pct(h['host_cpu_busy_active'])})",
                  pct(h["dpu_cpu_busy"]),
                  f"{h['tenant_drops']:,} / {h['foreign_tx_packets_to_host']:,}")
    return t
