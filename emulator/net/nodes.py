"""Mininet node classes: how a fabric switch and a RoCE host run.

``EmbeddedP4Switch`` runs the embedded target (``python -m emulator.dataplane``)
in the root namespace on its veth ports, as ``simple_switch_grpc`` would run,
and serves P4Runtime on 127.0.0.1. ``RoceHost`` is a Mininet host whose
kernel stays out of the RoCE path: the host agent owns UDP 4791 through a
raw socket, so the kernel must neither answer it (ICMP port unreachable) nor
chatter on the fabric (IPv6 router solicitations).
"""
from __future__ import annotations

import ipaddress
import json
import signal
import socket
import subprocess
import time
from pathlib import Path

from mininet.node import Host, Switch

from emulator.errors import FabricEmuError
from emulator.netns import network_at
from emulator.rundir import RawDir
from emulator.schema.switch import (
    PortConfig, SwitchConfig, SwitchPackConfig, snapshot_request_path,
)

READY_TIMEOUT_S = 20.0
# Where an embedded switch's gNMI and P4Runtime servers listen without an
# out-of-band management network (with one: its management address).
GNMI_HOST = "127.0.0.1"


def free_tcp_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on every address (BMv2's Thrift
    server binds 0.0.0.0), held together while they are picked."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("0.0.0.0", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


TCP_POLL_S = 0.005


def wait_for_tcp(port: int, proc: subprocess.Popen, timeout_s: float, what: str, log: Path,
                 host: str = "127.0.0.1", netns_pid: int | None = None) -> None:
    """Until ``host:port`` accepts a connection (made from the namespace of
    process ``netns_pid``; None: this thread's)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise FabricEmuError(f"{what} exited with status {proc.returncode} while starting; "
                                 f"log {log}:\n{tail}")
        # A refused connect costs microseconds: poll often (a switch is up in
        # ~50 ms; a 50 ms poll added half of that to every bring-up).
        with network_at(f"/proc/{netns_pid}/ns/net" if netns_pid is not None else None):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        with s:
            s.settimeout(0.2)
            try:
                s.connect((host, port))
                return
            except OSError:
                pass
        time.sleep(TCP_POLL_S)
    raise FabricEmuError(f"{what} did not open {host}:{port} within {timeout_s:.0f} s; see {log}")


class StartedSideBySide:
    """A switch whose ``start`` only launches its process: Mininet calls
    ``start`` on every switch, then ``batchStartup`` once per switch class,
    which waits for each (``wait_started``). All processes start at once
    instead of one after the other's gRPC port opened."""

    @classmethod
    def batchStartup(cls, switches, **_):
        for sw in switches:
            sw.wait_started()
        return switches


