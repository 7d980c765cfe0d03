"""Mininet's node and link classes for a fabric spread over servers
(``emulator/net/cluster.py``): the fabric's own switch and host with
``RemoteMixin``, and the ssh-carried link with this run's ssh options.

Made per run (the classes close over the run's ``Cluster``); ``Cluster.classes``
imports this module only when a run is spread over servers, so importing Mininet
at the top here costs a one-machine run nothing."""
from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

from mininet.examples.cluster import RemoteGRELink, RemoteMixin, RemoteSSHLink

from emulator.errors import FabricEmuError
from emulator.lifeline import set_pdeathsig
from emulator.net.nodes import READY_TIMEOUT_S, EmbeddedP4Switch, RoceHost
from emulator.schema.cluster import LOCAL

if TYPE_CHECKING:  # pragma: no cover
    from emulator.net.cluster import Cluster


def cluster_classes(cluster: "Cluster"):
    """(switch class, host class, link class) for Mininet: the fabric's own
    with ``RemoteMixin``, ssh carrying this run's options."""
    on_server = _on_server_class(cluster)

    class ClusterRoceHost(on_server, RoceHost):
        pass

    link = _ssh_link_class(cluster) if cluster.spec.link == "ssh" else RemoteGRELink
    return _switch_class(cluster, on_server), ClusterRoceHost, link


def _on_server_class(cluster: "Cluster") -> type:
    """``RemoteMixin`` with this run's ssh options, local nodes started as Mininet's."""
    class OnServer(RemoteMixin):
        """``RemoteMixin``, but a node on the runner's machine starts its
        shell as Mininet's ``Node`` does: ``RemoteMixin`` puts every command
        in a process group of its own, which makes ``mnexec -d`` fork and
        the shell's ``Popen`` end at once, so its liveness would be unknown."""
        sshbase = [*RemoteMixin.sshbase, *cluster.spec.ssh_options]

        def _popen(self, cmd, sudo=True, tt=True, **params):
            if self.isRemote:
                return super()._popen(cmd, sudo=sudo, tt=tt, **params)
            cmd = cmd.split() if isinstance(cmd, str) else list(cmd)
            if self.user and not sudo and self.user != "root":   # as RemoteMixin: drop to the user
                cmd = ["sudo", "-E", "-u", self.user, *cmd]
            return subprocess.Popen(cmd, **params)

    return OnServer


def _switch_class(cluster: "Cluster", on_server: type) -> type:
    """The embedded switch on a cluster server."""
    class ClusterP4Switch(on_server, EmbeddedP4Switch):
        """An embedded switch on a cluster server: on a remote one its
        process runs there (``RemoteProcess``) and its P4Runtime port is
        forwarded here."""

        def start(self, controllers) -> None:
            if not self.isRemote:
                return super().start(controllers)
            cfg_path = self.write_config()
            self.proc = cluster.server_of(self.name).spawn(
                "emulator.dataplane", [str(cfg_path)], self.log_path, files=[cfg_path])

        @classmethod
        def batchStartup(cls, switches, **kw):
            """The remote switches' ports, one probe per server for all of its
            switches (``ClusterServer.wait_ports``), then the local ones."""
            remote: dict = {}
            for sw in switches:
                if sw.isRemote:
                    remote.setdefault(cluster.server_of(sw.name), []).append(sw)
            for srv, members in remote.items():
                srv.wait_ports([(sw.grpc_port, sw.proc, f"switch {sw.name}", sw.log_path)
                                for sw in members], READY_TIMEOUT_S)
                for sw in members:
                    sw.local_grpc_port = srv.forward(sw.grpc_port)
            super().batchStartup([sw for sw in switches if not sw.isRemote], **kw)
            return switches

        def request_snapshot(self) -> None:
            if self.isRemote:     # its last snapshot there would be pulled as this one
                cluster.server_of(self.name).run(["rm", "-f", str(self.stats_path)], check=False)
            super().request_snapshot()

        @property
        def grpc_address(self) -> str:
            return f"127.0.0.1:{getattr(self, 'local_grpc_port', self.grpc_port)}"

    return ClusterP4Switch


def _ssh_link_class(cluster: "Cluster") -> type:
    """Mininet's ssh-carried link with this run's ssh options."""
    class ClusterSSHLink(RemoteSSHLink):
        """Mininet's ssh-carried link, its ssh with this run's options."""

        def makeTunnel(self, node1, node2, intfname1, intfname2, addr1=None, addr2=None):
            if node2.server == LOCAL:
                return self.makeTunnel(node2, node1, intfname2, intfname1, addr2, addr1)
            dest = f"{node2.user}@{node2.serverIP}"
            for node in (node1, node2):
                out = node.rcmd(f"ip tuntap add dev tap9 mode tap user {node.user}")
                if out:
                    raise FabricEmuError(f"cluster link {intfname1}-{intfname2}: tap on {node.server}: {out}")
            # It dies with the runner (PDEATHSIG), or with a peer gone (keepalives).
            tunnel = node1.rpopen(["ssh", "-n", *cluster.spec.ssh_options, "-o", "BatchMode=yes",
                                   "-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=3",
                                   "-o", "Tunnel=Ethernet", "-w", "9:9", dest, "echo @"],
                                  sudo=False, preexec_fn=set_pdeathsig)
            ch = tunnel.stdout.read(1).decode(errors="replace")
            if ch != "@":
                raise FabricEmuError(f"cluster link {intfname1}-{intfname2}: ssh tunnel to {dest} "
                                     f"failed: {(ch + tunnel.stdout.read().decode(errors='replace')).strip()} "
                                     f"(the server's sshd needs PermitTunnel yes)")
            for node, intf, addr in ((node1, intfname1, addr1), (node2, intfname2, addr2)):
                self.moveIntf("tap9", node)
                out = node.cmd("ip link set tap9 name", intf, *(("address", addr) if addr else ()))
                if out:
                    raise FabricEmuError(f"cluster link: renaming tap9 to {intf} on {node.server}: {out}")
            return tunnel

    return ClusterSSHLink
