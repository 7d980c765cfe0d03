"""A fabric spread over several machines with Mininet's cluster edition.

``mininet.examples.cluster`` places nodes on servers, runs a remote node's
shell over ssh (``RemoteMixin``), builds a link between two servers as a
tunnel (``RemoteSSHLink``: an Ethernet tap carried by ssh; ``RemoteGRELink``:
gretap) and all else as on one machine. This module adds what a fabric
of P4 switches and RoCE agents needs on top, nothing of its own for the
network itself:

- ``ClusterServer``: one machine, reached over one shared ssh connection
  (ControlMaster) that Mininet's node shells reuse; files put and pulled,
  a local port forwarded to a switch's P4Runtime server, which keeps
  listening on the remote 127.0.0.1 only, and, in virtual time, the
  runner's coordinator socket forwarded the other way: the window barrier
  spans the servers over the connection the run already holds
  (``forward_socket``; ``Cluster.vtime_socket_of``: the path a node's
  processes join by).
- ``RemoteProcess`` (``remote_process.py``): a switch or agent started on a
  remote server, its config carried by the session that starts it
  (``remote_exec``); signals travel as ``kill`` over ssh.
- ``Cluster``: the servers of a run, the placement of its nodes, and a
  mirror that pulls what the runner reads while the run goes (agents'
  ready and progress files, switch stats) unless the run directory is one
  filesystem all servers share; everything else is gathered at the end.
- Node and link classes (``cluster_nodes.cluster_classes``): the fabric's own switch
  and host with ``RemoteMixin``, and the tunnel links with this run's ssh options.

Every server runs the same checkout at the same path (``cd`` there, its
``.venv``); the run directory has the same path on each.
"""
from __future__ import annotations

# Deferred imports: Mininet (net.nodes, its cluster edition, cluster_nodes) only
# when a fabric is built: validating an experiment places its nodes here too.

import contextlib
import os
import secrets
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from functools import cached_property
from pathlib import Path

from emulator.errors import EnvironmentProblem, FabricEmuError
from emulator.lifeline import RUNNER_PID_ENV, set_pdeathsig
from emulator.net.remote_process import RemoteProcess
from emulator.rundir import RawDir
from emulator.schema.cluster import LOCAL, ClusterServerSpec, ClusterSpec
from emulator.schema.load import FieldError

CONNECT_TIMEOUT_S = 15.0
MIRROR_INTERVAL_S = 0.25
# What the runner reads while a run goes; the rest is gathered at the end.
LIVE_FILES = RawDir.LIVE
# Passed to remote processes: the runner's settings, never its identity.
_ENV_PREFIX = "FABRIC_EMU_"
# Where a remote server's processes reach the runner's virtual-time
# coordinator: a path of its own per run and server, in a directory every
# machine has (servers may share it, as the test rig's two do).
REMOTE_SOCKET_DIR = "/tmp"


def remote_vtime_socket(run_token: str, server: str) -> str:
    """Server ``server``'s end of the coordinator's forward in run ``run_token``."""
    return f"{REMOTE_SOCKET_DIR}/fabric-emu-vt-{run_token}-{server}.sock"


