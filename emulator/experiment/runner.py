"""``fabric-emu run``: fabric up, traffic through it, results out, everything down."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from rich.console import Console

from emulator.experiment.agents import AgentGroup
from emulator.experiment.model import Experiment
from emulator.experiment.results import monotonic_t0_from_unix, write_all
from emulator.experiment.summary import build_summary, render_summary
from emulator.net.fabric import FabricNet, check_environment

PROGRESS_INTERVAL_S = 1.0


def fabric_net(exp: Experiment, run_dir: Path, pcap: bool = False) -> FabricNet:
    """The experiment's fabric, with its switch buffer, QoS and sampling."""
    spec = exp.spec
    return FabricNet(exp.fabric, run_dir, dilation=exp.dilation,
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
    target = exp.spec.target
    if target == "auto":
        target = "embedded"   # the BMv2 target comes with the Vagrant lab issue
    if target != "embedded":
        from emulator.errors import EnvironmentProblem
        raise EnvironmentProblem(f"target {target!r} is not available on this machine "
                                 f"(simple_switch_grpc not installed); use --target embedded")

    console.print(f"[bold]{exp.name}[/]: {len(exp.fabric.switches())} switches, "
                  f"{len(exp.fabric.hosts())} hosts, {len(exp.flows)} flows, "
                  f"dilation {exp.dilation:g}, target {target}")
    with fabric_net(exp, run_dir, pcap) as fnet:
        console.print(f"fabric up and programmed in {time.monotonic() - wall_t0:.1f} s")
        agents = AgentGroup(fnet, exp, run_dir)
        try:
            start_at_unix_ns = agents.start()
            # Raw logs stamp the monotonic clock; results count fabric time from here.
            t0_ns = monotonic_t0_from_unix(start_at_unix_ns)
            _wait_with_progress(fnet, agents, exp, console)
        finally:
            agents.stop()
        counters = fnet.controller.read_port_counters()
    summary = build_summary(exp, target, agents.results(), counters, run_dir,
                            wall_s=time.monotonic() - wall_t0)
    files = write_all(exp, run_dir, out_dir, t0_ns, summary)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    console.print(render_summary(summary))
    console.print(f"results in {out_dir}: summary.json, " + ", ".join(sorted(p.name for p in files.values())))
    return summary


def _wait_with_progress(fnet: FabricNet, agents: AgentGroup, exp: Experiment, console: Console) -> None:
    """Wait for the agents, showing bytes delivered to hosts as the fabric counts them."""
    total = sum(f.size_bytes for f in exp.flows)
    host_ports = [(exp.fabric.host_leaf(h.name).name, exp.fabric.ports(h.name)[0].peer_port_no)
                  for h in exp.fabric.hosts()]
    deadline = time.monotonic() + exp.spec.limits.wall_s + 15
    t0 = time.monotonic()
    interactive = console.is_terminal
    while agents.running() and time.monotonic() < deadline:
        time.sleep(PROGRESS_INTERVAL_S)
        try:
            delivered = fnet.controller.bytes_sent_on(host_ports)
        except Exception:  # progress only; a slow read must not end the run
            continue
        line = (f"  {time.monotonic() - t0:5.1f} s  delivered to hosts {delivered / 1e6:7.2f} MB "
                f"of {total / 1e6:.2f} MB payload  agents running {agents.running()}/{len(agents.procs)}")
        if interactive:
            console.print(line, end="\r", highlight=False)
        else:
            print(line, file=sys.stderr, flush=True)
    if interactive:
        console.print()
