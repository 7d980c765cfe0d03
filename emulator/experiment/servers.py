"""Server agents of an experiment with a ``workload:``: one collective agent
(``emulator.collectives.agent``) per compute server running it, one storage
agent (``emulator.collectives.storage``) for a ``storage:`` target, their
configs from the address plan, and the ``collectives`` block of the summary.

Rates and times are dilated as ``agents.py`` does for host agents (link
rate / D, delay x D); the NVLink domain too (rate / D, delay x D): the
topology's NVLink values are fabric values. GPUDirect RDMA on/off and the
staging path come per NIC from ``endpoints:`` (``endpoints.agent_keys``, the
same resolution and dilation as the host agents', overrides included). Results are converted back to
fabric time by ``collectives.report``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from rich.table import Table

from emulator.collectives import report
from emulator.experiment.agents import AgentProcesses, nic_config, nic_fields
from emulator.experiment.endpoints import agent_keys
from emulator.experiment.fidelity import add_collectives_fidelity
from emulator.experiment.resolved import Experiment
from emulator.experiment.plots import plot_busbw
from emulator.experiment.summary_file import RunSummary
from emulator.net.fabric import FabricNet
from emulator.schema.agent import (
    CollectiveAgentConfig, GpuNicConfig, NvlinkConfig, ReadClientConfig, StorageAgentConfig,
    StorageReaderConfig,
)
from emulator.rundir import RawDir, RunDir
from emulator.schema.load import ProcessConfig

GPU_NIC_KEYS = ("gpudirect", "staging_rate_bps", "staging_latency_ns")


def gpu_nic_config(exp: Experiment, nic: str) -> GpuNicConfig:
    """A GPU NIC's config: ``nic_fields`` plus its GPUDirect keys (dilated),
    when ``endpoints:`` sets ``gpudirect`` for it (else GPUDirect on)."""
    keys = agent_keys(exp, nic)
    return GpuNicConfig(**nic_fields(exp, nic), **{k: keys[k] for k in GPU_NIC_KEYS if k in keys})


def server_configs(exp: Experiment, run_dir: Path, start_at_unix_ns: int | None,
                   ready_path: Callable[[str], str] | None = None) -> dict[str, ProcessConfig]:
    """{process name: config} of the collective agents and the storage agent;
    they start at ``start_at_unix_ns``, or when released if ``ready_path``
    names each one's gate file (``agents/start_gate.py``)."""
    gate = ready_path or (lambda name: None)
    wp, fabric, d, spec = exp.workload, exp.fabric, exp.dilation, exp.spec
    assert wp is not None and spec.workload is not None
    servers = [fabric.server(s) for s in wp.servers]
    G = servers[0].gpus
    rank_ips = {str(i * G + g): fabric.addresses.host_ip(nic)
                for i, srv in enumerate(servers) for g, nic in enumerate(srv.nics)}
    workload = spec.workload.model_copy(update={"servers": None})   # the plan has chosen them
    readers: dict[str, StorageReaderConfig] = {}
    clients: list[ReadClientConfig] = []
    st = spec.storage
    storage = st is not None and wp.storage_server is not None
    if storage:
        # deferred: the storage agent's module brings NumPy, 30 ms of every run's start
        from emulator.collectives.storage import READ_QPN_BASE
        target_ip = fabric.addresses.host_ip(wp.storage_nic)
        for j, (name, nic) in enumerate(wp.readers):
            qpn = READ_QPN_BASE + j
            readers[name] = StorageReaderConfig(
                nic=None if nic in fabric.server(name).nics else nic_config(exp, nic),
                qpn=qpn, target_ip=target_ip, block_bytes=st.block_bytes, blocks=st.blocks,
                queue_depth=st.queue_depth)
            clients.append(ReadClientConfig(qpn=qpn, remote_ip=fabric.addresses.host_ip(nic),
                                            remote_qpn=qpn))
    out: dict[str, ProcessConfig] = {}
    for i, srv in enumerate(servers):
        out[srv.name] = CollectiveAgentConfig(
            server=i, servers=len(servers), dilation=d,
            nics=[gpu_nic_config(exp, n) for n in srv.nics], nic_nodes=list(srv.nics),
            rank_ips=rank_ips,
            nvlink=NvlinkConfig(rate_bps=srv.nvlink_rate_bps / d, delay_ns=srv.nvlink_delay_ns * d),
            workload=workload, start_at_unix_ns=start_at_unix_ns, deadline_s=exp.wall_limit_s,
            ready_path=gate(srv.name), result_path=str(RawDir(run_dir).result(srv.name)),
            storage=readers.get(srv.name))
    if storage:
        out[wp.storage_server] = StorageAgentConfig(
            nic=nic_config(exp, wp.storage_nic), block_bytes=st.block_bytes, blocks=st.blocks,
            storage_latency_ns=int(st.storage_latency_us * 1000 * d), clients=clients,
            deadline_s=exp.wall_limit_s + 30, ready_path=gate(wp.storage_server),
            result_path=str(RawDir(run_dir).result(wp.storage_server)))
    return out


