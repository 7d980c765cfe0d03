"""The running fabric's nodes and the processes on them: where each runs, how
it is started and stopped, what its switches counted.

``FabricNodes`` is the part of ``FabricNet`` (``fabric.py``) that a run
talks to while the fabric is up -- the Mininet node of a server, NIC or
switch; an agent started in a namespace (``spawn``); the switches' stats
(``snapshot_switch_stats``) -- and the process handling its lifecycle
shares: which switches share a process (``packing.py``), and stopping the
switch processes. Kept apart from the lifecycle so each reads on its own;
it uses the ``FabricNet`` attributes ``fabric``, ``net``, ``target``,
``cluster``, ``cluster_spec``, ``forkserver`` and ``switches_per_process``.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from emulator.net.nodes import stop_process, stop_processes
from emulator.net.packing import switch_packs


class FabricNodes:
    """Nodes, processes and switch stats of a ``FabricNet`` (a mixin of it)."""

    # ---------------------------------------------------------------- access
    def host(self, name: str):
        """The Mininet host of a server, by the server's name or one of its NICs'."""
        try:
            server = self.fabric.server(name)
        except KeyError:
            server = self.fabric.server_of(name)   # KeyError if no such node either
        return self.net.get(server.name)

    def node_of(self, host_name: str):
        """The Mininet host (its server's namespace) holding a NIC (host node)."""
        return self.net.get(self.fabric.server_of(host_name).name)

    def switch(self, name: str):
        return self.net.get(name)

    def _local_switches(self) -> list[str]:
        """The switches on this machine (all but a cluster's remote ones)."""
        return [sw.name for sw in self.fabric.switches()
                if self.cluster is None or not self.cluster.is_remote(sw.name)]

    def switch_interfaces(self) -> list[str]:
        """The switches' ports: the fabric's interfaces in the root namespace
        (every link has a switch end) of this machine."""
        return [p.ifname for sw in self._local_switches() for p in self.fabric.ports(sw)]

    # ------------------------------------------------------------- processes
    def _switch_packs(self) -> dict[str, str]:
        """switch -> the name of the process it shares (``dataplane/pack.py``);
        a switch not named runs alone. Embedded switches (Ethernet or
        InfiniBand) on one machine only."""
        if self.target != "embedded" or self.cluster_spec is not None:
            return {}
        out = {}
        for group in switch_packs([sw.name for sw in self.fabric.switches()],
                                  self.switches_per_process):
            if len(group) > 1:
                out.update({name: f"{group[0]}+{len(group) - 1}" for name in group})
        return out

    def switch_processes(self) -> int:
        """How many processes run this fabric's switches (packs count once)."""
        packs = self._switch_packs()
        return len(set(packs.values())) + sum(1 for sw in self.fabric.switches()
                                              if sw.name not in packs)

    def spawn(self, node: str, module: str, args: list[str], log_path: Path, *,
              stdin_pipe: bool = False):
        """``python -m module args`` in ``node``'s namespace (a host, or the
        server holding a NIC), forked warm by the fork server; a
        ``subprocess.Popen``-like handle (``ForkedProcess``)."""
        host = self.host(node)
        if self.cluster is not None and self.cluster.is_remote(host.name):
            configs = [Path(a) for a in args if Path(a).is_file()]   # written here, read there
            return self.cluster.server_of(host.name).spawn(
                module, args, log_path, netns_pid=host.pid, stdin_pipe=stdin_pipe, files=configs)
        return self.forkserver.spawn(module, args, log_path, netns_pid=host.pid,
                                     stdin_pipe=stdin_pipe)

    @staticmethod
    def _stop_switches(net) -> None:
        """All switch processes at once (a stopped one is left as it is)."""
        stop_processes([getattr(sw, "proc", None) for sw in net.switches])

    @staticmethod
    def _stop_broken(net) -> None:
        for sw in net.switches:
            stop_process(getattr(sw, "proc", None))
        for node in net.hosts + net.switches:
            if node.shell is not None and node.shell.poll() is None:
                os.killpg(node.shell.pid, signal.SIGHUP)
            node.cleanup()

    # ----------------------------------------------------------------- stats
    def snapshot_switch_stats(self, timeout_s: float = 10.0) -> dict[str, dict]:
        """Each embedded switch's stats since its previous snapshot (or its
        start), its counters and peaks then cleared: name -> stats.json
        contents, with ``raw_log_bytes``, where its raw logs stood. BMv2
        keeps no such stats: {}."""
        if self.target != "embedded":
            return {}
        nodes = [self.net.get(sw.name) for sw in self.fabric.switches()]
        for node in nodes:              # all at once: one window for the fabric
            node.request_snapshot()
        deadline = time.monotonic() + timeout_s
        return {node.name: node.read_snapshot(deadline) for node in nodes}
