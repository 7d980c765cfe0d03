"""``fabric-emu run``: fabric up, traffic through it, results out, everything down."""
from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path
from typing import Callable

from rich.console import Console

from emulator.experiment.agents import AgentGroup, start_together
from emulator.experiment.capture import write_captures
from emulator.experiment.endpoint_results import render_endpoints
from emulator.experiment.endpoints import dropped_flows
from emulator.experiment.faults import (end_faults, reroute_reaction_ns, switch_port_faults,
                                        switch_port_rx_down, switch_reboots, watchdog_config)
from emulator.experiment.model import Experiment
from emulator.experiment.outdir import OutputDir, output_dir
from emulator.experiment.plotter import Plotter
from emulator.experiment.results import build_run_summary, import_ahead, write_run_results
from emulator.experiment.servers import ServerGroup, add_collectives, plain_hosts, render_collectives
from emulator.experiment.summary import (member_clock_totals, render_slowdown_buckets,
                                         render_summary)
from emulator.experiment.summary_file import RunSummary
from emulator.experiment.switch_stats import (counters_since, write_p4_counter_stats,
                                              write_stats_window)
from emulator.experiment.telemetry import telemetry_collector
from emulator.net.management import InbandReports
from emulator.experiment.time_mode import VIRTUAL, run_time_mode
from emulator.experiment.timeseries import monotonic_t0_from_unix
from emulator.errors import ConfigError, EnvironmentProblem, RunAborted, WriteFailed
from emulator.net import environment
from emulator.net.fabric import FabricNet
from emulator.rundir import RawDir, RunDir
from emulator.net.runlock import RunLock
from emulator.vtime.coordinator import IB_MIN_WIRE_BYTES, Coordinator, lookahead_ns, peer_map
from emulator.vtime.member import VIRTUAL_UNIX_EPOCH_NS

PROGRESS_INTERVAL_S = 1.0     # a progress line
DONE_POLL_S = 0.05            # how soon the end of the traffic is seen
VIRTUAL_POLL_S = 0.25         # a virtual run's end is an event: this only paces the health checks
PLOTTER_EARLY_MAX_NODES = 24   # switches + hosts: the plots' process starts before the bring-up


class WallPhases:
    """Where a run's wall time went: seconds per phase, in the order marked
    (``summary.json``'s ``wall_phases_s``: bring_up, agents_ready, traffic,
    agents_stop, teardown -- the switches' stop; the rest of the teardown
    overlaps the writing of the results)."""

    def __init__(self) -> None:
        self.t0 = self._last = time.monotonic()
        self.seconds: dict[str, float] = {}

    def mark(self, phase: str) -> float:
        now = time.monotonic()
        self.seconds[phase] = round(now - self._last, 3)
        self._last = now
        return self.seconds[phase]

    def total_s(self) -> float:
        return time.monotonic() - self.t0


def resolve_target(target: str) -> str:
    """"auto" is BMv2 where it is installed, else the embedded target; "bmv2"
    where it is not is an error naming what is missing."""
    if target == "embedded":
        return target
    # deferred: the BMv2 target's parts (Thrift CLI, p4c) only where it is asked for
    from emulator.net.bmv2 import bmv2_unavailable_reason
    reason = bmv2_unavailable_reason()
    if target == "auto":
        return "embedded" if reason else "bmv2"
    if target == "bmv2" and reason:
        raise EnvironmentProblem(f"target bmv2: {reason}; use --target embedded")
    return target


def fabric_net(exp: Experiment, run_dir: Path, pcap: bool | str = False,
               target: str = "embedded", vtime=None) -> FabricNet:
    """The experiment's fabric, with its switch buffer, QoS and sampling
    (``vtime``: in virtual time, the run's coordinator)."""
    spec = exp.spec
    return FabricNet(exp.fabric, run_dir, dilation=exp.dilation, target=target,
                     buffer_bytes=spec.switch.buffer_bytes, qos=spec.qos,
                     mtu_bytes=spec.nic.mtu_bytes,
                     sample_interval_ns=int(spec.switch.sample_interval_us * 1000 * exp.dilation),
                     pcap=bool(pcap), cluster=spec.cluster, ib_cc=spec.ib_cc,
                     switches_per_process=spec.switch.per_process, vtime=vtime,
                     link_faults=switch_port_faults(exp), port_rx_down=switch_port_rx_down(exp),
                     reroute_reaction_ns=reroute_reaction_ns(exp), switch_reboots=switch_reboots(exp),
                     pfc_watchdog=watchdog_config(spec.switch.pfc_watchdog, exp.dilation))