class ServerGroup(AgentProcesses):
    """The server agents of one run; the storage agent serves until stopped."""

    def __init__(self, fnet: FabricNet, exp: Experiment, run_dir: Path):
        super().__init__(fnet, exp, run_dir)
        wp = exp.workload
        self.storage = wp.storage_server if wp is not None else None

    def launch_all(self) -> None:
        """Start every server agent, each waiting at the gate for ``release``."""
        if self.exp.workload is None:      # plain flows only: no server agents
            return
        for name, cfg in server_configs(self.exp, self.run_dir, None, self.ready_path).items():
            self.launch(name, cfg, "emulator.collectives.storage" if name == self.storage
                        else "emulator.collectives.agent")

    def running(self) -> int:
        """Collective agents still running (the storage agent never ends
        alone); raises ``RunAborted`` as ``AgentProcesses.running`` does."""
        self.check()
        return sum(p.poll() is None for n, p in self.procs.items() if n != self.storage)


def collectives_block(exp: Experiment, results: dict[str, dict]) -> dict:
    """summary.json's ``collectives``: nccl-tests rows, training step times,
    storage reads; fabric time (µs, GB/s = bytes per fabric ns)."""
    wp, d = exp.workload, exp.dilation
    assert wp is not None
    res = [results.get(s, {}) for s in wp.servers]
    errors = [f"{s}: {r.get('error') or 'no result (agent failed: see run/' + s + '.agent.log)'}"
              for s, r in zip(wp.servers, res) if r.get("error") or not r]
    # the QPs that failed (a rank's, towards a peer): the work completion's
    # status and when, fabric ns from the start
    failures = [{"server": s, **r["failure"]} for s, r in zip(wp.servers, res) if r.get("failure")]
    out: dict = {"servers": list(wp.servers), "errors": errors, "failures": failures,
                 "results": [], "training": None, "storage": None}
    try:
        out["results"] = report.collective_rows([x for r in res for x in r.get("records", [])], d)
        tr = [x for r in res for x in r.get("training", [])]
        out["training"] = report.training_summary(tr, d) if tr else None
    except (ValueError, KeyError, ZeroDivisionError) as e:   # a rank missing: incomplete run
        errors.append(f"report: {e}")
    if wp.readers:
        readers = []
        for name, nic in wp.readers:
            s = results.get(name, {}).get("storage") or {}
            win_ns = (s.get("window_ns") or 0) / d
            readers.append({"server": name, "nic": nic, "blocks_read": s.get("blocks_read", 0),
                            "wrong_blocks": s.get("wrong_blocks"),
                            "bytes_in_window": s.get("bytes_in_window", 0),
                            "window_us": win_ns / 1e3,
                            "throughput_GBps": s.get("bytes_in_window", 0) / win_ns if win_ns else 0.0})
        out["storage"] = {"server": wp.storage_server, "nic": wp.storage_nic, "readers": readers,
                          "throughput_GBps": sum(r["throughput_GBps"] for r in readers)}
    wrong = [r[k] for r in out["results"] for k in ("wrong", "inplace_wrong") if r.get(k)]
    if out["training"] and out["training"]["wrong"]:
        wrong.append(out["training"]["wrong"])
    out["complete"] = (not errors and all(r.get("complete") for r in res) and not wrong
                       and (bool(out["results"]) or out["training"] is not None))
    return out


