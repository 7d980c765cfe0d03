"""The fabric as Mininet builds it: a ``Topo`` of switches, servers and links.

``fabric_topo`` turns a ``Fabric`` (the topology file) into a Mininet Topo
whose nodes carry everything their classes need to start (``nodes.py``,
``bmv2.py``, ``cluster.py``): each switch's device id, P4Runtime port and
its ports' links at the dilated rate and delay; each server's NICs. What
the links run at is decided here once, for switches and host agents alike
(``dilated_link``), so both ends of a link pace it the same.
"""
from __future__ import annotations

from pathlib import Path

from mininet.topo import Topo

from emulator.net.management import add_management
from emulator.net.nodes import EmbeddedP4Switch, RoceHost
from emulator.schema.switch import IbLinkConfig
from emulator.topo import Fabric


def dilated_link(fabric: Fabric, node: str, port_no: int, dilation: float) -> tuple[int, int]:
    """(rate_bps, delay_ns) that the link behind a port runs at, dilated."""
    link = fabric.links[fabric.port(node, port_no).link_index]
    return max(1, int(link.rate_bps / dilation)), int(link.delay_ns * dilation)


def ib_link_config(dilation: float) -> dict:
    """An InfiniBand switch's link layer (``IbLinkConfig``): the schema's
    buffers and update thresholds, its update period dilated (wall ns)."""
    cfg = IbLinkConfig()
    return {**cfg.model_dump(), "update_period_ns": int(cfg.update_period_ns * dilation)}


def switch_params(fabric: Fabric, name: str, target: str, switch_options: dict,
                  ports: dict[str, tuple[int, int]], forkserver=None, switch_cls=None) -> dict:
    """Mininet addSwitch parameters of one switch on a target; ports: name ->
    (gRPC port, second port: BMv2's Thrift, the embedded switch's gNMI)."""
    from emulator.net.bmv2 import Bmv2Switch   # deferred: BMv2's parts only where it is asked for
    common = {"device_id": fabric.device_id(name), "grpc_port": ports[name][0],
              "port_links": {p.port_no: dilated_link(fabric, name, p.port_no, switch_options["dilation"])
                             for p in fabric.ports(name)}}
    if target == "bmv2":
        return {**common, "cls": Bmv2Switch, "thrift_port": ports[name][1],
                "options": {k: switch_options[k] for k in ("buffer_bytes", "mtu_frame_bytes", "pcap",
                                                            "lossless_priorities")}}
    options = {k: v for k, v in switch_options.items()
               if k not in ("dilation", "mtu_frame_bytes", "lossless_priorities", "link_faults",
                            "port_rx_down", "switch_reboots")}
    faults = {port: f for (sw, port), f in switch_options.get("link_faults", {}).items() if sw == name}
    if faults:
        common["port_faults"] = faults
    rx_down = {port: d for (sw, port), d in switch_options.get("port_rx_down", {}).items() if sw == name}
    if rx_down:
        common["port_rx_down"] = rx_down
    if switch_options.get("switch_reboots", {}).get(name):
        options["reboots"] = switch_options["switch_reboots"][name]
    common["gnmi_port"] = ports[name][1]
    mgmt_ip = fabric.addresses.management_ip("out_of_band", name)
    if mgmt_ip is not None:
        common["mgmt_ip"] = mgmt_ip
    if fabric.link_layer == "infiniband":
        options["ib"] = ib_link_config(switch_options["dilation"])
    return {**common, "cls": switch_cls or EmbeddedP4Switch, "forkserver": forkserver,
            "options": {**options, "router_mac": fabric.addresses.router_mac(name),
                        "seed": fabric.device_id(name)}}


def fabric_topo(fabric: Fabric, dilation: float, run_dir: Path, switch_options: dict,
                ports: dict[str, tuple[int, int]], target: str = "embedded", forkserver=None,
                cluster=None, packs: dict[str, str] | None = None, vtime_socket_of=None):
    """cluster: an ``emulator.net.cluster.Cluster``: its node classes, and
    each node's server as Mininet's cluster edition takes it. packs: switch
    -> the process it shares (embedded target). vtime_socket_of: switch ->
    the virtual-time coordinator's socket as its process reaches it (None:
    the run is dilated; ``FabricNet.vtime_socket_of``)."""

    switch_cls, host_cls = None, RoceHost
    if cluster is not None:
        switch_cls, host_cls, _ = cluster.classes

    def where(node: str) -> dict:
        return cluster.node_params(node) if cluster is not None else {}

    class FabricTopo(Topo):
        def build(self):
            for sw in fabric.switches():
                pack = {"pack": packs[sw.name]} if packs and sw.name in packs else {}
                vtime = vtime_socket_of(sw.name) if vtime_socket_of is not None else None
                options = {**switch_options, "dilation": dilation,
                           **({"vtime_socket": vtime} if vtime is not None else {})}
                self.addSwitch(sw.name, run_dir=str(run_dir), **where(sw.name), **pack,
                               **switch_params(fabric, sw.name, target, options, ports,
                                               forkserver, switch_cls))
            add_servers(self, fabric, host_cls, where)
            add_links(self, fabric)
            add_management(self, fabric, where)

    return FabricTopo()


def add_servers(topo, fabric: Fabric, host_cls, where=lambda node: {}) -> None:
    """One Mininet host (namespace) per server, holding all its NICs'
    interfaces; NIC 0's address and gateway are its defaults."""
    plan = fabric.addresses
    for server in fabric.servers():
        nics = [{"ifname": plan.host_ifname(n), "cidr": plan.host_cidr(n),
                 "mac": plan.host_mac(n), "gateway_ip": plan.host_gateway(n),
                 "gateway_mac": plan.gateway_mac(n)} for n in server.all_nics]
        topo.addHost(server.name, cls=host_cls, ip=nics[0]["cidr"], mac=nics[0]["mac"],
                     defaultRoute=f"via {nics[0]['gateway_ip']}", nics=nics, **where(server.name))


def add_links(topo, fabric: Fabric) -> None:
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