class EmbeddedP4Switch(StartedSideBySide, Switch):
    """A fabric switch running the embedded Python target of fabric.p4."""

    def __init__(self, name, device_id: int, grpc_port: int, run_dir: str,
                 port_links: dict, options: dict, forkserver, pack: str | None = None,
                 port_faults: dict | None = None, gnmi_port: int | None = None,
                 port_rx_down: dict | None = None, mgmt_ip: str | None = None, **params):
        """port_links: port_no -> (rate_bps, delay_ns) of the link behind it, dilated;
        options: the rest of the switch process's config (buffer_bytes,
        sample_interval_ns, pcap, router_mac, seed; see emulator/dataplane/switch.py);
        forkserver: the run's ``emulator.net.forkserver.ForkServer``, which
        forks the switch process warm; pack: the name of the process this
        switch shares with the others of that name (``dataplane/pack.py``;
        None: a process of its own); port_faults: port_no -> the scripted
        faults of the link it sends on (``schema.faults.EndFaults``);
        gnmi_port: its gNMI server's port (None: none); port_rx_down:
        port_no -> when the direction into it is down (``DownInterval``s);
        mgmt_ip: its out-of-band management address, where its servers
        listen (None: 127.0.0.1; ``net/management.py`` sets ``mgmt_netns``,
        ``probe_netns_pid`` and ``relay`` before it starts)."""
        super().__init__(name, dpid=f"{device_id:x}", **params)
        self.forkserver = forkserver
        self.pack = pack
        self.device_id = device_id
        self.grpc_port = grpc_port
        self.run_dir = Path(run_dir)
        self.port_links = port_links
        self.port_faults = port_faults or {}
        self.gnmi_port = gnmi_port
        self.port_rx_down = port_rx_down or {}
        self.mgmt_ip = mgmt_ip
        self.mgmt_netns: str | None = None
        self.probe_netns_pid: int | None = None
        self.relay = None
        self.options = options
        self.proc: subprocess.Popen | None = None
        self.log_path = RawDir(run_dir).process_log(name)
        self.stats_path = RawDir(run_dir).stats(name)

    @property
    def listen_host(self) -> str:
        """Where its P4Runtime and gNMI servers listen."""
        return self.mgmt_ip or GNMI_HOST

    @property
    def grpc_address(self) -> str:
        """The gRPC target its P4Runtime server is reached at from here (with a
        management port: through the management host, ``net/mgmt_relay.py``)."""
        if self.relay is not None:
            return self.relay.target(self.mgmt_ip, self.grpc_port)
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def has_gnmi(self) -> bool:
        return self.gnmi_port is not None and not self.options.get("ib")

    @property
    def gnmi_address(self) -> str | None:
        """The gRPC target of its gNMI server, as ``grpc_address`` (None: it
        has none: an InfiniBand switch)."""
        if not self.has_gnmi:
            return None
        if self.relay is not None:
            return self.relay.target(self.mgmt_ip, self.gnmi_port)
        return f"{GNMI_HOST}:{self.gnmi_port}"

    def write_config(self) -> Path:
        """The switch process's config, ``RUN/<name>.switch.json``."""
        ports = []
        for port_no, intf in sorted(self.intfs.items()):
            if intf.name == "lo":
                continue
            rate_bps, delay_ns = self.port_links[port_no]
            ports.append(PortConfig(port_no=port_no, ifname=intf.name, rate_bps=rate_bps,
                                    delay_ns=delay_ns, faults=self.port_faults.get(port_no),
                                    rx_down=self.port_rx_down.get(port_no, [])))
        cfg_path = RawDir(self.run_dir).switch_config(self.name)
        SwitchConfig(name=self.name, device_id=self.device_id, grpc_port=self.grpc_port,
                     ports=ports, stats_path=str(self.stats_path),
                     gnmi_listen=(f"{self.listen_host}:{self.gnmi_port}"
                                  if self.has_gnmi else None),
                     grpc_host=self.listen_host, mgmt_netns=self.mgmt_netns,
                     **self.options).write(cfg_path)
        return cfg_path

    def start(self, controllers) -> None:
        # In the root namespace, like its ports. A pack's process starts in
        # batchStartup, once every member's config is written.
        config = self.write_config()
        if self.pack is None:
            module = "emulator.ib.switch" if self.options.get("ib") else "emulator.dataplane"
            self.proc = self.forkserver.spawn(module, [str(config)], self.log_path)

    @classmethod
    def batchStartup(cls, switches, **_):
        """Start each pack's process (its members share it and its log), then wait for all."""
        packs: dict[str, list] = {}
        for sw in switches:
            if sw.pack is not None:
                packs.setdefault(sw.pack, []).append(sw)
        for name, members in packs.items():
            raw = RawDir(members[0].run_dir)
            config = raw.pack_config(name)
            SwitchPackConfig(members=[str(RawDir(sw.run_dir).switch_config(sw.name))
                                      for sw in members],
                             vtime_socket=members[0].options.get("vtime_socket")).write(config)
            log = raw.process_log(name)
            module = ("emulator.ib.pack" if any(sw.options.get("ib") for sw in members)
                      else "emulator.dataplane.pack")
            proc = members[0].forkserver.spawn(module, [str(config)], log)
            for sw in members:
                sw.proc, sw.log_path = proc, log
        return super().batchStartup(switches)

    def wait_started(self) -> None:
        where = {"host": self.listen_host, "netns_pid": self.probe_netns_pid}
        wait_for_tcp(self.grpc_port, self.proc, READY_TIMEOUT_S, f"switch {self.name}", self.log_path,
                     **where)
        if self.has_gnmi:                      # bound just after P4Runtime's
            wait_for_tcp(self.gnmi_port, self.proc, READY_TIMEOUT_S, f"switch {self.name} (gNMI)",
                         self.log_path, **where)


    def request_snapshot(self) -> None:
        """Ask the switch process for its stats now (SIGUSR1; ``read_snapshot``
        collects them): it flushes its raw logs, writes ``stats_path`` whole
        and clears its counters and peaks."""
        self.stats_path.unlink(missing_ok=True)
        if self.pack is not None:           # which of the pack's switches (dataplane/pack.py)
            snapshot_request_path(self.stats_path).touch()
        self.proc.send_signal(signal.SIGUSR1)

    def read_snapshot(self, deadline: float) -> dict:
        """The stats a ``request_snapshot`` asked for, once written."""
        while not self.stats_path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise FabricEmuError(f"switch {self.name} wrote no stats snapshot; see {self.log_path}")
            time.sleep(0.005)
        return json.loads(self.stats_path.read_text())

    def stop(self, deleteIntfs=True) -> None:
        stop_process(self.proc)
        self.proc = None
        super().stop(deleteIntfs)


def stop_process(proc: subprocess.Popen | None, grace_s: float = 5.0) -> None:
    """SIGTERM a switch process, SIGKILL it if it has not exited within ``grace_s``."""
    stop_processes([proc], grace_s)


