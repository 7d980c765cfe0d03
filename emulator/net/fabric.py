"""The running fabric: Mininet topology (what), node classes (how), lifecycle (when).

``FabricTopo`` turns a ``Fabric`` (the topology file) into a Mininet Topo;
``FabricNet`` builds it, starts every switch, has the controller program
them over P4Runtime, and tears everything down on exit, on error, and on
SIGINT/SIGTERM, so that no namespace, veth or process outlives a run. It
holds the run lock (``runlock``: one fabric at a time) and, should its
process be SIGKILLed, its watchdog (``watchdog``) removes the fabric.
``check_alive`` tells a run whether the fabric is still whole.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from emulator.errors import EnvironmentProblem, FabricEmuError, RunAborted
from emulator.net.wake_latency import WakeLatencyRequest
from emulator.topo import Fabric


# How late a switch or NIC process may react (wake-up latency of a Python
# process on a busy machine): PFC headroom must absorb what arrives meanwhile.
REACTION_WALL_NS = 2_000_000


def environment_problem() -> str | None:
    """Why this machine cannot build a fabric, in one line (None: it can)."""
    if os.geteuid() != 0:
        return "building a fabric needs root (network namespaces, veths): run as root or with sudo"
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return ("Mininet's Python module is not importable: run 'make setup' "
                "(apt-get install mininet; the venv sees Debian's python3 packages)")
    if shutil.which("mnexec") is None:
        return "mnexec is not on PATH: apt-get install mininet"
    return None


def check_environment() -> None:
    """Fail early, in one line, when this machine cannot build a fabric."""
    problem = environment_problem()
    if problem:
        raise EnvironmentProblem(problem)


def dilated_link(fabric: Fabric, node: str, port_no: int, dilation: float) -> tuple[int, int]:
    """(rate_bps, delay_ns) that the link behind a port runs at, dilated."""
    link = fabric.links[fabric.port(node, port_no).link_index]
    return max(1, int(link.rate_bps / dilation)), int(link.delay_ns * dilation)


TARGETS = ("embedded", "bmv2")


def ib_link_config(dilation: float) -> dict:
    """An InfiniBand switch's link layer (``IbLinkConfig``): the schema's
    buffers and update thresholds, its update period dilated (wall ns)."""
    from emulator.schema.switch import IbLinkConfig
    cfg = IbLinkConfig()
    return {**cfg.model_dump(), "update_period_ns": int(cfg.update_period_ns * dilation)}


def _switch_params(fabric: Fabric, name: str, target: str, switch_options: dict,
                   ports: dict[str, tuple[int, int]], forkserver=None, switch_cls=None) -> dict:
    """Mininet addSwitch parameters of one switch on a target; ports: name ->
    (gRPC port, Thrift port)."""
    from emulator.net.bmv2 import Bmv2Switch
    from emulator.net.nodes import EmbeddedP4Switch
    common = {"device_id": fabric.device_id(name), "grpc_port": ports[name][0],
              "port_links": {p.port_no: dilated_link(fabric, name, p.port_no, switch_options["dilation"])
                             for p in fabric.ports(name)}}
    if target == "bmv2":
        return {**common, "cls": Bmv2Switch, "thrift_port": ports[name][1],
                "options": {k: switch_options[k] for k in ("buffer_bytes", "mtu_frame_bytes", "pcap",
                                                            "lossless_priorities")}}
    options = {k: v for k, v in switch_options.items()
               if k not in ("dilation", "mtu_frame_bytes", "lossless_priorities")}
    if fabric.link_layer == "infiniband":
        options["ib"] = ib_link_config(switch_options["dilation"])
    return {**common, "cls": switch_cls or EmbeddedP4Switch, "forkserver": forkserver,
            "options": {**options, "router_mac": fabric.addresses.router_mac(name),
                        "seed": fabric.device_id(name)}}


def _mininet_topo(fabric: Fabric, dilation: float, run_dir: Path, switch_options: dict,
                  ports: dict[str, tuple[int, int]], target: str = "embedded", forkserver=None,
                  cluster=None, packs: dict[str, str] | None = None):
    """cluster: an ``emulator.net.cluster.Cluster``: its node classes, and
    each node's server as Mininet's cluster edition takes it. packs: switch
    -> the process it shares (embedded target)."""
    from mininet.topo import Topo

    from emulator.net.nodes import RoceHost
    switch_cls, host_cls = None, RoceHost
    if cluster is not None:
        switch_cls, host_cls, _ = cluster.classes

    def where(node: str) -> dict:
        return cluster.node_params(node) if cluster is not None else {}

    class FabricTopo(Topo):
        def build(self):
            for sw in fabric.switches():
                pack = {"pack": packs[sw.name]} if packs and sw.name in packs else {}
                self.addSwitch(sw.name, run_dir=str(run_dir), **where(sw.name), **pack,
                               **_switch_params(fabric, sw.name, target,
                                                {**switch_options, "dilation": dilation}, ports,
                                                forkserver, switch_cls))
            _add_servers(self, fabric, host_cls, where)
            _add_links(self, fabric)

    return FabricTopo()


def _add_servers(topo, fabric: Fabric, host_cls, where=lambda node: {}) -> None:
    """One Mininet host (namespace) per server, holding all its NICs'
    interfaces; NIC 0's address and gateway are its defaults."""
    plan = fabric.addresses
    for server in fabric.servers():
        nics = [{"ifname": plan.host_ifname(n), "cidr": plan.host_cidr(n),
                 "mac": plan.host_mac(n), "gateway_ip": plan.host_gateway(n),
                 "gateway_mac": plan.gateway_mac(n)} for n in server.all_nics]
        topo.addHost(server.name, cls=host_cls, ip=nics[0]["cidr"], mac=nics[0]["mac"],
                     defaultRoute=f"via {nics[0]['gateway_ip']}", nics=nics, **where(server.name))