def write_collectives(rd: RunDir, block: dict) -> dict[str, Path]:
    return report.write(rd, block["results"], block["training"])


def render_collectives(block: dict) -> Table:
    t = Table(title=f"collectives on {', '.join(block['servers'])} (fabric time)"
                    + ("" if block["complete"] else ", INCOMPLETE"))
    for col in ("collective", "size (B)", "time (µs)", "algbw (GB/s)", "busbw (GB/s)", "#wrong",
                "in-place busbw"):
        t.add_column(col, justify="right")
    for r in sorted(block["results"], key=lambda r: (r["collective"], r["size_bytes"])):
        inplace = r.get("inplace_busbw_GBps")
        t.add_row(f"{r['collective']} ({r['algorithm']})", f"{r['size_bytes']:,}",
                  f"{r['time_us']:.1f}", f"{r['algbw_GBps']:.2f}", f"{r['busbw_GBps']:.2f}",
                  "N/A" if r["wrong"] is None else str(r["wrong"]),
                  "" if inplace is None else f"{inplace:.2f}")
    tr = block["training"]
    if tr:
        st = tr["step_time_us"]
        shaped = "phases" in tr
        t.add_row(f"training step ({_step_name(tr)})", "" if shaped else f"{tr['size_bytes']:,}",
                  f"{st['mean']:.1f} (max {st['max']:.1f})", "", "",
                  "N/A" if tr["wrong"] is None else str(tr["wrong"]), "")
        for phase, v in (tr["phases"] if shaped else {}).items():
            t.add_row(f"  {phase}", "", f"{v['time_us']:.1f} ({v['share']:.0%})", "", "", "", "")
    if block["storage"]:
        s = block["storage"]
        t.add_row(f"storage READs from {s['server']}", "", "",
                  f"{s['throughput_GBps']:.2f}", "",
                  str(sum(r["wrong_blocks"] or 0 for r in s["readers"])), "")
    for e in block["errors"]:
        t.add_row("error", e, "", "", "", "", "")
    return t


def _step_name(tr: dict) -> str:
    """A training loop's name in the table: its collective, or its parallelism."""
    p = tr.get("parallelism")
    if p is None:
        return tr["collective"]
    return " ".join(f"{k}{p[k]}" for k in ("tp", "pp", "dp", "ep") if p[k] > 1) or "one rank"


def plain_hosts(exp: Experiment) -> set[str] | None:
    """Hosts that get a host agent: all without a workload (as always), else
    only those with plain flows (the server agents own the other NICs)."""
    if exp.workload is None:
        return None
    return {f.src for f in exp.flows} | {f.dst for f in exp.flows}


def add_collectives(exp: Experiment, group: ServerGroup, summary: RunSummary,
                    rd: RunDir, plots: bool = True) -> dict:
    """The summary's ``collectives`` and the collectives.* files (``plots``: with
    its PNG); {} without a workload."""
    if exp.workload is None:
        return {}
    block = collectives_block(exp, group.results())
    summary.collectives = block
    add_collectives_fidelity(summary, block)
    summary.complete = summary.complete and block["complete"]
    files = {p.name: p for p in write_collectives(rd, block).values()}
    if not plots:
        return files
    nic = exp.fabric.server(exp.workload.servers[0]).nics[0]
    link_GBps = exp.fabric.links[exp.fabric.ports(nic)[0].link_index].rate_bps / 8e9
    png = plot_busbw(block["results"], rd.file(rd.COLLECTIVES_PNG), link_GBps)
    if png is not None:
        files[png.name] = png
    return files