def run_experiment(exp: Experiment, out_dir: str | Path, console: Console | None = None,
                   pcap: bool | str = False, *, summary_only: bool = False,
                   force: bool = False, plots: bool = True) -> dict:
    """Run ``exp`` once at its dilation into ``out_dir``; its summary.
    ``summary_only``: write summary.json and no time series, HPCC files or
    plots (a calibration run: only its verdict is used, and a run far behind
    leaves raw logs of gigabytes that would take minutes to convert).
    ``plots``: false, every results file but the PNG figures (nothing of
    the run reads them; a sweep's points, a test's checks).
    ``out_dir`` is new or an earlier run's (``outdir``); ``force``: one
    holding others' files too (kept)."""
    environment.check_environment()   # before anything is written or built
    target = resolve_target(exp.spec.target)
    collector = telemetry_collector(exp, target)      # a bad telemetry: refused as early
    with contextlib.ExitStack() as stack:
        if RunLock.held() is None:     # the CLI holds it for a whole run or sweep
            # Python callers: the lock before anything of out_dir is touched
            stack.enter_context(RunLock.acquire(exp.name, out_dir))
        odir = stack.enter_context(output_dir(out_dir, force=force))
        return _run(exp, odir, console or Console(stderr=True), pcap, target, summary_only,
                    collector, plots)


def _fresh_run_dir(odir: OutputDir) -> RunDir:
    """The run's directory, its raw directory empty but for others' files: an
    earlier run's agents' progress and result files would read as this run's
    ("done" before it starts). Refused before anything is built if someone
    else's entry holds a name the run writes."""
    odir.claim(*RunDir.ENTRIES)
    rd = RunDir(odir.path)
    if rd.raw.path.exists():                # a run before this one in the same open directory
        odir.remove(RunDir.RAW)
    rd.raw.path.mkdir(exist_ok=True)        # a user's notes in it stay
    return rd


def _run(exp: Experiment, odir: OutputDir, console: Console, pcap: bool | str, target: str,
         summary_only: bool = False, collector=None, plots: bool = True) -> dict:
    rd = _fresh_run_dir(odir)
    run_dir = rd.raw.path                   # configs, logs and raw results of this run
    phases = WallPhases()
    console.print(f"[bold]{exp.name}[/]: {len(exp.fabric.switches())} switches, "
                  f"{len(exp.fabric.hosts())} hosts, {len(exp.flows)} flows, "
                  f"{clock_phrase(exp)}, target {target}")
    # The plots' process imports matplotlib on the CPU the bring-up leaves idle;
    # on a big fabric it starts only once the switches and agents go: its ~45 MB
    # would top the peak. A dilated run stops it while the traffic runs
    # (``Plotter.pause``: its CPU would make them late); in virtual time nothing
    # can be late, and it goes on in the scheduler's idle class beside them.
    plotter = []
    plots = plots and not summary_only
    small = len(exp.fabric.switches()) + len(exp.fabric.hosts()) <= PLOTTER_EARLY_MAX_NODES
    if plots and small:
        plotter.append(Plotter.start(rd.path, exp.fabric))
    if small and not summary_only:
        # while the bring-up waits on shells and switches: its controller's gRPC
        # (FabricNet imports it once they are up), then the results phase's modules
        import_ahead("emulator.control.controller")
    coordinator = virtual_time_coordinator(exp)
    pause_plotter = plotter[0].pause if plotter and coordinator is None else None
    try:
        with fabric_net(exp, run_dir, pcap, target, coordinator) as fnet:
            console.print(f"fabric up and programmed in {phases.mark('bring_up'):.1f} s")
            if collector is not None:       # subscribed at fabric time 0, before the agents
                collector.start(fnet)
            # the servers report progress to the head over in-band management
            reports = (InbandReports(fnet, run_dir).start()
                       if exp.fabric.management_net("in_band") is not None else None)
            # BMv2 has only its P4 counters for the per-priority stats
            done = _traffic(fnet, exp, run_dir, console, phases, p4_stats=target == "bmv2",
                            on_start=pause_plotter)
            if reports is not None:         # before the bridges go with the teardown
                reports.finish(rd.file(RunDir.MANAGEMENT_JSON))
            # The switches stop (their stats and logs complete); links, shells and the
            # fork server go while the results are written; the context's exit joins.
            # The plots' process goes on after: an InfiniBand switch's flow-control
            # packets, sent to the end, were late beside it.
            fnet.teardown_in_background()
            if collector is not None and done[-1] is None:   # the switches stopped: streams end
                collector.finish(rd.file(RunDir.TELEMETRY_CSV))
            for p in plotter:
                p.resume()
            if plots and not plotter:     # the switches stopped: not idle
                plotter.append(Plotter.start(rd.path, exp.fabric, idle=False))
            phases.mark("teardown")
            return _results(exp, rd, console, pcap, target, phases, *done,
                            summary_only=summary_only, plots=plots,
                            plotter=plotter[0] if plotter else None,
                            vtime=coordinator.stats() if coordinator is not None else None)
    finally:
        if coordinator is not None:
            coordinator.close()
        for p in plotter:
            p.close()


