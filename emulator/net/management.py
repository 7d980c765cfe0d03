"""The management networks as Mininet builds them (``management:``; docs/management.md).

Each network is a Linux bridge in a namespace of its own (``oob``,
``inband``): standard Ethernet forwarding and learning, no PFC, no ECN,
nothing of the compute fabric's pipeline. Its members are veths into it:

* out-of-band: the management host (``mgmt``, where the controller's and the
  telemetry collector's connections are made) and one management port per
  switch, in a namespace of the switch's own (``<switch>m``): the switch
  process binds its P4Runtime and gNMI servers there, on its management
  address, and nowhere else (``SwitchConfig.mgmt_netns``);
* in-band: the management host and one interface per server, in the
  server's namespace beside its NICs (what its agents see).

Every member interface and every bridge port is shaped by ``tc tbf`` to the
network's rate (dilated as the fabric's links are). Who has which address
and interface: ``AddressPlan.management_members``, the one source.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from mininet.node import Host

from emulator.atomic import atomic_write_text
from emulator.errors import RunAborted
from emulator.lifeline import child_env
from emulator.net.inband import HEAD_PORT
from emulator.net.nodes import stop_processes
from emulator.rundir import RawDir
from emulator.topo import Fabric
from emulator.topo.addressing import MGMT_BRIDGE, MGMT_HOST, switch_mgmt_netns

BRIDGE = "br0"                  # the bridge's name inside its namespace
P4RUNTIME_PORT = 9559           # the IANA-registered ports: with a namespace
GNMI_PORT = 9339                # per switch, every switch serves on its own
BRIDGE_FORWARDING_S = 5.0       # linkwatch reports a carrier within a second
QUIET_IPV6 = "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1"


def management_nodes(fabric: Fabric) -> list[str]:
    """The Mininet nodes (namespaces) the management networks add."""
    if not fabric.management:
        return []
    names = [MGMT_HOST] + [MGMT_BRIDGE[m.kind] for m in fabric.management]
    if fabric.management_net("out_of_band") is not None:
        names += [switch_mgmt_netns(sw.name) for sw in fabric.switches()]
    return names


def add_management(topo, fabric: Fabric, where=lambda node: {}) -> None:
    """The management networks' namespaces and veths, into a Mininet ``topo``
    (after the fabric's servers and links: a server's NIC 0 stays its default
    interface). Addresses are configured by ``configure_management``."""
    plan = fabric.addresses
    for name in management_nodes(fabric):
        # ip=None: Mininet would give a node without one an address of its 10.0.0.0/8
        topo.addHost(name, cls=Host, ip=None, **where(name))
    for net in fabric.management:
        bridge = MGMT_BRIDGE[net.kind]
        for k, m in enumerate(plan.management_members(net.kind), start=1):
            topo.addLink(m.netns, bridge, port1=int(m.ifname.rpartition("-eth")[2]), port2=k,
                         intfName1=m.ifname, intfName2=m.bridge_ifname)


def _shape(ifname: str, rate_bps: int) -> str:
    # A millisecond of the rate as the bucket (at least ten 1500-byte frames).
    burst = max(15_000, rate_bps // 8 // 1000)
    return f"tc qdisc replace dev {ifname} root tbf rate {rate_bps}bit burst {burst} latency 50ms"


def configure_management(net, fabric: Fabric, dilation: float = 1.0) -> None:
    """Bridges up, every member addressed and up, every port shaped: one shell
    round trip a namespace."""
    plan = fabric.addresses
    cmds: dict[str, list[str]] = {name: [QUIET_IPV6] for name in management_nodes(fabric)}
    for m_net in fabric.management:
        rate = max(1, int(m_net.rate_bps / dilation))
        bridge = MGMT_BRIDGE[m_net.kind]
        cmds[bridge] += [f"ip link add {BRIDGE} type bridge stp_state 0 forward_delay 0",
                         f"ip link set {BRIDGE} up"]
        for m in plan.management_members(m_net.kind):
            cmds[bridge] += [f"ip link set {m.bridge_ifname} master {BRIDGE}",
                             f"ip link set {m.bridge_ifname} up", _shape(m.bridge_ifname, rate)]
            cmds.setdefault(m.netns, [])
            cmds[m.netns] += [f"ip link set {m.ifname} address {m.mac}",
                              f"ip addr replace {m.cidr} dev {m.ifname}",
                              f"ip link set {m.ifname} up", "ip link set lo up",
                              _shape(m.ifname, rate)]
    for name, lines in cmds.items():
        out = net.get(name).cmd(" && ".join(lines) + "; echo rc=$?")
        if "rc=0" not in out.splitlines()[-1:]:
            raise RuntimeError(f"management network: configuring {name} failed: {out.strip()}")
    _wait_forwarding(net, fabric)


def _wait_forwarding(net, fabric: Fabric) -> None:
    """Until every port of every management bridge forwards. A port forwards
    once the kernel's linkwatch has seen its carrier, which it may defer by up
    to a second -- for a veth whose peer has the same ifindex in its own
    namespace, not urgent to it -- and a bridge drops what arrives before: a
    server's first report (its ARP request for the head), and with it every
    report of a short run."""
    deadline = time.monotonic() + BRIDGE_FORWARDING_S
    for m_net in fabric.management:
        node = net.get(MGMT_BRIDGE[m_net.kind])
        ports = {m.bridge_ifname for m in fabric.addresses.management_members(m_net.kind)}
        while True:
            out = node.cmd("bridge -j link show")
            try:
                states = {p["ifname"]: p.get("state") for p in json.loads(out)}
            except (ValueError, KeyError, TypeError):
                states = {}
            waiting = sorted(p for p in ports if states.get(p) != "forwarding")
            if not waiting:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"management network {m_net.kind}: bridge port(s) "
                                   f"{', '.join(waiting)} not forwarding {BRIDGE_FORWARDING_S:g} s "
                                   "after they came up")
            time.sleep(0.01)


def attach_switches(net, fabric: Fabric, relay) -> None:
    """Each switch node learns where its servers bind (its management
    namespace, by its shell's pid), where they are probed from (the
    management host) and how the controller reaches them (``relay``)."""
    if fabric.management_net("out_of_band") is None:
        return
    host_pid = net.get(MGMT_HOST).pid
    for sw in fabric.switches():
        node = net.get(sw.name)
        node.mgmt_netns = f"/proc/{net.get(switch_mgmt_netns(sw.name)).pid}/ns/net"
        node.probe_netns_pid = host_pid
        node.relay = relay


REPORT_INTERVAL_MS = 20          # wall ms between a server's progress reports
HEAD_READY_S = 10.0


class InbandReports:
    """A run's progress reports over the in-band network (``net/inband.py``):
    the head in the management host, a reporter in each server; at the end
    what the head received and what every bridge port carried."""

    def __init__(self, fnet, run_dir: Path, interval_ms: float = REPORT_INTERVAL_MS):
        self.fnet, self.raw = fnet, RawDir(run_dir)
        self.interval_ms = interval_ms
        self.head_out = Path(run_dir) / "inband-head.json"
        self.procs: list = []

    def _popen(self, node, args: list[str], log: Path):
        with open(log, "w") as f:
            proc = node.popen([sys.executable, "-m", "emulator.net.inband", *args],
                              stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                              env=child_env())
        self.procs.append(proc)
        return proc

    def start(self) -> "InbandReports":
        fabric = self.fnet.fabric
        plan = fabric.addresses
        head_ip = plan.management_ip("in_band", MGMT_HOST)
        log = self.raw.process_log("inband-head")
        head = self._popen(self.fnet.net.get(MGMT_HOST), ["head", str(HEAD_PORT), str(self.head_out)], log)
        _wait_ready(head, log, "listening", "the in-band management head")
        started = []
        for server in fabric.servers():
            files = [str(self.raw.progress(n)) for n in server.all_nics]
            log = self.raw.process_log(f"{server.name}.inband")
            started.append((self._popen(self.fnet.host(server.name), [
                "report", f"{head_ip}:{HEAD_PORT}", server.name, str(self.interval_ms), *files], log),
                log, server.name))
        # Each reporter runs before the traffic does, as a server's agent would: one
        # stopped before its start (a short run) would have sent nothing, not even its last word.
        for proc, log, name in started:
            _wait_ready(proc, log, "reporting to", f"{name}'s in-band reporter")
        return self

    def finish(self, path: Path) -> dict:
        """Stop them; ``path`` (management.json): the head's counts, and per
        management network every bridge port's packets and its queue's."""
        reporters, head = self.procs[1:], self.procs[:1]
        stop_processes(reporters)
        time.sleep(0.05)                  # the last reports in flight reach the head
        stop_processes(head)
        result = {"report_interval_wall_ms": self.interval_ms,
                  "head": json.loads(self.head_out.read_text()) if self.head_out.exists() else {},
                  "bridges": {m.kind: bridge_counters(self.fnet.net, self.fnet.fabric, m.kind)
                              for m in self.fnet.fabric.management}}
        atomic_write_text(path, json.dumps(result, indent=1, sort_keys=True))
        return result


def _wait_ready(proc, log: Path, line: str, what: str) -> None:
    """Until ``proc``'s ``log`` says ``line`` (it is up), HEAD_READY_S at most."""
    deadline = time.monotonic() + HEAD_READY_S
    while line not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RunAborted(f"{what} did not start; see {log}")
        time.sleep(0.01)


