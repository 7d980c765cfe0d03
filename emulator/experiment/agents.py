"""Host-agent configs for an experiment, and the agent processes in their hosts."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from emulator.agents.host import DEFAULT_MR_RKEY, write_layout
from emulator.experiment.endpoints import configure_agents
from emulator.experiment.model import ROCE_SPORT_BASE, Experiment
from emulator.net.fabric import FabricNet, dilated_link

AGENT_START_S = 2.0           # time for every agent to start and import Scapy
AGENT_START_PER_HOST_S = 0.25


def nic_config(exp: Experiment, nic: str) -> dict:
    """What an agent needs to drive one NIC (host node): its interface and
    addresses, link rate and delay (dilated), and the NIC-side QoS, CNP and
    DCQCN settings of the experiment. Host agents and server agents share it."""
    fabric, plan, d, spec = exp.fabric, exp.fabric.addresses, exp.dilation, exp.spec
    port = fabric.ports(nic)[0]
    rate_bps, delay_ns = dilated_link(fabric, nic, port.port_no, d)
    return {"ifname": port.ifname, "mac": plan.host_mac(nic), "ip": plan.host_ip(nic),
            "gateway_mac": plan.gateway_mac(nic), "rate_bps": rate_bps, "tx_delay_ns": delay_ns,
            "mtu_bytes": spec.nic.mtu_bytes, "retry_cnt": spec.nic.retry_cnt,
            "dscp": spec.qos.roce_dscp, "priority": spec.qos.roce_priority,
            "cnp_dscp": spec.qos.cnp_dscp, "cnp_priority": spec.qos.cnp_priority,
            "cnp_interval_ns": spec.dcqcn.cnp_interval_ns(d),
            "dcqcn": spec.dcqcn.agent_params(d, fabric.links[port.link_index].rate_bps)}


def agent_configs(exp: Experiment, run_dir: Path, start_at_unix_ns: int,
                  hosts: set[str] | None = None) -> dict[str, dict]:
    """One JSON config per host (or per host in ``hosts``): its NIC, its QPs,
    what it sends and expects."""
    d = exp.dilation
    # Flow progress is sampled as often as the switches sample their queues.
    sample_interval_ns = int((exp.spec.switch.sample_interval_us or 1.0) * 1000 * d)
    configs: dict[str, dict] = {}
    for h in exp.fabric.hosts():
        if hosts is not None and h.name not in hosts:
            continue
        configs[h.name] = {
            "host": h.name, **nic_config(exp, h.name),
            "sample_interval_ns": sample_interval_ns,
            "start_at_unix_ns": start_at_unix_ns, "deadline_s": exp.spec.limits.wall_s,
            "qps": [], "send": [], "expect": [],
            "result_path": str(run_dir / f"{h.name}.result.json"),
        }
    for f in exp.flows:
        src, dst = configs[f.src], configs[f.dst]
        src["qps"].append({"qpn": f.src_qpn, "remote_ip": dst["ip"], "remote_qpn": f.dst_qpn,
                           "udp_sport": f.udp_sport})
        dst["qps"].append({"qpn": f.dst_qpn, "remote_ip": src["ip"], "remote_qpn": f.src_qpn,
                           "udp_sport": ROCE_SPORT_BASE + (f.dst_qpn & 0x3FFF)})
        src["send"].append({"flow_id": f.flow_id, "qpn": f.src_qpn, "op": f.op,
                            "size_bytes": f.size_bytes,
                            "start_offset_ns": int(f.start_fabric_ns * d)})
        dst["expect"].append({"flow_id": f.flow_id, "qpn": f.dst_qpn, "op": f.op,
                              "size_bytes": f.size_bytes})
    if exp.spec.nic.rto_us is not None:   # (absent: the agents' default, as before)
        for cfg in configs.values():
            cfg["rto_ns"] = int(exp.spec.nic.rto_us * 1000 * d)
    configure_agents(exp, configs)     # endpoints: section (NIC/DPU, tenants); no-op without
    # WRITEs land where the receiver laid out its memory region.
    remote_addr: dict[int, int] = {}
    for cfg in configs.values():
        remote_addr.update(write_layout([e for e in cfg["expect"] if e["op"] == "write"]))
    for cfg in configs.values():
        for s in cfg["send"]:
            if s["op"] == "write":
                if "remote_addr" not in s:     # (a flow into another tenant has its own)
                    s["remote_addr"] = remote_addr[s["flow_id"]]
                s["rkey"] = DEFAULT_MR_RKEY
    return configs


def stop_processes(procs, grace_s: float = 5.0) -> None:
    """SIGTERM every agent still running; SIGKILL those not gone after ``grace_s`` in all."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class AgentProcesses:
    """Agent processes of one run, one per Mininet host (namespace): each
    gets ``RUN/{name}.agent.json``, logs to ``RUN/{name}.agent.log`` and
    writes ``RUN/{name}.result.json``; stopped together."""

    def __init__(self, fnet: FabricNet, exp: Experiment, run_dir: Path):
        self.fnet, self.exp, self.run_dir = fnet, exp, run_dir
        self.procs: dict[str, subprocess.Popen] = {}

    def launch(self, name: str, cfg: dict, module: str) -> None:
        """Write ``cfg`` and start ``python -m module`` on it in ``name``'s host."""
        path = self.run_dir / f"{name}.agent.json"
        path.write_text(json.dumps(cfg, indent=1))
        with open(self.run_dir / f"{name}.agent.log", "w") as log:
            self.procs[name] = self.fnet.host(name).popen(
                [sys.executable, "-m", module, str(path)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def running(self) -> int:
        return sum(p.poll() is None for p in self.procs.values())

    def stop(self, grace_s: float = 5.0) -> None:
        stop_processes(self.procs.values(), grace_s)

    def results(self) -> dict[str, dict]:
        out = {}
        for name in self.procs:
            path = self.run_dir / f"{name}.result.json"
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

    def start(self, extra_delay_s: float = 0.0) -> int:
        """Start every agent; returns the wall-clock start time (unix ns),
        ``extra_delay_s`` later for other processes started alongside."""
        n = len(self.exp.fabric.hosts()) if self.hosts is None else len(self.hosts)
        start_at = time.time_ns() + int((AGENT_START_S + AGENT_START_PER_HOST_S * n
                                         + extra_delay_s) * 1e9)
        for name, cfg in agent_configs(self.exp, self.run_dir, start_at, self.hosts).items():
            self.launch(name, cfg, "emulator.agents.host")
        return start_at