def stop_processes(procs: list[subprocess.Popen | None], grace_s: float = 5.0) -> None:
    """SIGTERM every one at once, then wait for each (SIGKILL after ``grace_s``)."""
    running = [p for p in procs if p is not None and p.poll() is None]
    for proc in running:
        proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in running:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class RoceHost(Host):
    """A host whose NIC is driven by the RoCE host agent."""

    def config(self, mac: str | None = None, ip: str | None = None, defaultRoute=None,  # noqa: N803
               lo: str = "up", gateway_ip: str | None = None, gateway_mac: str | None = None,
               nics: list[dict] | None = None, **_params):
        """What Mininet's ``Node.config`` sets (the default interface's mac
        and ip, defaultRoute, lo) and the NICs': nics, one dict per NIC
        interface, NIC 0 first -- ifname, cidr, mac, gateway_ip, gateway_mac
        -- for a server with several NICs; without it, gateway_ip/gateway_mac
        apply to the default interface. One shell round trip, its ``ip``
        commands one ``ip -batch`` (Mininet's own took ~8 round trips a host)."""
        default = self.defaultIntf()
        cidr = ip if ip is None or "/" in ip else f"{ip}/8"    # Node.setIP's default prefix
        addresses = [(default.name, mac, cidr)] if default is not None else []
        if nics is None and gateway_ip and gateway_mac and cidr:
            nics = [{"ifname": default.name, "cidr": cidr, "gateway_ip": gateway_ip,
                     "gateway_mac": gateway_mac}]
        nics = nics or []
        # mac and ip are NIC 0's (the default interface): the others'
        addresses += [(n["ifname"], n["mac"], n["cidr"]) for n in nics
                      if default is None or n["ifname"] != default.name]
        # Before any NIC comes up (IPv6 would talk on the fabric); the agent
        # reads RoCE frames from a raw socket, and the kernel drops them
        # before UDP would answer "port unreachable".
        shell = ["sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1",
                 "iptables -t raw -A PREROUTING -p udp --dport 4791 -j DROP"]
        if len(nics) > 1:
            # A reply leaves by the NIC owning its source address (the tables
            # below), not always the NIC the main table would pick for the
            # peer: check reverse paths loosely.
            shell.append("sysctl -qw net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.default.rp_filter=2")
        lines = [f"link set dev lo {lo}"] + self._address_lines(addresses)
        if defaultRoute is not None:      # as Node.setDefaultRoute takes it
            route = defaultRoute if isinstance(defaultRoute, str) and " " in defaultRoute \
                else f"dev {defaultRoute}"
            lines.append(f"route replace default {route}")
        lines += self._route_lines(nics)
        batch = " ".join(f"'{line}'" for line in lines)
        out = self.cmd("; ".join(shell) + f"; printf '%s\\n' {batch} | ip -batch -; echo rc=$?")
        if "rc=0" not in out.splitlines()[-1:]:
            raise FabricEmuError(f"host {self.name}: configuring its interfaces failed: "
                                 f"{out.strip()}")
        return {}

    def _address_lines(self, addresses: list[tuple]) -> list[str]:
        """(ifname, mac, cidr) of each addressed interface, set; then every
        interface up (``BatchedLink`` leaves a namespace's ends down). The
        ``Intf`` objects learn their MAC and address, as Mininet's setters do."""
        lines = []
        for ifname, mac, cidr in addresses:
            intf = self.intf(ifname)
            if mac:
                intf.mac = mac
                lines.append(f"link set dev {ifname} address {mac}")
            if cidr:
                intf.ip, intf.prefixLen = cidr.split("/")
                lines.append(f"addr replace {cidr} brd + dev {ifname}")
        return lines + [f"link set dev {i.name} up" for i in self.intfList() if i.name != "lo"]

    @staticmethod
    def _route_lines(nics: list[dict]) -> list[str]:
        # Every NIC's kernel route goes first: NICs sharing a leaf share its
        # network, and a route replaced for one would be another's to delete.
        lines, routed = [], set()
        for nic in nics:
            # Static ARP: the fabric routes, it does not answer ARP. Even
            # hosts of the same leaf subnet are reached through the leaf
            # (its /32 routes), as in a routed-to-the-host fabric.
            dev, network = nic["ifname"], ipaddress.ip_interface(nic["cidr"]).network
            lines.append(f"neigh replace {nic['gateway_ip']} lladdr {nic['gateway_mac']} dev {dev} "
                         "nud permanent")
            lines.append(f"route del {network} dev {dev} proto kernel")
        for i, nic in enumerate(nics):
            dev, gw = nic["ifname"], nic["gateway_ip"]
            addr = ipaddress.ip_interface(nic["cidr"])
            if addr.network not in routed:   # NICs sharing a leaf: the first one's route
                lines.append(f"route replace {addr.network} via {gw} dev {dev} onlink")
                routed.add(addr.network)
            if len(nics) > 1:
                # Source-based routing: traffic from NIC i's address leaves by
                # NIC i ("ping -I <its IP>"), as on a multi-rail GPU server.
                table = 100 + i
                lines.append(f"route replace default via {gw} dev {dev} onlink table {table}")
                lines.append(f"rule add from {addr.ip} table {table} priority {1000 + i}")
        return lines