def _add_links(topo, fabric: Fabric) -> None:
    for link in fabric.links:
        # Switch ports are Mininet's port numbers (from 1). A host link's
        # lower end is a NIC: in Mininet, its server's port k for its k-th
        # NIC (NIC 0 on port 0, as h1-eth0 always was).
        a, a_port = link.a, link.a_port
        if not fabric.node(a).is_switch:
            server = fabric.server_of(a)
            a, a_port = server.name, server.all_nics.index(link.a)
        topo.addLink(a, link.b, port1=a_port, port2=link.b_port,
                     intfName1=fabric.port(link.a, link.a_port).ifname,
                     intfName2=fabric.port(link.b, link.b_port).ifname)


def exit_phrase(returncode: int) -> str:
    """How a process ended, for one line: "exited with status 1", "was killed by SIGKILL"."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


class FabricNet:
    """Context manager: the fabric up and programmed inside, nothing left after."""

    def __init__(self, fabric: Fabric, run_dir: str | Path, dilation: float = 1.0,
                 buffer_bytes: int = 4_000_000, program: bool = True, qos=None,
                 mtu_bytes: int = 1024, sample_interval_ns: int = 0, pcap: bool = False,
                 target: str = "embedded", cluster=None, ib_cc=None,
                 switches_per_process: int | str = "auto"):
        """qos: an ``emulator.control.qos.QosSpec`` to install (None: no traffic
        classes: everything lossy in priority 0). sample_interval_ns: wall
        period of the switches' queue-depth samples (0: none; embedded
        target). target: "embedded" (emulator/dataplane) or "bmv2"
        (simple_switch_grpc, see emulator/net/bmv2.py). cluster: an
        ``emulator.schema.cluster.ClusterSpec``: the fabric spread over its
        servers (``emulator/net/cluster.py``; embedded target).
        switches_per_process: embedded switches per process ("auto" or N:
        ``emulator/net/packing.py``; a cluster's and InfiniBand's: one each)."""
        if target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, not {target!r}")
        self.target = target
        self.fabric = fabric
        self.run_dir = Path(run_dir)
        self.dilation = dilation
        self.buffer_bytes = buffer_bytes
        self.program = program
        self.qos = qos
        self.ib_cc = ib_cc         # an InfiniBand fabric's congestion control (schema.ib_cc)
        self.mtu_bytes = mtu_bytes
        self.sample_interval_ns = sample_interval_ns
        self.pcap = pcap
        self.net = None
        self.controller = None
        self._old_handlers: dict = {}
        self._lock = None          # the run lock, when this FabricNet took it
        self._teardown_thread: threading.Thread | None = None
        self._teardown_error: BaseException | None = None
        self._watchdog = None
        self._wake_latency = WakeLatencyRequest()
        self.forkserver = None     # forks switches and agents warm (emulator/net/forkserver.py)
        if cluster is not None and target != "embedded":
            raise ValueError("a cluster runs the embedded target")
        if fabric.link_layer == "infiniband" and target != "embedded":
            raise ValueError(f"{fabric.name}: link_layer infiniband runs on the embedded target: "
                             "BMv2 cannot express credit-based flow control")
        self.cluster_spec = cluster
        self.cluster = None        # emulator.net.cluster.Cluster, while up
        self.switches_per_process = switches_per_process

    # -------------------------------------------------------------- lifecycle
    def start(self) -> "FabricNet":
        check_environment()
        from mininet.log import setLogLevel

        from emulator.net.clean import fabric_interfaces
        from emulator.net.runlock import RunLock
        from emulator.net.watchdog import Watchdog

        setLogLevel("error")
        if RunLock.held() is None:     # not taken by the CLI for a whole run or sweep
            self._lock = RunLock.acquire(self.fabric.name, self.run_dir)
        try:
            self._check_interfaces_free(fabric_interfaces())
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._watchdog = Watchdog(self.run_dir, [n.name for n in self.fabric.servers()]
                                      + [sw.name for sw in self.fabric.switches()],
                                      self.switch_interfaces(), keep_fds=(RunLock.held().fd,))
        except BaseException:
            self._release_lock()
            raise
        # switches and NICs wake on time (emulator/net/wake_latency.py); until the teardown
        self._wake_latency.hold()
        try:
            self._build()
        except Exception as e:
            broken = self._broken("while the fabric was starting")
            self.stop()
            if broken and not isinstance(e, FabricEmuError):   # e is a symptom of it
                raise RunAborted(broken) from e
            raise
        except BaseException:
            self.stop()
            raise
        return self

    def _switch_packs(self) -> dict[str, str]:
        """switch -> the name of the process it shares (``dataplane/pack.py``);
        a switch not named runs alone. Embedded switches (Ethernet or
        InfiniBand) on one machine only."""
        if self.target != "embedded" or self.cluster_spec is not None:
            return {}
        from emulator.net.packing import switch_packs
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

    def _check_interfaces_free(self, existing: list[str]) -> None:
        taken = sorted(set(existing) & {p.ifname for n in self.fabric.nodes
                                        for p in self.fabric.ports(n.name)})
        if taken:
            raise EnvironmentProblem(
                f"interface {taken[0]} already exists ({len(taken)} of this fabric's): another "
                f"fabric is running, or a crashed run left it (fabric-emu clean removes leftovers)")

    def _build(self) -> None:
        from mininet.net import Mininet

        from emulator.control.controller import FabricController, program_p4info
        from emulator.net.nodes import free_tcp_ports
        device_config = b""
        if self.target == "bmv2":
            from emulator.net.bmv2 import bmv2_unavailable_reason
            from emulator.p4.build import bmv2_json
            reason = bmv2_unavailable_reason()
            if reason:
                raise EnvironmentProblem(f"target bmv2: {reason}")
            device_config = bmv2_json().read_bytes()
        self._trap_signals()
        from emulator.net.forkserver import for_run
        from emulator.net.lifeline import child_env
        # Its imports run while Mininet builds the namespaces and links (the
        # CLI started it even earlier: forkserver.prestart).
        self.forkserver = for_run(self.run_dir, child_env())
        from emulator.control.qos import mtu_frame_bytes
        # gRPC and Thrift port of every switch, all distinct.
        free = iter(free_tcp_ports(2 * len(self.fabric.switches())))
        ports = {sw.name: (next(free), next(free)) for sw in self.fabric.switches()}
        switch_options = {"buffer_bytes": self.buffer_bytes,
                          "sample_interval_ns": self.sample_interval_ns, "pcap": self.pcap,
                          "mtu_frame_bytes": mtu_frame_bytes(self.mtu_bytes),
                          "lossless_priorities": ((self.qos.roce_priority,)
                                                  if self.qos is not None and self.qos.pfc.enabled
                                                  else ())}
        net_cls, net_params = Mininet, {}
        if self.cluster_spec is not None:
            from emulator.net.cluster import Cluster
            self.cluster = Cluster(self.cluster_spec, self.fabric, self.run_dir).open()
            net_cls, net_params = self.cluster.mininet_params()
        topo = _mininet_topo(self.fabric, self.dilation, self.run_dir, switch_options, ports,
                             self.target, self.forkserver, self.cluster, self._switch_packs())
        self.net = net_cls(topo=topo, controller=None, autoSetMacs=False, build=False,
                           waitConnected=False, **net_params)
        self.net.build()
        self._quiet_ipv6()
        self.net.start()
        if self.program:
            self.controller = FabricController(
                self.fabric, {sw.name: (self.switch(sw.name).grpc_address, self.fabric.device_id(sw.name))
                              for sw in self.fabric.switches()},
                p4info=program_p4info(self.fabric), ib_cc=self.ib_cc,
                device_config=device_config, qos=self.qos, mtu_bytes=self.mtu_bytes,
                reaction_fabric_ns=int(REACTION_WALL_NS / self.dilation), dilation=self.dilation)
            self.controller.connect()
            self.controller.install()

    def _quiet_ipv6(self) -> None:
        """Keep the kernel's IPv6 chatter (DAD, MLD, router solicitations) off
        the fabric: every switch interface, in one sysctl, before any switch
        starts -- a switch started first would otherwise receive what its
        neighbours' interfaces sent until theirs started (pipeline drops a
        real fabric would not count). Hosts turn IPv6 off in their namespace."""
        def keys(node) -> list[str]:
            return [f"net.ipv6.conf.{i.name}.disable_ipv6=1" for i in node.intfList() if i.name != "lo"]
        local = [k for sw in self._local_switches() for k in keys(self.net.get(sw))]
        if local:
            subprocess.run(["sysctl", "-qw", *local], check=False, capture_output=True)
        for sw in {s.name for s in self.fabric.switches()} - set(self._local_switches()):
            node = self.net.get(sw)          # on another server of a cluster: there
            node.cmd("sysctl -qw " + " ".join(keys(node)))

    def stop(self) -> None:
        """Tear everything down (idempotent); joins a teardown started by
        ``teardown_in_background`` and raises what it raised."""
        try:
            if self._teardown_thread is not None:
                thread, self._teardown_thread = self._teardown_thread, None
                thread.join()
            self._teardown()
            if self._teardown_error is not None:
                error, self._teardown_error = self._teardown_error, None
                raise error
        finally:
            self._restore_signals()      # the main thread's: never in the teardown thread

    def teardown_in_background(self) -> None:
        """Stop the switches now (each writes its stats.json and closes its raw
        logs: what a run's results read), then delete the links, end the
        shells and the fork server in a thread while the caller writes the
        results; ``stop`` (the context's exit) joins it. A cluster tears down
        in order, here, before the caller reads the results: the remote
        agents' results, stats and logs come back with it (switches stop,
        then every server's files are gathered; the mirror that copies
        results while the run goes may be a quarter second behind)."""
        if self.net is None or self._teardown_thread is not None:
            return
        if self.cluster is not None:
            try:
                self._teardown()
            except Exception as e:            # raised by stop(), as the thread's would be
                self._teardown_error = e
            return
        self._stop_switches(self.net)

        def teardown():
            try:
                self._teardown()
            except BaseException as e:    # raised by stop(), in the main thread
                self._teardown_error = e
        self._teardown_thread = threading.Thread(target=teardown, name="fabric-teardown")
        self._teardown_thread.start()

    @staticmethod
    def _stop_switches(net) -> None:
        """All switch processes at once (a stopped one is left as it is)."""
        from emulator.net.nodes import stop_processes
        stop_processes([getattr(sw, "proc", None) for sw in net.switches])

    def _teardown(self) -> None:
        from emulator.net.clean import delete_interfaces, kill_processes, run_processes
        try:
            if self.controller is not None:
                controller, self.controller = self.controller, None
                try:
                    controller.close()
                except Exception:     # a dead switch's channel: nothing to close
                    pass
            if self.net is not None:
                net, self.net = self.net, None
                try:
                    # Switches first, all at once: each writes its stats and
                    # closes its logs while its ports still exist (Mininet
                    # deletes the links before it stops the switches).
                    self._stop_switches(net)
                    if self.cluster is not None:     # their stats, logs, results: here
                        self.cluster.gather()
                    if self._dead_shell(net) is None:
                        if self.cluster is None:
                            # Every link in one `ip -batch` (each has a switch end in
                            # this namespace): Mininet deletes them one shell round
                            # trip at a time, ~27 ms each (1.7 s for 32 hosts).
                            delete_interfaces(self.switch_interfaces())
                            net.links = []
                        net.stop()
                    else:
                        # Taken down under us (clean --force): Mininet would wait
                        # forever on dead shells; end what is left directly.
                        self._stop_broken(net)
                finally:
                    kill_processes(lambda: run_processes(
                        str(self.run_dir), [n.name for n in net.hosts + net.switches]))
                    delete_interfaces(self.switch_interfaces())
        finally:
            if self.cluster is not None:
                cluster, self.cluster = self.cluster, None
                try:
                    cluster.clean_remote()
                finally:
                    cluster.close()
            if self.forkserver is not None:
                forkserver, self.forkserver = self.forkserver, None
                forkserver.close()
            if self._watchdog is not None:
                self._watchdog.disarm()
                self._watchdog = None
            self._wake_latency.release()
            self._release_lock()

    @staticmethod
    def _dead_shell(net):
        """A node whose Mininet shell has ended (``clean`` kills them), or None."""
        return next((n for n in net.hosts + net.switches
                     if n.shell is None or n.shell.poll() is not None), None)

    @staticmethod
    def _stop_broken(net) -> None:
        from emulator.net.nodes import stop_process
        for sw in net.switches:
            stop_process(getattr(sw, "proc", None))
        for node in net.hosts + net.switches:
            if node.shell is not None and node.shell.poll() is None:
                os.killpg(node.shell.pid, signal.SIGHUP)
            node.cleanup()

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _local_switches(self) -> list[str]:
        """The switches on this machine (all but a cluster's remote ones)."""
        return [sw.name for sw in self.fabric.switches()
                if self.cluster is None or not self.cluster.is_remote(sw.name)]

    def switch_interfaces(self) -> list[str]:
        """The switches' ports: the fabric's interfaces in the root namespace
        (every link has a switch end) of this machine."""
        return [p.ifname for sw in self._local_switches() for p in self.fabric.ports(sw)]

    def check_alive(self) -> None:
        """Raise ``RunAborted`` (one line: what, and its log) if a switch
        process has exited or a fabric interface has gone."""
        broken = self._broken("mid-run")
        if broken:
            raise RunAborted(broken)

    def _broken(self, when: str) -> str | None:
        """What of the fabric died ``when``: a switch (and its log), a node
        shell, an interface; None if it is whole."""
        if self.net is None:
            return None
        for sw in self.fabric.switches():
            node = self.net.get(sw.name)
            proc = getattr(node, "proc", None)
            if proc is not None and proc.poll() is not None:
                return (f"switch {sw.name} {exit_phrase(proc.returncode)} {when} "
                        f"(its log: {node.log_path})")
        dead = self._dead_shell(self.net)
        if dead is not None:
            return (f"node {dead.name}'s Mininet shell {exit_phrase(dead.shell.returncode) if dead.shell else 'is gone'} "
                    f"{when}: the fabric was taken down under the run")
        gone = [n for n in self.switch_interfaces() if not os.path.exists(f"/sys/class/net/{n}")]
        if gone:
            return (f"interface {gone[0]} vanished {when} ({len(gone)} of the fabric's): "
                    f"the fabric was taken down under the run")
        return None

    def __enter__(self) -> "FabricNet":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

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

    def spawn(self, node: str, module: str, args: list[str], log_path: Path, *,
              stdin_pipe: bool = False):
        """``python -m module args`` in ``node``'s namespace (a host, or the
        server holding a NIC), forked warm by the fork server; a
        ``subprocess.Popen``-like handle (``ForkedProcess``)."""
        host = self.host(node)
        if self.cluster is not None and self.cluster.is_remote(host.name):
            srv = self.cluster.server_of(host.name)
            for a in args:          # its config: written here, read there
                if Path(a).is_file():
                    srv.put(Path(a))
            return srv.spawn(module, args, log_path, netns_pid=host.pid, stdin_pipe=stdin_pipe)
        return self.forkserver.spawn(module, args, log_path, netns_pid=host.pid,
                                     stdin_pipe=stdin_pipe)

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

    # ------------------------------------------------------------- signals
    def _trap_signals(self) -> None:
        """SIGINT/SIGTERM/SIGHUP unwind like Ctrl-C, so finally-blocks tear down
        the fabric. SIGINT too: a process started in the background by a shell
        without job control (make, CI scripts) inherits SIGINT ignored, and
        Python then installs no Ctrl-C handler -- ``kill -INT`` must still stop
        the run."""
        def interrupt(signum, frame):
            raise KeyboardInterrupt(f"signal {signum}")
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            try:
                self._old_handlers[sig] = signal.signal(sig, interrupt)
            except ValueError:  # not the main thread: leave signals alone
                pass

    def _restore_signals(self) -> None:
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers.clear()
