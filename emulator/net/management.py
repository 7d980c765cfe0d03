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

from mininet.node import Host

from emulator.topo import Fabric
from emulator.topo.addressing import MGMT_BRIDGE, MGMT_HOST, switch_mgmt_netns

BRIDGE = "br0"                  # the bridge's name inside its namespace
P4RUNTIME_PORT = 9559           # the IANA-registered ports: with a namespace
GNMI_PORT = 9339                # per switch, every switch serves on its own
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


__all__ = ["GNMI_PORT", "P4RUNTIME_PORT", "add_management", "attach_switches",
           "configure_management", "management_nodes"]