def clock_phrase(exp: Experiment) -> str:
    return "virtual time" if run_time_mode(exp) == VIRTUAL else f"dilation {exp.dilation:g}"


def virtual_time_coordinator(exp: Experiment):
    """The run's ``vtime.Coordinator`` if it runs in virtual time, else None."""
    if run_time_mode(exp) != VIRTUAL:
        return None
    # InfiniBand's flow-control packets wait for no serializer: its shortest
    # time on a link is theirs
    links = exp.fabric.links
    ahead = (lookahead_ns(links, IB_MIN_WIRE_BYTES) if exp.fabric.link_layer == "infiniband"
             else lookahead_ns(links))
    return Coordinator(peer_map(exp.fabric), ahead)


def run_on_fabric(fnet: FabricNet, exp: Experiment, out_dir: str | Path,
                  console: Console | None = None, plots: bool = True) -> dict:
    """Run ``exp``'s traffic or workload on a fabric that is up (a live
    ``emulator.Fabric``; ``exp`` has its topology, QoS and dilation) into
    ``out_dir``; its summary. The switches keep running: fabric.p4's
    counters are read as differences from before this run, and an embedded
    switch's own stats (lateness, pause time, queue and buffer peaks) and
    raw logs are those of this run's window (``write_stats_window``), so
    the summary, time series and plots are a run's as in ``fabric-emu run``.
    On BMv2, as in a run, fabric.p4's counters are all there is. ``plots``: as a run's."""
    if fnet.fabric.link_layer == "infiniband":
        # its runs' windows need the switches' snapshots, which the IB switch lacks yet
        raise ConfigError(f"{fnet.fabric.name}: runs on a live InfiniBand fabric are not "
                          "supported yet: run the experiment with fabric-emu run")
    console = console or Console(stderr=True)
    with output_dir(out_dir) as odir:
        rd = _fresh_run_dir(odir)
        phases = WallPhases()
        done = _traffic(fnet, exp, rd.raw.path, console, phases, p4_stats=fnet.target == "bmv2",
                        baseline=True)
        return _results(exp, rd, console, False, fnet.target, phases, *done, plots=plots)


