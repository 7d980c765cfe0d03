"""``fabric-emu run``: fabric up, traffic through it, results out, everything down."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from rich.console import Console

from emulator.experiment.agents import AgentGroup
from emulator.experiment.endpoint_results import render_endpoints
from emulator.experiment.model import Experiment
from emulator.experiment.results import build_run_summary, write_run_results
from emulator.experiment.servers import ServerGroup, add_collectives, plain_hosts, render_collectives
from emulator.experiment.summary import render_summary
from emulator.experiment.timeseries import monotonic_t0_from_unix
from emulator.errors import EnvironmentProblem
from emulator.net.fabric import FabricNet, check_environment

PROGRESS_INTERVAL_S = 1.0


def resolve_target(target: str) -> str:
    """"auto" is BMv2 where it is installed, else the embedded target; "bmv2"
    where it is not is an error naming what is missing."""
    from emulator.net.bmv2 import bmv2_unavailable_reason
    reason = bmv2_unavailable_reason()
    if target == "auto":
        return "embedded" if reason else "bmv2"
    if target == "bmv2" and reason:
        raise EnvironmentProblem(f"target bmv2: {reason}; use --target embedded")
    return target


def fabric_net(exp: Experiment, run_dir: Path, pcap: bool = False, target: str = "embedded") -> FabricNet:
    """The experiment's fabric, with its switch buffer, QoS and sampling."""
    spec = exp.spec
    return FabricNet(exp.fabric, run_dir, dilation=exp.dilation, target=target,
                     buffer_bytes=spec.switch.buffer_bytes, qos=spec.qos,
                     mtu_bytes=spec.nic.mtu_bytes,
                     sample_interval_ns=int(spec.switch.sample_interval_us * 1000 * exp.dilation),
                     pcap=pcap)


def run_experiment(exp: Experiment, out_dir: str | Path, console: Console | None = None,
                   pcap: bool = False) -> dict:
    console = console or Console(stderr=True)
    check_environment()   # before anything is written or built
    out_dir = Path(out_dir)
    run_dir = out_dir / "run"        # configs, logs and raw results of this run
    run_dir.mkdir(parents=True, exist_ok=True)
    wall_t0 = time.monotonic()
    target = resolve_target(exp.spec.target)

    console.print(f"[bold]{exp.name}[/]: {len(exp.fabric.switches())} switches, "
                  f"{len(exp.fabric.hosts())} hosts, {len(exp.flows)} flows, "
                  f"dilation {exp.dilation:g}, target {target}")
    with fabric_net(exp, run_dir, pcap, target) as fnet:
        console.print(f"fabric up and programmed in {time.monotonic() - wall_t0:.1f} s")
        agents = AgentGroup(fnet, exp, run_dir, plain_hosts(exp))
        servers = ServerGroup(fnet, exp, run_dir)      # workload: collective/storage agents
        try:
            start_at_unix_ns = agents.start(ServerGroup.start_delay_s(exp))
            servers.start(start_at_unix_ns)
            # Raw logs stamp the monotonic clock; results count fabric time from here.
            t0_ns = monotonic_t0_from_unix(start_at_unix_ns)
            _wait_with_progress(fnet, agents, exp, console, servers)
        finally:
            servers.stop()
            agents.stop()
        counters = fnet.controller.read_port_counters()
        if target == "bmv2":
            write_p4_counter_stats(fnet.controller, run_dir)
    summary = build_run_summary(exp, target, agents.results(), counters, run_dir,
                                wall_s=time.monotonic() - wall_t0)
    # The workload's block goes into the summary before summary.json is written.
    files = add_collectives(exp, servers, summary, out_dir)
    files.update(write_run_results(exp, run_dir, out_dir, t0_ns, summary))
    console.print(render_summary(summary))
    if "collectives" in summary:
        console.print(render_collectives(summary["collectives"]))
    if (endpoint_table := render_endpoints(summary)) is not None:
        console.print(endpoint_table)
    console.print(f"results in {out_dir}: summary.json, "
                  + ", ".join(sorted(p.name for p in files.values() if p.name != "summary.json")))
    return summary


def _wait_with_progress(fnet: FabricNet, agents: AgentGroup, exp: Experiment, console: Console,
                        servers: ServerGroup | None = None) -> None:
    """Wait for the agents, showing bytes delivered to hosts as the fabric counts them."""
    total = sum(f.size_bytes for f in exp.flows)
    host_ports = [(exp.fabric.host_leaf(h.name).name, exp.fabric.ports(h.name)[0].peer_port_no)
                  for h in exp.fabric.hosts()]
    deadline = time.monotonic() + exp.spec.limits.wall_s + 15
    t0 = time.monotonic()
    interactive = console.is_terminal
    def running() -> int:
        return agents.running() + (servers.running() if servers is not None else 0)
    n_procs = len(agents.procs) + (len(servers.procs) if servers is not None else 0)
    while running() and time.monotonic() < deadline:
        time.sleep(PROGRESS_INTERVAL_S)
        try:
            delivered = fnet.controller.bytes_sent_on(host_ports)
        except Exception:  # progress only; a slow read must not end the run
            continue
        line = (f"  {time.monotonic() - t0:5.1f} s  delivered to hosts {delivered / 1e6:7.2f} MB "
                + (f"of {total / 1e6:.2f} MB payload " if total else "(collectives) ")
                + f" agents running {running()}/{n_procs}")
        if interactive:
            console.print(line, end="\r", highlight=False)
        else:
            print(line, file=sys.stderr, flush=True)
    if interactive:
        console.print()


def write_p4_counter_stats(controller, run_dir: Path) -> None:
    """``{sw}.stats.json`` from fabric.p4's per-(port, priority) counters.

    The embedded target writes this file itself, with what its traffic
    manager measures (drops, pause time, peak depth). BMv2 has only the P4
    counters: drops are what ingress enqueued minus what egress sent; pause
    time and queue peaks are not known (null in summary.json).
    """
    by_switch: dict[str, dict[int, list[dict]]] = {}
    for (sw, port, prio), c in controller.read_priority_counters().items():
        by_switch.setdefault(sw, {}).setdefault(port, []).append({
            "priority": prio, "tx_packets": c.get("tx_packets", 0), "tx_bytes": c.get("tx_bytes", 0),
            "drops": max(0, c.get("enq_packets", 0) - c.get("tx_packets", 0)),
            "ecn_marks": c.get("ecn_mark_packets", 0),
            "pause_tx": c.get("pause_tx_packets", 0), "pause_rx": c.get("pause_rx_packets", 0),
            "headroom_drops": 0,       # BMv2 has no headroom accounting
            "paused_ns": None, "max_depth_bytes": None})
    for sw in controller.conns:
        ports = [{"port": port, "priorities": prios} for port, prios in sorted(by_switch.get(sw, {}).items())]
        (run_dir / f"{sw}.stats.json").write_text(json.dumps({"source": "fabric.p4 counters",
                                                              "ports": ports}, indent=1))
