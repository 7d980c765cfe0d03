"""The running fabric's lifecycle: up and programmed inside, nothing left after.

``FabricNet`` builds the Mininet topology (``mininet_topo.py``), starts
every switch, has the controller program them over P4Runtime, and tears
everything down on exit, on error, and on SIGINT/SIGTERM, so that no
namespace, veth or process outlives a run. It holds the run lock
(``runlock``: one fabric at a time) and, should its process be SIGKILLed,
its watchdog (``watchdog``) removes the fabric. What a run does with the
fabric while it is up -- its nodes, agents, switch stats -- is
``fabric_nodes.py``; whether it is still whole (``check_alive``),
``fabric_health.py``; whether this machine can build one at all,
``environment.py``. The functions of those modules that callers import
with ``FabricNet`` are importable from here too (``__all__``);
``check_environment`` is looked up, and so patched, in ``environment``.
"""
from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

from mininet.log import setLogLevel

from emulator.errors import EnvironmentProblem, FabricEmuError, RunAborted
from emulator.lifeline import child_env
from emulator.net import environment
from emulator.net.clean import delete_interfaces, fabric_interfaces, kill_processes, run_processes
from emulator.net.cluster import Cluster
from emulator.net.environment import check_environment, check_interfaces_free, environment_problem
from emulator.net.fabric_health import FabricHealth, exit_phrase
from emulator.net.fabric_nodes import FabricNodes
from emulator.net.forkserver import for_run
from emulator.net.management import (
    GNMI_PORT, P4RUNTIME_PORT, attach_switches, configure_management, management_nodes,
)
from emulator.net.mgmt_relay import ManagementRelay
from emulator.net.mininet_topo import dilated_link, fabric_topo, ib_link_config
from emulator.net.nodes import free_tcp_ports
from emulator.net.runlock import RunLock
from emulator.net.veths import BatchedMininet
from emulator.net.wake_latency import WakeLatencyRequest
from emulator.net.watchdog import Watchdog
from emulator.schema.qos import mtu_frame_bytes
from emulator.vtime.trailer import TRAILER_BYTES
from emulator.wire import ETH_HDR_BYTES, INT_MAX_HOPS, int_bytes
from emulator.topo import Fabric
from emulator.topo.addressing import MGMT_HOST

__all__ = ["REACTION_WALL_NS", "TARGETS", "FabricNet", "check_environment", "dilated_link",
           "environment_problem", "exit_phrase", "ib_link_config"]


# How late a switch or NIC process may react (wake-up latency of a Python
# process on a busy machine): PFC headroom must absorb what arrives meanwhile.
REACTION_WALL_NS = 2_000_000


TARGETS = ("embedded", "bmv2")


DEFAULT_MTU_BYTES_VETH = 1500     # a veth's MTU as created
JUMBO_MTU_BYTES = 9000