def _traffic(fnet: FabricNet, exp: Experiment, run_dir: Path, console: Console,
             phases: WallPhases, *, p4_stats: bool, baseline: bool = False,
             on_start: Callable[[], object] | None = None) -> tuple:
    """Start the agents together once all are ready (``start_together``),
    wait with progress, stop them, read the counters.
    ``baseline``: subtract what the counters held before (a fabric that ran
    traffic before). ``on_start``: called once the agents are released.
    Returns (agents, servers, counters, start Unix ns, t0, aborted)."""
    ctl = fnet.controller
    before = (ctl.read_port_counters(), ctl.read_priority_counters()) if baseline else ({}, {})
    # An embedded switch's own stats start a window here (BMv2 has none).
    window_start = fnet.snapshot_switch_stats() if baseline else {}
    aborted: RunAborted | None = None
    agents = AgentGroup(fnet, exp, run_dir, plain_hosts(exp))
    servers = ServerGroup(fnet, exp, run_dir)      # workload: collective/storage agents
    start_at_unix_ns = t0_ns = None
    # BMv2's link faults on the wall clock, counting from before the traffic
    bmv2_faults = (fnet.bmv2_fault_player(end_faults(exp))
                   if fnet.target == "bmv2" and exp.spec.faults else None)
    vt = fnet.vtime                                # virtual time's coordinator (None: dilated)
    try:
        agents.launch_all()
        servers.launch_all()
        if vt is None:
            start_at_unix_ns = start_together(agents, servers)
            # Raw logs stamp the monotonic clock; results count fabric time from here.
            t0_ns = monotonic_t0_from_unix(start_at_unix_ns)
            if bmv2_faults is not None:
                bmv2_faults.start(t0_ns)
        else:                   # fabric time 0 on every virtual clock, then the windows
            start_at_unix_ns = start_together(agents, servers, start_at_unix_ns=VIRTUAL_UNIX_EPOCH_NS)
            t0_ns = 0
            vt.start(expected_members=fnet.switch_processes() + len(agents.processes())
                     + len(servers.processes()))
        phases.mark("agents_ready")
        if on_start is not None:
            on_start()
        _wait_with_progress(fnet, agents, exp, console, servers)
        phases.mark("traffic")
        if bmv2_faults is not None and bmv2_faults.error is not None:
            raise bmv2_faults.error      # a step BMv2 refused: the run is not what was asked
        if vt is not None and vt.error:
            raise _member_failure(vt.error, agents, servers, fnet)
        fnet.check_alive()      # a switch may die after the last agent ended
    except RunAborted as e:     # a process died: stop the rest, keep what they wrote
        aborted = e
    finally:
        if bmv2_faults is not None:
            bmv2_faults.stop()
        if vt is not None:
            vt.finish()         # time stops: every agent ends where it is
        if ctl is not None and ctl.rerouter is not None:
            ctl.rerouter.write(RawDir(run_dir).reroute())
        servers.stop()
        agents.stop()
    # A dead switch has no counters to read; its stats.json may be missing.
    counters = {}
    if not aborted:
        counters = counters_since(ctl.read_port_counters(), before[0])
        if bmv2_faults is not None:     # the veths' counts, before the teardown
            bmv2_faults.write(RawDir(run_dir).bmv2_faults())
        if p4_stats:
            write_p4_counter_stats(ctl, run_dir, before[1])
        elif window_start:
            write_stats_window(fnet.run_dir, run_dir, window_start, fnet.snapshot_switch_stats())
    phases.mark("agents_stop")
    return agents, servers, counters, start_at_unix_ns, t0_ns, aborted