def bridge_counters(net, fabric: Fabric, kind: str) -> dict[str, dict]:
    """Every port of the ``kind`` bridge: its member, the packets and bytes it
    carried each way, and its egress queue's (tc) sent packets and drops."""
    node = net.get(MGMT_BRIDGE[kind])
    links = {i["ifname"]: i.get("stats64", {}) for i in json.loads(node.cmd("ip -s -j link show"))}
    qdiscs = {q["dev"]: q for q in json.loads(node.cmd("tc -s -j qdisc show"))}
    out = {}
    for m in fabric.addresses.management_members(kind):
        st, q = links.get(m.bridge_ifname, {}), qdiscs.get(m.bridge_ifname, {})
        out[m.bridge_ifname] = {"member": m.node, "rx_packets": st.get("rx", {}).get("packets", 0),
                                "rx_bytes": st.get("rx", {}).get("bytes", 0),
                                "tx_packets": st.get("tx", {}).get("packets", 0),
                                "tx_bytes": st.get("tx", {}).get("bytes", 0),
                                "queue_sent_packets": q.get("packets", 0),
                                "queue_drops": q.get("drops", 0)}
    return out


__all__ = ["InbandReports", "bridge_counters", "GNMI_PORT", "P4RUNTIME_PORT", "add_management", "attach_switches",
           "configure_management", "management_nodes"]