class FabricNet(FabricNodes, FabricHealth):
    """Context manager: the fabric up and programmed inside, nothing left after."""

    def __init__(self, fabric: Fabric, run_dir: str | Path, dilation: float = 1.0,
                 buffer_bytes: int = 4_000_000, program: bool = True, qos=None,
                 mtu_bytes: int = 1024, sample_interval_ns: int = 0, pcap: bool = False,
                 target: str = "embedded", cluster=None, ib_cc=None,
                 switches_per_process: int | str = "auto", vtime=None, link_faults=None,
                 port_rx_down=None, reroute_reaction_ns: int | None = None, switch_reboots=None,
                 pfc_watchdog=None):
        """qos: an ``emulator.control.qos.QosSpec`` to install (None: no traffic
        classes: everything lossy in priority 0). sample_interval_ns: wall
        period of the switches' queue-depth samples (0: none; embedded
        target). target: "embedded" (emulator/dataplane) or "bmv2"
        (simple_switch_grpc, see emulator/net/bmv2.py). cluster: an
        ``emulator.schema.cluster.ClusterSpec``: the fabric spread over its
        servers (``emulator/net/cluster.py``; embedded target).
        switches_per_process: embedded switches per process ("auto" or N:
        ``emulator/net/packing.py``; a cluster's and InfiniBand's: one each).
        vtime: the run is in virtual time: its ``vtime.Coordinator``, whose
        socket every switch and agent process joins (``emulator.vtime``).
        link_faults: (switch, port_no) -> the scripted faults that port
        applies as its link's sender (``schema.faults.EndFaults``; embedded);
        port_rx_down: (switch, port_no) -> when the link into it is down
        (its reports to the controller, its gNMI oper-status);
        reroute_reaction_ns: the controller reroutes around dead links,
        its writes taking effect this long after a port reports
        (``control/reroute.py``; None: it does not); switch_reboots:
        switch -> when it is down (a modelled reboot);
        pfc_watchdog: every switch's ``schema.switch.PfcWatchdogConfig``
        (None: off; embedded)."""
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
        if fabric.management and (target != "embedded" or cluster is not None):
            raise ValueError(f"{fabric.name}: management networks run on the embedded target, "
                             "on one machine")
        self.relay = None          # the management host's connections (net/mgmt_relay.py), while up
        self.cluster_spec = cluster
        self.cluster = None        # emulator.net.cluster.Cluster, while up
        self.switches_per_process = switches_per_process
        if vtime is not None and target != "embedded":
            raise ValueError("virtual time runs the embedded target")
        self.vtime = vtime
        self.vtime_socket = vtime.path if vtime is not None else None
        self.link_faults = link_faults or {}
        self.port_rx_down = port_rx_down or {}
        self.reroute_reaction_ns = reroute_reaction_ns
        self.switch_reboots = switch_reboots or {}
        self.pfc_watchdog = pfc_watchdog

    # -------------------------------------------------------------- lifecycle
    def start(self) -> "FabricNet":
        environment.check_environment()

        setLogLevel("error")
        if RunLock.held() is None:     # not taken by the CLI for a whole run or sweep
            self._lock = RunLock.acquire(self.fabric.name, self.run_dir)
        try:
            check_interfaces_free(self.fabric, fabric_interfaces())
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._watchdog = Watchdog(self.run_dir, [n.name for n in self.fabric.servers()]
                                      + [sw.name for sw in self.fabric.switches()]
                                      + management_nodes(self.fabric),
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

    def _build(self) -> None:
        device_config = b""
        if self.target == "bmv2":
            # deferred: the BMv2 target's parts only where it is asked for
            from emulator.net.bmv2 import bmv2_unavailable_reason
            from emulator.p4.build import bmv2_json
            reason = bmv2_unavailable_reason()
            if reason:
                raise EnvironmentProblem(f"target bmv2: {reason}")
            device_config = bmv2_json().read_bytes()
        self._trap_signals()
        # Its imports run while Mininet builds the namespaces and links (the
        # CLI started it even earlier: emulator.prestart).
        self.forkserver = for_run(self.run_dir, child_env())
        # gRPC and Thrift (BMv2) or gNMI (embedded) port of every switch, all distinct.
        free = iter(free_tcp_ports(2 * len(self.fabric.switches())))
        ports = {sw.name: (next(free), next(free)) for sw in self.fabric.switches()}
        if self.fabric.management_net("out_of_band") is not None:    # a namespace each
            ports = {sw.name: (P4RUNTIME_PORT, GNMI_PORT) for sw in self.fabric.switches()}
        switch_options = {"buffer_bytes": self.buffer_bytes,
                          "sample_interval_ns": self.sample_interval_ns, "pcap": self.pcap,
                          "mtu_frame_bytes": mtu_frame_bytes(self.mtu_bytes),
                          "lossless_priorities": ((self.qos.roce_priority,)
                                                  if self.qos is not None and self.qos.pfc.enabled
                                                  else ())}
        if self.link_faults:
            switch_options["link_faults"] = self.link_faults
        if self.port_rx_down:
            switch_options["port_rx_down"] = self.port_rx_down
        if self.switch_reboots:
            switch_options["switch_reboots"] = self.switch_reboots
        if self.pfc_watchdog is not None:
            switch_options["pfc_watchdog"] = self.pfc_watchdog
        # One ``ip -batch`` makes every veth (``veths.py``); a cluster's links are Mininet's
        net_cls, net_params = BatchedMininet, {"mtu_bytes": self._jumbo_mtu()}
        if self.cluster_spec is not None:
            self.cluster = Cluster(self.cluster_spec, self.fabric, self.run_dir,
                                   vtime_socket=self.vtime_socket).open()
            net_cls, net_params = self.cluster.mininet_params()
        topo = fabric_topo(self.fabric, self.dilation, self.run_dir, switch_options, ports,
                           self.target, self.forkserver, self.cluster, self._switch_packs(),
                           vtime_socket_of=self.vtime_socket_of)
        self.net = net_cls(topo=topo, controller=None, autoSetMacs=False, build=False,
                           waitConnected=False, **net_params)
        self.net.build()
        if self.fabric.management:
            configure_management(self.net, self.fabric, self.dilation)
            if self.fabric.management_net("out_of_band") is not None:
                self.relay = ManagementRelay(self.net.get(MGMT_HOST).pid)
                attach_switches(self.net, self.fabric, self.relay)
        self._quiet_ipv6()
        self._jumbo_frames()
        self.net.start()
        if self.program:
            # deferred: gRPC's import (~0.1 s) is not needed before the switches
            # are up (a runner imports it meanwhile: results.import_ahead)
            from emulator.control.controller import FabricController, program_p4info
            self.controller = FabricController(
                self.fabric, {sw.name: (self.switch(sw.name).grpc_address, self.fabric.device_id(sw.name))
                              for sw in self.fabric.switches()},
                p4info=program_p4info(self.fabric), ib_cc=self.ib_cc,
                device_config=device_config, qos=self.qos, mtu_bytes=self.mtu_bytes,
                reaction_fabric_ns=self.reaction_fabric_ns(), dilation=self.dilation)
            self.controller.connect()
            self.controller.install()
            if self.reroute_reaction_ns is not None:
                rerouter = self.controller.enable_reroute(self.reroute_reaction_ns)
                if self.vtime is not None:      # reports handled in fabric order, between windows
                    self.vtime.between_windows = rerouter.ordered()

    def bmv2_fault_player(self, ends: dict):
        """BMv2: the player of the link faults ``ends`` ((sender, receiver) ->
        ``EndFaults``) on the wall clock, to ``start`` at the agents' start:
        veth pairs down and up, degraded queues over Thrift
        (``net/bmv2_faults.py``); made before the traffic (it counts the
        downed links' frames from here). None: nothing to play."""
        from emulator.net.bmv2 import run_cli   # deferred: BMv2's parts only where it is asked for
        from emulator.net.bmv2_faults import (  # deferred: as bmv2
            Bmv2FaultPlayer, bmv2_fault_steps, downed_receivers, veth_rx_frames)
        steps = bmv2_fault_steps(self.fabric, ends, self.dilation, mtu_frame_bytes(self.mtu_bytes))
        if not steps:
            return None
        receivers = downed_receivers(self.fabric, ends)

        def rx_frames() -> dict[str, int]:
            return {d: veth_rx_frames(self.net.get(node).cmd(f"ip -s -j link show dev {ifname}"))
                    for d, (node, ifname) in receivers.items()}

        def execute(step) -> None:
            node = self.net.get(step.node)
            if step.via == "ip":
                for cmd in step.commands:
                    node.cmd(cmd)
            else:
                run_cli(node.thrift_port, list(step.commands), node.log_path)
        return Bmv2FaultPlayer(steps, execute, self.dilation, rx_frames=rx_frames)

    def vtime_socket_of(self, node: str) -> str | None:
        """The coordinator's socket as the processes of ``node`` (a switch, a
        server or a NIC) reach it: the runner's own, or on a cluster's
        remote server the end of its forward there; None outside virtual time."""
        if self.vtime_socket is None or self.cluster is None:
            return self.vtime_socket
        return self.cluster.vtime_socket_of(node)

    def reaction_fabric_ns(self) -> int:
        """How late a process may react to a frame, for PFC's headroom: its
        wake-up, ``REACTION_WALL_NS`` of wall time; none in virtual time,
        where each process handles each frame at its exact fabric time."""
        return 0 if self.vtime_socket is not None else int(REACTION_WALL_NS / self.dilation)

    def _jumbo_mtu(self) -> int | None:
        """Above a 1500-byte interface MTU, the largest frame of the run (an
        MTU frame with a full INT stack and the virtual-time trailer) would
        not fit a veth: every fabric interface gets ``JUMBO_MTU_BYTES``, as a
        RoCE fabric runs jumbo frames. Below it, None: nothing changes."""
        largest = mtu_frame_bytes(self.mtu_bytes) + int_bytes(INT_MAX_HOPS) + TRAILER_BYTES
        return JUMBO_MTU_BYTES if largest - ETH_HDR_BYTES > DEFAULT_MTU_BYTES_VETH else None

    def _jumbo_frames(self) -> None:
        """The jumbo MTU (``_jumbo_mtu``) on every interface of a net whose
        veths were not made with it (a cluster's)."""
        if self._jumbo_mtu() is None or isinstance(self.net, BatchedMininet):
            return
        for node in self.net.hosts + self.net.switches:   # one round trip a node
            intfs = [i.name for i in node.intfList() if i.name != "lo"]
            if intfs:
                node.cmd("; ".join(f"ip link set dev {i} mtu {JUMBO_MTU_BYTES}" for i in intfs))

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

    def _teardown(self) -> None:
        try:
            if self.net is not None:
                # The switches before the controller (as teardown_in_background
                # does): a P4Runtime client closed while its switch still serves
                # waits ~0.2 s for its stream's end, one switch after another.
                self._stop_switches(self.net)
            if self.controller is not None:
                controller, self.controller = self.controller, None
                try:
                    controller.close()
                except Exception:     # a dead switch's channel: nothing to close
                    pass
            if self.relay is not None:
                relay, self.relay = self.relay, None
                relay.close()
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
                            # gone with their links: a switch's stop would delete
                            # each port again, a round trip each
                            for sw in net.switches:
                                for intf in list(sw.intfs.values()):
                                    sw.delIntf(intf)
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

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> "FabricNet":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

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