class ClusterServer:
    """One machine of the cluster, over one shared ssh connection.

        srv = ClusterServer(spec, ssh_options, control_dir).open()
        srv.run("uname -r").stdout
        proc = srv.spawn(module, [cfg], log, files=[cfg])   # cfg: the runner's, same path there
        port = srv.forward(50051)       # 127.0.0.1:port here -> 127.0.0.1:50051 there
        srv.close()
    """

    def __init__(self, spec: ClusterServerSpec, ssh_options: list[str], control_dir: Path):
        self.name, self.address, self.user = spec.name, spec.address, spec.user
        self.is_local = spec.address == LOCAL
        self.dest = f"{self.user}@{self.address}"
        self.control_path = str(Path(control_dir) / f"{self.name}.ssh")
        self.options = ["-o", "BatchMode=yes", *ssh_options]
        self.ssh = ["ssh", *self.options, "-o", f"ControlPath={self.control_path}"]
        self._master: subprocess.Popen | None = None
        self.shared_run_dir = False     # set by Cluster.open: the runner's dir is this one's
        self.forwarded_sockets: list[str] = []     # remote ends of forward_socket

    def open(self) -> "ClusterServer":
        if self.is_local:
            return self
        self._master = subprocess.Popen(
            ["ssh", *self.options, "-o", "ControlMaster=yes", "-o",
             f"ControlPath={self.control_path}", "-N", self.dest],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=set_pdeathsig)      # the connection, and all on it, dies with the runner
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while subprocess.run([*self.ssh, "-O", "check", self.dest],
                             capture_output=True).returncode != 0:
            if self._master.poll() is not None or time.monotonic() > deadline:
                err = self._master.stderr.read().decode(errors="replace").strip() \
                    if self._master.poll() is not None else "no answer"
                self.close()
                raise EnvironmentProblem(f"cluster server {self.name}: ssh {self.dest} failed: "
                                         f"{err or 'exit ' + str(self._master.returncode)}")
            time.sleep(0.05)
        return self

    def close(self) -> None:
        if self._master is not None:
            master, self._master = self._master, None
            subprocess.run([*self.ssh, "-O", "exit", self.dest], capture_output=True)
            try:
                master.wait(timeout=5)
            except subprocess.TimeoutExpired:
                master.kill()
                master.wait()

    # -------------------------------------------------------------- commands
    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run on this server in the runner's directory, with the
        runner's FABRIC_EMU_* settings (a local server: as it is)."""
        if self.is_local:
            return list(argv)
        env = [f"{k}={v}" for k, v in os.environ.items()
               if k.startswith(_ENV_PREFIX) and k != RUNNER_PID_ENV]
        remote = f"cd {shlex.quote(os.getcwd())} && exec env {shlex.join(env + list(argv))}"
        return [*self.ssh, self.dest, remote]

    def run(self, argv: list[str], input: bytes | None = None, timeout_s: float = 60.0,
            check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run(self.command(argv), input=input, capture_output=True,
                             timeout=timeout_s)
        if check and out.returncode != 0:
            raise FabricEmuError(f"cluster server {self.name}: {shlex.join(argv)} "
                                 f"exited {out.returncode}: {out.stderr.decode(errors='replace').strip()}")
        return out

    def check_gretap(self) -> None:
        """``link: gre`` needs the kernel's gretap (ip_gre) on every server:
        tried in a throwaway network namespace, where nothing is left; one
        line if it is missing (Mininet's link would fail mid-build, its
        interfaces gone under the starting fabric)."""
        out = self.run(["unshare", "--net", "ip", "link", "add", "fe-gre-probe", "type", "gretap",
                        "local", "127.0.0.1", "remote", "127.0.0.2"], check=False)
        if out.returncode != 0:
            why = " ".join(out.stderr.decode(errors="replace").split()) or f"exit {out.returncode}"
            raise EnvironmentProblem(f"cluster server {self.name}: its kernel cannot make the gretap "
                                     f"links that link: gre needs ({why}); say link: ssh")

    def pull(self, run_dir: Path, patterns: tuple[str, ...] | None = None) -> None:
        """This server's files of ``run_dir`` (those matching ``patterns``;
        all without) into the runner's ``run_dir``."""
        if self.is_local or self.shared_run_dir:
            return
        names = " ".join(patterns) if patterns else "*"
        script = (f"cd {shlex.quote(str(run_dir))} 2>/dev/null || exit 0; "
                  f"set -- $(ls -d {names} 2>/dev/null); [ $# -eq 0 ] || tar cf - \"$@\"")
        out = self.run(["sh", "-c", script], check=False, timeout_s=120)
        if out.returncode == 0 and out.stdout:
            subprocess.run(["tar", "xf", "-", "-C", str(run_dir)], input=out.stdout,
                           capture_output=True, check=False)

    def forward(self, remote_port: int) -> int:
        """A local port forwarded over the shared connection to this
        server's 127.0.0.1:``remote_port``."""
        from emulator.net.nodes import free_tcp_ports
        if self.is_local:
            return remote_port
        local_port = free_tcp_ports(1)[0]
        out = subprocess.run([*self.ssh, "-O", "forward", "-L",
                              f"127.0.0.1:{local_port}:127.0.0.1:{remote_port}", self.dest],
                             capture_output=True)
        if out.returncode != 0:
            raise FabricEmuError(f"cluster server {self.name}: forwarding port {remote_port} "
                                 f"failed: {out.stderr.decode(errors='replace').strip()}")
        return local_port

    def socket_forward_command(self, remote_path: str, local_path: str) -> list[str]:
        """The ssh command asking the shared connection to carry connections
        to ``remote_path`` on this server to the runner's ``local_path``."""
        return [*self.ssh, "-O", "forward", "-R", f"{remote_path}:{local_path}", self.dest]

    def forward_socket(self, remote_path: str, local_path: str) -> None:
        """Connections to the Unix socket ``remote_path`` on this server,
        carried over the shared connection to the runner's ``local_path``
        (its sshd's AllowStreamLocalForwarding, yes by default, must allow
        it). The remote file outlives the forward: ``remove_forwarded``."""
        if self.is_local:
            raise ValueError(f"cluster server {self.name} is the runner's: nothing to forward")
        out = subprocess.run(self.socket_forward_command(remote_path, local_path),
                             capture_output=True, timeout=CONNECT_TIMEOUT_S)
        if out.returncode != 0:
            why = " ".join(out.stderr.decode(errors="replace").split()) or f"exit {out.returncode}"
            raise EnvironmentProblem(
                f"cluster server {self.name}: forwarding virtual time's socket to {remote_path} "
                f"there failed: {why} (its sshd needs AllowStreamLocalForwarding yes; "
                "or say time: dilated)")
        self.forwarded_sockets.append(remote_path)

    def remove_forwarded(self, then: str = "") -> None:
        """The socket files ``forward_socket`` left on this server; ``then``:
        a shell command run after it in the same round trip."""
        paths, self.forwarded_sockets = self.forwarded_sockets, []
        if paths or then:
            rm = f"rm -f {shlex.join(paths)}; " if paths else ""
            self.run(["sh", "-c", rm + (then or "true")], check=False, timeout_s=60)

    def wait_ports(self, starting: list[tuple[int, object, str, Path]], timeout_s: float) -> None:
        """Until something listens on each of this server's 127.0.0.1 ports
        of ``starting`` (port, its process, what it is, its log): one probe
        there for all of them, not an ssh round trip each."""
        probe = ("import socket,sys,time\n"
                 "end=time.monotonic()+float(sys.argv[1])\n"
                 "todo=[int(p) for p in sys.argv[2:]]\n"
                 "while todo and time.monotonic()<end:\n"
                 "    for p in list(todo):\n"
                 "        try: socket.create_connection(('127.0.0.1',p),0.2).close(); todo.remove(p)\n"
                 "        except OSError: pass\n"
                 "    todo and time.sleep(0.05)\n"
                 "print(*todo)\n")
        ports = [str(port) for port, *_ in starting]
        out = self.run([sys.executable, "-c", probe, str(timeout_s), *ports], check=False,
                       timeout_s=timeout_s + 30)
        closed = out.stdout.decode().split() if out.returncode == 0 else ports
        for port, proc, what, log in starting:
            if str(port) in closed:
                state = ("exited" if proc.poll() is not None else "did not open its port")
                raise FabricEmuError(f"{what} on cluster server {self.name} {state} while "
                                     f"starting; see {log} there")

    def spawn(self, module: str, args: list[str], log_path: Path, *,
              netns_pid: int | None = None, stdin_pipe: bool = False,
              files: list[Path] = ()) -> RemoteProcess:
        """``python -m module args`` on this server (in Mininet node
        ``netns_pid``'s namespaces if given), logging to ``log_path`` there;
        ``files``, the runner's (its config), written to the same paths there
        first, unless the run directory is one both see."""
        puts = [] if self.shared_run_dir else [Path(f) for f in files]
        inner = [sys.executable, "-m", "emulator.net.remote_exec", str(log_path),
                 *(a for f in puts for a in ("--put", str(f))), "--", module, *map(str, args)]
        if netns_pid is not None:
            inner = ["mnexec", "-a", str(netns_pid), *inner]
        return RemoteProcess(self, inner, stdin_pipe, puts)


class Cluster:
    """The servers of one run and where its nodes are placed.

        cluster = Cluster(spec, fabric, run_dir).open()   # ssh connections up
        cluster.server_of("s1")                           # a ClusterServer
        ...
        cluster.gather(); cluster.close()
    """

    def __init__(self, spec: ClusterSpec, fabric, run_dir: Path, vtime_socket: str | None = None):
        """vtime_socket: the run keeps virtual time; its coordinator's socket
        here, which ``open`` forwards to every remote server."""
        self.spec, self.fabric, self.run_dir = spec, fabric, Path(run_dir)
        self.vtime_socket = vtime_socket
        self.run_token = secrets.token_hex(6)      # this run's remote socket paths
        self._control_dir = tempfile.mkdtemp(prefix="fabric-emu-ssh-")
        self.servers = {s.name: ClusterServer(s, spec.ssh_options, self._control_dir)
                        for s in spec.servers}
        self.placement = place(spec, fabric)
        self._mirror: threading.Thread | None = None
        self._stop = threading.Event()

    def open(self) -> "Cluster":
        try:
            for srv in self.servers.values():
                srv.open()
            if self.spec.link == "gre":
                for srv in self.servers.values():
                    srv.check_gretap()
            if self.vtime_socket is not None:      # first: a refusal leaves nothing there
                self._forward_vtime()
            marker = self.run_dir / ".runner"
            marker.write_text(f"{os.getpid()}-{time.time_ns()}")
            for srv in self.remote_servers():     # one round trip: is it ours? then make it
                out = srv.run(["sh", "-c", 'cat -- "$1" 2>/dev/null; exec mkdir -p -- "$2"', "sh",
                               str(marker), str(self.run_dir)])
                srv.shared_run_dir = out.stdout.decode() == marker.read_text()
        except BaseException:
            for srv in self.remote_servers():
                with contextlib.suppress(FabricEmuError, subprocess.TimeoutExpired, OSError):
                    srv.remove_forwarded()
            self.close()
            raise
        self._mirror = threading.Thread(target=self._mirror_loop, name="cluster-mirror", daemon=True)
        self._mirror.start()
        return self

    def vtime_sockets(self) -> dict[str, str | None]:
        """Server name -> the coordinator's socket as its processes reach it:
        the runner's own here, on a remote server a path of its own per run
        (``remote_vtime_socket``; ``open`` forwards it); None outside virtual time."""
        return {name: (self.vtime_socket if srv.is_local or self.vtime_socket is None
                       else remote_vtime_socket(self.run_token, name))
                for name, srv in self.servers.items()}

    def vtime_socket_of(self, node: str) -> str | None:
        """The coordinator's socket as the processes of ``node`` (a switch,
        a server or one of its NICs) reach it on their server."""
        return self.vtime_sockets()[self.server_of(node).name]

    def _forward_vtime(self) -> None:
        """Each remote server's end of the coordinator's socket, forwarded
        over its shared connection."""
        for name, path in self.vtime_sockets().items():
            if not self.servers[name].is_local:
                self.servers[name].forward_socket(path, self.vtime_socket)

    def remote_servers(self) -> list[ClusterServer]:
        return [s for s in self.servers.values() if not s.is_local]

    def server_of(self, node: str) -> ClusterServer:
        """The server of a switch, a server, or a NIC (its server's)."""
        if node not in self.placement:
            node = self.fabric.server_of(node).name
        return self.servers[self.placement[node]]

    def is_remote(self, node: str) -> bool:
        return not self.server_of(node).is_local

    def _mirror_loop(self) -> None:
        while not self._stop.wait(MIRROR_INTERVAL_S):
            for srv in self.remote_servers():
                try:
                    srv.pull(self.run_dir, LIVE_FILES)
                except (FabricEmuError, subprocess.TimeoutExpired, OSError):
                    pass           # the next round; a dead server shows in its processes

    def gather(self) -> None:
        """Every remote server's files of the run into the runner's run directory."""
        for srv in self.remote_servers():
            try:
                srv.pull(self.run_dir)
            except (FabricEmuError, subprocess.TimeoutExpired, OSError):
                pass

    def clean_remote(self) -> None:
        """Each remote server's part of this run, whatever is left of it:
        its processes, its switches' interfaces, and its copy of the run
        directory once gathered (not when it is the runner's own), and the
        socket file of virtual time's forward."""
        for srv in self.remote_servers():
            nodes = [n for n, s in self.placement.items() if s == srv.name]
            ifnames = [p.ifname for sw in self.fabric.switches() if sw.name in nodes
                       for p in self.fabric.ports(sw.name)]
            clean = shlex.join([sys.executable, "-m", "emulator.net.clean", str(self.run_dir),
                                ",".join(nodes), ",".join(ifnames)])
            if not srv.shared_run_dir:
                clean += f"; rm -rf {shlex.quote(str(self.run_dir))}"
            try:          # in one round trip
                srv.remove_forwarded(then=clean)
            except (subprocess.TimeoutExpired, OSError):
                pass

    # ---------------------------------------------------------- for Mininet
    @staticmethod
    def _mn_server(srv: ClusterServer) -> str:
        return LOCAL if srv.is_local else srv.name    # RemoteMixin: "localhost" is local

    def node_params(self, node: str) -> dict:
        """A node's server as ``RemoteMixin`` takes it; its ssh shares the
        server's connection."""
        srv = self.server_of(node)
        return {"server": self._mn_server(srv), "user": srv.user,
                "serverIP": "127.0.0.1" if srv.is_local else srv.address,
                "controlPath": False if srv.is_local else srv.control_path}

    def mininet_params(self) -> tuple[type, dict]:
        """``MininetCluster`` and its parameters: the servers, and a placer
        that is this run's placement (``place``)."""
        from mininet.examples.cluster import MininetCluster, Placer
        placement = {n: self._mn_server(self.servers[s]) for n, s in self.placement.items()}

        class RunPlacer(Placer):
            def place(self, node):
                return placement[node]

        servers = [self._mn_server(s) for s in self.servers.values()]
        return MininetCluster, {
            "servers": servers, "placement": RunPlacer, "precheck": False,
            "serverIP": {self._mn_server(s): "127.0.0.1" if s.is_local else s.address
                         for s in self.servers.values()},
            # the nodes' classes are the topology's (mininet_topo.fabric_topo)
            "link": self.classes[2]}

    @cached_property
    def classes(self):
        """(switch, host, link) classes of this run (``cluster_nodes.cluster_classes``)."""
        from emulator.net.cluster_nodes import cluster_classes
        return cluster_classes(self)

    def close(self) -> None:
        self._stop.set()
        if self._mirror is not None:
            self._mirror.join(timeout=10)
            self._mirror = None
        for srv in self.servers.values():
            srv.close()
        try:
            os.rmdir(self._control_dir)
        except OSError:
            pass


def place(spec: ClusterSpec, fabric) -> dict[str, str]:
    """node name -> server name for every switch and every server (Mininet
    host) of ``fabric``; a bad mapping raises ``FieldError`` naming the node."""
    names = [s.name for s in spec.servers]
    switches = [sw.name for sw in fabric.switches()]
    hosts = [srv.name for srv in fabric.servers()]
    leaf_of = {srv.name: fabric.host_leaf(srv.all_nics[0]).name for srv in fabric.servers()}
    out: dict[str, str] = {}
    if spec.placement == "pods":
        pods = fabric.pods
        if len(pods) < 2:
            raise FieldError("placement", "'pods' needs a fabric of 2 or more pods (3 tiers); "
                             "this one has 1: use switch-bin or name each switch's server")
        for k, pod in enumerate(pods):
            for sw in pod:
                out[sw.name] = names[k % len(names)]
        for i, sw in enumerate(fabric.superspines()):
            out[sw.name] = names[i % len(names)]
    elif spec.placement == "switch-bin":
        from mininet.examples.cluster import SwitchBinPlacer
        links = [(h, leaf_of[h]) for h in hosts]
        placer = SwitchBinPlacer(servers=names, nodes=switches + hosts, hosts=hosts,
                                 switches=switches, links=links)
        out = {n: placer.place(n) for n in switches + hosts}
    else:
        known = set(switches) | set(hosts) | {n.name for n in fabric.hosts()}
        for node, server in spec.placement.items():
            if node not in known:
                raise FieldError(f"placement.{node}", "no such switch or server in the topology")
            # a NIC's name places its server
            out[fabric.server_of(node).name if node not in switches and node not in hosts
                else node] = server
        missing = [sw for sw in switches if sw not in out]
        if missing:
            raise FieldError("placement", f"switch {missing[0]} has no server "
                             f"({len(missing)} unplaced): name every switch's")
    for h in hosts:
        out.setdefault(h, out[leaf_of[h]])
    return out