def _member_failure(error: str, agents, servers, fnet, grace_s: float = 2.0) -> RunAborted:
    """Virtual time stopped because a member failed: the process that died,
    named with its log, once it is seen dead (else the coordinator's line)."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            agents.check()
            servers.check()
            fnet.check_alive()
        except RunAborted as e:
            return e
        if time.monotonic() > deadline:
            return RunAborted(error)
        time.sleep(DONE_POLL_S)


def _results(exp: Experiment, rd: RunDir, console: Console,
             pcap: bool | str, target: str, phases: WallPhases, agents, servers, counters,
             start_at_unix_ns, t0_ns, aborted, *, summary_only: bool = False,
             plots: bool = True, plotter: Plotter | None = None,
             vtime: dict | None = None) -> dict:
    """The run's summary and results files from what ``_traffic`` collected
    (``summary_only``: summary.json alone; ``plots``: see ``run_experiment``); the
    summary as written."""
    summary = build_run_summary(exp, target, agents.results(), counters, rd,
                                wall_s=phases.total_s())
    summary.wall_phases_s = dict(phases.seconds)
    # The agents' common start as a Unix time: fabric time 0 of the results
    # (a wall stamp is start_unix_ns + fabric_ns * dilation).
    summary.start_unix_ns = start_at_unix_ns
    if vtime is not None:       # the windows of a virtual-time run (emulator.vtime)
        summary.virtual_time = {**vtime, **member_clock_totals(rd.raw)}
    if aborted:
        return _keep_partial(exp, servers, summary, rd, t0_ns, aborted, summary_only, plots)
    if summary_only:
        summary.write(rd)
        return summary.as_dict()
    # The workload's block goes into the summary before summary.json is written.
    files = add_collectives(exp, servers, summary, rd, plots=plots)
    files.update(write_run_results(exp, rd, t0_ns, summary, plots=plots,
                                   dport=exp.spec.hpcc.dport, plotter=plotter))
    if pcap:            # "wall": wall-time stamps; else (True, "fabric") fabric time
        files.update(write_captures(rd, start_at_unix_ns, exp.dilation,
                                    "wall" if pcap == "wall" else "fabric"))
    written = summary.as_dict()
    console.print(render_summary(written))
    if (buckets := render_slowdown_buckets(written)) is not None:
        console.print(buckets)
    if summary.collectives is not None:
        console.print(render_collectives(summary.collectives))
    if (endpoint_table := render_endpoints(written)) is not None:
        console.print(endpoint_table)
    console.print(f"results in {rd}: {rd.SUMMARY}, "
                  + ", ".join(sorted(p.name for p in files.values() if p.name != rd.SUMMARY)))
    return written


def _keep_partial(exp: Experiment, servers: ServerGroup, summary: RunSummary, rd: RunDir,
                  t0_ns: int, aborted: RunAborted, summary_only: bool = False,
                  plots: bool = True) -> dict:
    """summary.json of a run that ended early: what its processes wrote,
    ``complete`` false and ``aborted`` saying why; then raise ``aborted``
    (one line, with where the partial results are). The other results
    files are written as far as the partial raw logs allow (none with
    ``summary_only``)."""
    summary.complete = False
    summary.aborted = str(aborted)
    written = False
    if not summary_only:
        try:
            add_collectives(exp, servers, summary, rd, plots=plots)
            summary.complete = False
            write_run_results(exp, rd, t0_ns, summary, plots=plots, dport=exp.spec.hpcc.dport)
            written = True
        except WriteFailed:
            raise           # the disk is full: one line says which file
        except Exception:   # a raw log cut short by a killed process: summary.json alone
            pass
    if not written:
        summary.write(rd)
    raise RunAborted(f"{aborted}; partial results in {rd.summary}")


def _wait_with_progress(fnet: FabricNet, agents: AgentGroup, exp: Experiment, console: Console,
                        servers: ServerGroup | None = None) -> None:
    """Wait for the agents, showing the flows' payload their receivers have
    delivered (each byte once: neither headers nor retransmissions count;
    without flows, what the switches sent to hosts, labelled as such).
    Once every host agent is done they are stopped rather than left to
    linger: every sender has its ACKs, so nothing can be resent."""
    dropped = dropped_flows(exp)          # into another tenant: never delivered
    total = sum(f.size_bytes for f in exp.flows if f.flow_id not in dropped)
    host_ports = [(exp.fabric.host_leaf(h.name).name, exp.fabric.ports(h.name)[0].peer_port_no)
                  for h in exp.fabric.hosts()]
    deadline = time.monotonic() + exp.wall_limit_s + 15
    t0 = time.monotonic()
    interactive = console.is_terminal
    def running() -> int:
        return agents.running() + (servers.running() if servers is not None else 0)
    n_procs = len(agents.procs) + (len(servers.procs) if servers is not None else 0)
    next_line = t0 + PROGRESS_INTERVAL_S
    vt = fnet.vtime
    while running() and time.monotonic() < deadline:
        if vt is not None:
            # the coordinator ends the run, at a fabric time of its own: no
            # progress files to read, and the switches' and agents' CPU is
            # what the wait must not take
            if not vt.ended.is_set():
                vt.ended.wait(VIRTUAL_POLL_S)
            elif vt.error:
                return
            else:                       # ended: the agents are leaving
                _wait_for_an_exit([agents, servers], DONE_POLL_S)
        else:
            time.sleep(DONE_POLL_S)
            delivered, done = agents.progress()
            if agents.procs and done == len(agents.procs) and agents.running():
                agents.stop()
        if time.monotonic() < next_line:
            continue
        next_line += PROGRESS_INTERVAL_S
        if vt is not None:
            what = f"fabric time {vt.now_ns / 1e3:10.1f} us, {vt.windows} windows"
        elif total:
            what = f"flows delivered {delivered / 1e6:7.2f} MB of {total / 1e6:.2f} MB payload"
        else:
            try:
                sent = fnet.controller.bytes_sent_on(host_ports)
            except Exception:  # progress only; a slow read must not end the run
                continue
            what = (f"switches sent hosts {sent / 1e6:7.2f} MB "
                    "(frames, retransmissions included; collectives)")
        line = f"  {time.monotonic() - t0:5.1f} s  {what}  agents running {running()}/{n_procs}"
        if interactive:
            console.print(line, end="\r", highlight=False)
        else:                           # the console's file: a quiet caller's buffer, or stderr
            print(line, file=console.file, flush=True)
    if interactive:
        console.print()


def _wait_for_an_exit(groups: list, timeout_s: float) -> None:
    """Until a process of ``groups`` still running exits, or ``timeout_s``:
    the agents' end is seen when it comes (each process reports its exit),
    not at the next poll."""
    running = [p for g in groups if g is not None for p in g.processes() if p.poll() is None]
    if running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            running[0].wait(timeout=timeout_s)
