"""Host-agent configs for an experiment, and the agent processes in their hosts.

The configs are ``emulator.schema.agent`` models: built here, written as
JSON, read back by the agent process with the same model."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from emulator.agents.payload import write_layout
from emulator.experiment.endpoints import agent_keys, dropped_flows
from emulator.experiment.faults import nic_faults
from emulator.experiment.ideal_fct import base_rtt_ns, int_max_hops
from emulator.experiment.resolved import Experiment
from emulator.errors import RunAborted
from emulator.net.fabric import FabricNet
from emulator.net.fabric_health import exit_phrase
from emulator.net.nodes import stop_processes
from emulator.net.packing import agent_packs, wake_spin_ns
from emulator.rundir import RawDir
from emulator.schema.nic import DEFAULT_RTO_FABRIC_NS
from emulator.schema.agent import (
    DEFAULT_MR_RKEY, AgentPackConfig, ExpectConfig, HostAgentConfig, NicConfig, PackMemberConfig,
    QpConfig, SendConfig,
)
from emulator.schema.load import ProcessConfig
from emulator.schema.switch import IbLinkConfig
from emulator.wire import roce_sport
from emulator.ib.sm import path_records

# Exit statuses of an agent that ended by itself: done (0), or done with
# flows incomplete (3); anything else (a traceback, a signal) is a death.
AGENT_ENDED = (0, 3)
AGENTS_READY_TIMEOUT_S = 120.0     # every agent imported and its NIC up (64 on two cores: ~15 s)
START_AHEAD_S = 0.02           # the start time the runner hands out: this far ahead, plus
START_AHEAD_PER_AGENT_S = 0.001    # a ms per agent to write to it and wake it


def rto_fabric_ns(exp: Experiment) -> int:
    """The NICs' ACK timeout in fabric ns: ``nic.rto_us``, else the default
    (``schema.nic.DEFAULT_RTO_FABRIC_NS``) -- never a function of D."""
    us = exp.spec.nic.rto_us
    return DEFAULT_RTO_FABRIC_NS if us is None else int(us * 1000)


def nic_fields(exp: Experiment, nic: str) -> dict:
    """What an agent needs to drive one NIC (host node): the fields of its
    ``schema.nic.NicConfig``, which host agents and server agents share --
    its interface and addresses, its link's rate and delay, the experiment's
    transport timers, QoS, CNP and congestion-control settings, the scripted
    faults it applies as its link's sender, all in fabric units (the NIC puts
    them on its clock, ``nic.wall``)."""
    fabric, plan, spec = exp.fabric, exp.fabric.addresses, exp.spec
    port = fabric.ports(nic)[0]
    link = fabric.links[port.link_index]
    return {"ifname": port.ifname, "mac": plan.host_mac(nic), "ip": plan.host_ip(nic),
            "gateway_mac": plan.gateway_mac(nic), "rate_bps": link.rate_bps,
            "tx_delay_ns": link.delay_ns, "mtu_bytes": spec.nic.mtu_bytes,
            "retry_cnt": spec.nic.retry_cnt, "rto_ns": rto_fabric_ns(exp),
            "dilation": exp.dilation,
            "dscp": spec.qos.roce_dscp, "priority": spec.qos.roce_priority,
            "cnp_dscp": spec.qos.cnp_dscp, "cnp_priority": spec.qos.cnp_priority,
            **cc_fields(exp),
            "link_faults": nic_faults(exp, nic),
            "ib": ib_nic_fields(exp, nic) if fabric.link_layer == "infiniband" else None}


def ib_nic_fields(exp: Experiment, nic: str) -> dict:
    """An InfiniBand NIC's ``IbNicConfig``: its LID and its peers' (the
    subnet manager's sweep, the one that programs the switches), the link
    layer's buffer and update period as the switches have them
    (``schema.switch.IbLinkConfig``'s defaults, fabric), and IB congestion
    control if on. The switch port's buffer is the NIC's credit at the
    start: the link came up before the run, as a real one carries no data
    before its ends have exchanged credit. Without it the NIC waited for the
    port's first flow-control packet: a link delay in virtual time (every
    flow then released at one instant), 0-16 us in a dilated run (the port's
    credit sent at its start is lost, its next one comes a period later)."""
    fabric, cc = exp.fabric, exp.spec.ib_cc
    lids = path_records(fabric)
    return {"lid": lids[fabric.addresses.host_ip(nic)], "lids": lids,
            "peer_buffer_blocks": IbLinkConfig().buffer_blocks,
            "cc": cc if cc.enabled else None}


def cc_fields(exp: Experiment) -> dict:
    """The NIC's congestion control (``cc:``): DCQCN's parameters (off with
    ``cc: none``), or HPCC's with the INT records its data frames reserve,
    its T (the largest base RTT of the run's QPs -- plain flows', the
    workload's -- unless the file gives it) and an ACK for every packet
    (HPCC reacts per ACK; its authors' ns-3 ACKs every packet:
    L2_ACK_INTERVAL 1). One set for every NIC of the run: host, collective
    and storage agents'."""
    spec = exp.spec
    dcqcn = spec.dcqcn if spec.cc == "dcqcn" else spec.dcqcn.model_copy(update={"enabled": False})
    if spec.cc != "hpcc":
        return {"dcqcn": dcqcn}
    hops, rtt_ns = _int_path_facts(exp)
    hpcc = spec.hpcc
    if hpcc.base_rtt_us is None:
        hpcc = hpcc.model_copy(update={"base_rtt_us": rtt_ns / 1000})
    return {"dcqcn": dcqcn, "int_max_hops": hops, "hpcc": hpcc, "ack_every_n": 1}


_int_facts: tuple = (None, None)     # (experiment, its facts): one per run, asked per NIC


def _int_path_facts(exp: Experiment) -> tuple[int, int]:
    """(INT records a source reserves, HPCC's T in fabric ns) of ``exp``."""
    global _int_facts
    if _int_facts[0] is not exp:
        _int_facts = (exp, (int_max_hops(exp), base_rtt_ns(exp)))
    return _int_facts[1]


def nic_config(exp: Experiment, nic: str) -> NicConfig:
    return NicConfig(**nic_fields(exp, nic))


def agent_configs(exp: Experiment, run_dir: Path, start_at_unix_ns: int | None,
                  hosts: set[str] | None = None,
                  ready_paths: dict[str, str] | None = None) -> dict[str, HostAgentConfig]:
    """One config per host (or per host in ``hosts``): its NIC, its QPs,
    what it sends and expects, and its endpoint (``endpoints:``); it starts
    at ``start_at_unix_ns``, or, given its ``ready_paths`` entry, when
    released (``agents/start_gate.py``)."""
    d = exp.dilation
    names = [h.name for h in exp.fabric.hosts() if hosts is None or h.name in hosts]
    ip = {h: exp.fabric.addresses.host_ip(h) for h in names}
    qps: dict[str, list[QpConfig]] = {h: [] for h in names}
    send: dict[str, list[SendConfig]] = {h: [] for h in names}
    expect: dict[str, list[ExpectConfig]] = {h: [] for h in names}
    dropped = dropped_flows(exp)        # into another tenant: nothing expected, WRITE at 0
    for f in exp.flows:
        qps[f.src].append(QpConfig(qpn=f.src_qpn, remote_ip=ip[f.dst], remote_qpn=f.dst_qpn,
                                   udp_sport=f.udp_sport))
        qps[f.dst].append(QpConfig(qpn=f.dst_qpn, remote_ip=ip[f.src], remote_qpn=f.src_qpn,
                                   udp_sport=roce_sport(f.dst_qpn)))
        if f.flow_id not in dropped:
            expect[f.dst].append(ExpectConfig(flow_id=f.flow_id, qpn=f.dst_qpn, op=f.op,
                                              size_bytes=f.size_bytes))
    # WRITEs land where the receiver laid out its memory region.
    remote_addr: dict[int, int] = {}
    for h in names:
        remote_addr.update(write_layout([e.model_dump() for e in expect[h] if e.op == "write"]))
    for f in exp.flows:
        write = f.op == "write"
        send[f.src].append(SendConfig(
            flow_id=f.flow_id, qpn=f.src_qpn, op=f.op, size_bytes=f.size_bytes,
            start_offset_ns=int(f.start_fabric_ns * d),
            remote_addr=(0 if f.flow_id in dropped else remote_addr[f.flow_id]) if write else None))
    # Flow progress is sampled as often as the switches sample their queues.
    sample_interval_ns = int((exp.spec.switch.sample_interval_us or 1.0) * 1000 * d)
    return {h: HostAgentConfig(
        host=h, **nic_fields(exp, h), **agent_keys(exp, h),
        sample_interval_ns=sample_interval_ns,
        start_at_unix_ns=start_at_unix_ns, deadline_s=exp.wall_limit_s,
        ready_path=(ready_paths or {}).get(h),
        qps=qps[h], send=send[h], expect=expect[h], mr_rkey=DEFAULT_MR_RKEY,
        result_path=str(RawDir(run_dir).result(h)),
        progress_path=str(progress_path(run_dir, h))) for h in names}


def progress_path(run_dir: Path, host: str) -> Path:
    """Where host ``host``'s agent keeps ``{"delivered_bytes", "done"}``."""
    return RawDir(run_dir).progress(host)


class AgentProcesses:
    """Agent processes of one run, each serving one Mininet host (namespace)
    or several (``launch_pack``): each agent gets ``RUN/{name}.agent.json``
    and writes ``RUN/{name}.result.json``; a process logs to
    ``RUN/{name}.agent.log`` (a pack: ``RUN/{first}+{n}.agent.log``). All
    stopped together."""

    def __init__(self, fnet: FabricNet, exp: Experiment, run_dir: Path):
        self.fnet, self.exp, self.run_dir = fnet, exp, run_dir
        self.procs: dict[str, subprocess.Popen] = {}    # agent -> its process (a pack's: shared)
        self.logs: dict[str, Path] = {}                 # agent -> its process's log
        self.stopped = False     # by stop(): their exits are no deaths

    def processes(self) -> list[subprocess.Popen]:
        """Each process once (a pack serves several agents)."""
        return list({id(p): p for p in self.procs.values()}.values())

    def ready_path(self, name: str) -> str:
        """The file agent ``name`` creates when it can start (``start_gate``)."""
        return str(RawDir(self.run_dir).ready(name))

    def launch(self, name: str, cfg: ProcessConfig, module: str) -> None:
        """Write ``cfg`` and start ``python -m module`` on it in ``name``'s host;
        with a ``ready_path`` the agent waits for ``release`` on its stdin."""
        path = RawDir(self.run_dir).agent_config(name)
        self._in_time(cfg, name).write(path)
        gated = getattr(cfg, "ready_path", None) is not None
        self.logs[name] = RawDir(self.run_dir).agent_log(name)
        self.procs[name] = self.fnet.spawn(name, module, [str(path)], self.logs[name],
                                           stdin_pipe=gated)

    def launch_pack(self, cfgs: dict[str, HostAgentConfig], wake_spin_ns: int = 0) -> None:
        """Host agents ``cfgs`` in one process (``agents/pack.py``), started
        in the first one's host; each NIC opened in its own host; its loop
        polls ``wake_spin_ns`` before a timed wake-up."""
        names = list(cfgs)
        members = []
        for name, cfg in cfgs.items():
            path = RawDir(self.run_dir).agent_config(name)
            self._in_time(cfg, name).write(path)
            members.append(PackMemberConfig(config=str(path), netns_pid=self.fnet.host(name).pid))
        tag = f"{names[0]}+{len(names) - 1}"
        pack = RawDir(self.run_dir).pack_config(tag)
        self._in_time(AgentPackConfig(members=members, wake_spin_ns=wake_spin_ns),
                      names[0]).write(pack)
        log = RawDir(self.run_dir).agent_log(tag)
        gated = any(c.ready_path is not None for c in cfgs.values())
        proc = self.fnet.spawn(names[0], "emulator.agents.pack", [str(pack)], log,
                               stdin_pipe=gated)
        for name in names:
            self.procs[name], self.logs[name] = proc, log

    def _in_time(self, cfg: ProcessConfig, name: str) -> ProcessConfig:
        """``cfg`` of a process in ``name``'s host joining the run's virtual
        time, if the run has it (``emulator.vtime``), by the coordinator's
        socket as that host's server reaches it (``FabricNet.vtime_socket_of``)."""
        of = getattr(self.fnet, "vtime_socket_of", None)
        path = of(name) if of is not None else None
        return cfg if path is None else cfg.model_copy(update={"vtime_socket": path})

    def not_ready(self) -> list[str]:
        """Gated agents that have not said they are ready; raises
        ``RunAborted`` (``check``) when one died instead."""
        self.check()
        waiting = [n for n, p in self.procs.items()
                   if p.stdin is not None and not Path(self.ready_path(n)).exists()]
        for n in waiting:       # even a clean exit before the gate: it will never be ready
            if self.procs[n].poll() is not None:
                raise RunAborted(f"agent {n} {exit_phrase(self.procs[n].returncode)} before it was "
                                 f"ready (its log: {self.logs[n]})")
        return waiting

    def release(self, start_at_unix_ns: int) -> None:
        """Hand every gated agent the common start time (and close its stdin)."""
        for p in self.processes():
            if p.stdin is not None and not p.stdin.closed:
                try:
                    p.stdin.write(f"{start_at_unix_ns}\n".encode())
                    p.stdin.close()
                except OSError:        # it died: check() names it
                    pass

    def running(self) -> int:
        """How many agents are still running; raises ``RunAborted`` when one
        died or the fabric under them did (``check``)."""
        self.check()
        return sum(p.poll() is None for p in self.procs.values())

    def check(self) -> None:
        """Raise ``RunAborted`` naming the first agent that died (an exit
        status other than AGENT_ENDED) or what of the fabric did."""
        for name, p in self.procs.items():
            if not self.stopped and p.poll() is not None and p.returncode not in AGENT_ENDED:
                raise RunAborted(f"agent {name} {exit_phrase(p.returncode)} mid-run "
                                 f"(its log: {self.logs[name]})")
        self.fnet.check_alive()

    def stop(self, grace_s: float = 5.0) -> None:
        self.stopped = True
        for p in self.processes():           # one still at the gate ends on EOF
            if p.stdin is not None and not p.stdin.closed:
                try:
                    p.stdin.close()
                except OSError:
                    pass
        stop_processes(self.processes(), grace_s)

    def results(self) -> dict[str, dict]:
        out = {}
        for name in self.procs:
            path = RawDir(self.run_dir).result(name)
            out[name] = json.loads(path.read_text()) if path.exists() else {}
        return out


class AgentGroup(AgentProcesses):
    """The host agents of one run: started together, stopped together."""

    def __init__(self, fnet: FabricNet, exp: Experiment, run_dir: Path,
                 hosts: set[str] | None = None):
        """``hosts``: only these hosts get an agent (default: every host;
        with a workload, the server agents drive the other NICs)."""
        super().__init__(fnet, exp, run_dir)
        self.hosts = hosts
        self._final: dict[str, int] = {}   # done agents' delivered bytes: read no more

    def launch_all(self) -> None:
        """Start every agent, each waiting at the gate for ``release``."""
        names = [h.name for h in self.exp.fabric.hosts() if self.hosts is None
                 or h.name in self.hosts]
        cfgs = agent_configs(self.exp, self.run_dir, None, self.hosts,
                             ready_paths={n: self.ready_path(n) for n in names})
        cluster = self.fnet.cluster
        local = [n for n in names if cluster is None or not cluster.is_remote(n)]
        for name in names:                   # on another server: one process each, placed there
            if name not in local:
                self.launch(name, cfgs[name], "emulator.agents.host")
        groups = agent_packs(local, self.exp.spec.agents.per_process)
        wp = self.exp.workload
        busy = len(groups) + self.fnet.switch_processes() + \
            (0 if wp is None else len(wp.servers) + bool(wp.storage_server))
        # spread over servers: which processes share this machine's cores is the placer's
        spin_ns = 0 if cluster is not None else wake_spin_ns(busy)
        for group in groups:
            if len(group) == 1:
                self.launch(group[0], cfgs[group[0]], "emulator.agents.host")
            else:
                self.launch_pack({n: cfgs[n] for n in group}, wake_spin_ns=spin_ns)

    def progress(self) -> tuple[int, int]:
        """(payload bytes the agents' NICs have delivered -- placed in
        order, each byte once --, agents done) as their progress files say
        (docs/lossless.md); a file not written yet counts nothing."""
        delivered = sum(self._final.values())
        for name in self.procs.keys() - self._final.keys():
            try:
                p = json.loads(progress_path(self.run_dir, name).read_text())
            except (OSError, ValueError):
                continue
            delivered += int(p.get("delivered_bytes", 0))
            if p.get("done"):     # its last write: the runner polls 64 agents every 50 ms
                self._final[name] = int(p.get("delivered_bytes", 0))
        return delivered, len(self._final)


def start_together(*groups: AgentProcesses, timeout_s: float = AGENTS_READY_TIMEOUT_S,
                   poll_s: float = 0.005, start_at_unix_ns: int | None = None) -> int:
    """Once every gated agent of ``groups`` is ready, release them all at one
    start time a few ms ahead (or at ``start_at_unix_ns``: virtual time's
    fabric 0); returns it (Unix ns). ``RunAborted`` if one dies first or is
    not ready within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while waiting := [(g, n) for g in groups for n in g.not_ready()]:
        if time.monotonic() > deadline:
            g, name = waiting[0]
            raise RunAborted(f"agent {name} not ready {timeout_s:.0f} s after its launch "
                             f"({len(waiting)} waiting; its log: {g.logs.get(name)})")
        time.sleep(poll_s)
    n = sum(len(g.procs) for g in groups)
    start_at = start_at_unix_ns or \
        time.time_ns() + int((START_AHEAD_S + START_AHEAD_PER_AGENT_S * n) * 1e9)
    for g in groups:
        g.release(start_at)
    return start_at
