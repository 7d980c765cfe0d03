"""The fabric controller: forwarding state from the topology, installed over P4Runtime.

It knows the fabric (``emulator.topo``) and the P4Info contract, not the
target: the same calls program the embedded target and BMv2.

Per switch it writes
  * ``my_station``: the switch's router MAC (frames to it are routed);
  * one ``ecmp_selector`` member per distinct next hop (``set_nexthop``);
  * one ``ecmp_selector`` group per distinct ECMP next-hop set;
  * one ``ipv4_lpm`` entry per route, pointing at its member or group.

It arbitrates with ``CONTROLLER_ELECTION_ID``, one above p4runtime-shell's
default (1,0): a shell started on a switch with its defaults (or with the
lower id ``fabric-emu cli`` prints) is a backup that reads; a client with a
higher id takes primary away, which each connection reports in one line,
and the controller writes again only after ``take_primary()``.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

from p4.v1 import p4runtime_pb2

from emulator.control.p4rt_client import NotPrimaryError, SwitchConnection
from emulator.control.qos import QosSpec, int_port_entities, qos_entities
from emulator.control.reroute import Rerouter, entity_ids
from emulator.dataplane.malformed import MALFORMED_SLOTS, Malformed
from emulator.ib.sm import lft_entries, sweep
from emulator.p4.p4info import IB_P4INFO, P4Info
from emulator.topo import Fabric, compute_routes
from emulator.wire import CPU_PORT

T = TypeVar("T")

# (high, low): above p4runtime-shell's default election id, (1, 0).
CONTROLLER_ELECTION_ID = (1, 1)

PORT_COUNTERS = {          # summary name prefix -> fabric.p4 counter, index port
    "rx": "rx_port_counter",
    "enq": "enq_port_counter",
    "tx": "tx_port_counter",
    "pipeline_drop": "pipeline_drop_counter",
}
PORT_PRIORITY_COUNTERS = {  # index port * 8 + priority
    "enq": "enq_prio_counter",
    "tx": "tx_prio_counter",
    "ecn_mark": "ecn_mark_counter",
    "pause_tx": "pfc_tx_counter",
    "pause_rx": "pfc_rx_counter",
}
NUM_PRIORITIES = 8
# malformed_drop_counter (index port * MALFORMED_SLOTS + reason): summary name
# prefix per reason, e.g. malformed_ipv4_checksum
MALFORMED_PREFIX = {r.value: f"malformed_{r.name.lower()}" for r in Malformed}


def station_entities(fabric: Fabric, p4info: P4Info, switch: str) -> list:
    """``my_station``: frames to the switch's router MAC are routed."""
    return [p4info.table_entry("my_station", {"eth_dst": fabric.addresses.router_mac(switch)},
                               "NoAction")]


def switch_entities(fabric: Fabric, p4info: P4Info, switch: str, routes=None) -> dict[str, list]:
    """The P4Runtime entities of one switch, in the order they must be written."""
    routes = routes if routes is not None else compute_routes(fabric)
    members, groups = entity_ids(routes[switch], switch)
    station = station_entities(fabric, p4info, switch)
    member_msgs = [p4info.action_profile_member(
        "ecmp_selector", mid, "set_nexthop", {"port": nh.port_no, "smac": nh.smac, "dmac": nh.dmac})
        for nh, mid in members.items()]
    group_msgs = [p4info.action_profile_group(
        "ecmp_selector", gid, [members[nh] for nh in hops]) for hops, gid in groups.items()]
    route_msgs = []
    for r in routes[switch]:
        net, plen = r.prefix.split("/")
        ref = {"group_id": groups[r.next_hops]} if r.is_ecmp else {"member_id": members[r.next_hops[0]]}
        route_msgs.append(p4info.table_entry("ipv4_lpm", {"ipv4_dst": (net, int(plen))}, **ref))
    return {"tables": station, "members": member_msgs, "groups": group_msgs, "routes": route_msgs}


def ib_switch_entities(fabric: Fabric, p4info: P4Info, switch: str, subnet,
                       ib_cc=None) -> dict[str, list]:
    """The P4Runtime entities of one InfiniBand switch (``p4src/ib.p4``):
    the subnet manager's LFT, then -- IB congestion control on
    (``schema.ib_cc``) -- every port's FECN threshold and marking rate."""
    ents = {"routes": lft_entries(subnet, switch, p4info)}
    if ib_cc is not None and ib_cc.enabled:
        ents["qos"] = [p4info.table_entry(
            "cc_threshold", {"port": p.port_no},
            ("set_cc_threshold", {"packets": ib_cc.threshold_packets,
                                  "marking_rate": ib_cc.marking_rate}))
            for p in fabric.ports(switch)]
    return ents


def program_p4info(fabric: Fabric) -> P4Info:
    """The P4Info of the program a fabric's switches run: fabric.p4's, or
    ib.p4's on an InfiniBand fabric."""
    return P4Info.load(IB_P4INFO) if fabric.link_layer == "infiniband" else P4Info.load()


class FabricController:
    """Programs every switch of a fabric and reads its port counters."""

    def __init__(self, fabric: Fabric, switches: dict[str, tuple[str, int]],
                 p4info: P4Info | None = None, device_config: bytes = b"",
                 qos: QosSpec | None = None, mtu_bytes: int = 1024, reaction_fabric_ns: int = 0,
                 dilation: float = 1.0, ib_cc=None):
        """switches: name -> (P4Runtime address, device id); qos: traffic classes,
        PFC and ECN to install (None: every packet in priority 0, lossy);
        ib_cc: an InfiniBand fabric's congestion control (``schema.ib_cc``:
        its switches' FECN threshold; None or off: no marking)."""
        self.fabric = fabric
        self.switches = switches
        self.p4info = p4info or P4Info.load()
        self.device_config = device_config
        self.qos = qos
        self.mtu_bytes = mtu_bytes
        self.reaction_fabric_ns = reaction_fabric_ns
        self.dilation = dilation
        self.ib_cc = ib_cc
        self.conns: dict[str, SwitchConnection] = {}
        self.rerouter: Rerouter | None = None

    def connect(self) -> None:
        """A primary connection to every switch (all at once); on a failure
        the ones made are closed and the first error raised."""
        with ThreadPoolExecutor(max_workers=min(16, max(1, len(self.switches)))) as pool:
            futures = {name: pool.submit(SwitchConnection, address, device_id, CONTROLLER_ELECTION_ID,
                                         name=name)
                       for name, (address, device_id) in self.switches.items()}
        for name, f in futures.items():
            if f.exception() is None:
                self.conns[name] = f.result()
        for f in futures.values():
            if f.exception() is not None:
                self.close()
                raise f.exception()

    def install(self) -> None:
        """Pipeline and every switch's entries, switches in parallel. On an
        InfiniBand fabric the controller is its subnet manager: LIDs and
        up/down LFTs from ``ib.sm.sweep`` (no PFC or ECN to install)."""
        if self.fabric.link_layer == "infiniband":
            subnet = sweep(self.fabric)
            ents = {name: ib_switch_entities(self.fabric, self.p4info, name, subnet, self.ib_cc)
                    for name in self.conns}
        else:
            routes = compute_routes(self.fabric)
            ents = {name: {**switch_entities(self.fabric, self.p4info, name, routes),
                           **self.port_entities(name)} for name in self.conns}

        def program(name: str, conn: SwitchConnection) -> None:
            conn.set_pipeline(self.p4info.proto, self.device_config)
            # Members before the groups that hold them, both before the routes.
            for kind in ("tables", "members", "groups", "routes", "qos", "int"):
                if ents[name].get(kind):
                    conn.insert(ents[name][kind])
        self._each_switch(program)

    def port_entities(self, name: str) -> dict[str, list]:
        """An Ethernet switch's entities that do not depend on its routes:
        its station, INT's and (with QoS) the traffic classes, PFC and ECN."""
        out = {"tables": station_entities(self.fabric, self.p4info, name),
               "int": int_port_entities(self.fabric, self.p4info, name, self.dilation)}
        if self.qos is not None:
            out["qos"] = qos_entities(self.fabric, self.p4info, name, self.qos,
                                      self.mtu_bytes, self.reaction_fabric_ns, self.dilation)
        return out

    def enable_reroute(self, reaction_ns: int) -> Rerouter:
        """From now on, take the switches' port reports and reroute around
        dead links, each write taking effect ``reaction_ns`` of fabric time
        after the report (``control/reroute.py``). Ethernet fabrics."""
        if self.fabric.link_layer == "infiniband":
            raise ValueError("reroute: not on an InfiniBand fabric (its subnet manager routes)")
        self.rerouter = Rerouter(self.fabric, self.p4info, self.conns, reaction_ns,
                                 port_entities=self.port_entities)
        return self.rerouter

    def set_qos(self, qos: QosSpec) -> None:
        """Change the installed ECN and PFC thresholds (and ECN on/off) in place,
        between runs. The traffic classes and whether PFC is on stay as the
        fabric was started with: the switches size their buffers for them."""
        old = self.qos
        if old is None:
            raise ValueError("the fabric was started without QoS: start it with one")
        fixed = ("roce_dscp", "roce_priority", "cnp_dscp", "cnp_priority")
        changed = [f for f in fixed if getattr(old, f) != getattr(qos, f)]
        if changed or old.pfc.enabled != qos.pfc.enabled:
            raise ValueError(f"cannot change {', '.join(changed) or 'pfc.enabled'} on a live "
                             "fabric: start a new one")
        self.require_primary("QoS change refused")   # before writing anything: not half of it
        for name, conn in self.conns.items():
            before, after = self._qos_tables(name, old), self._qos_tables(name, qos)
            gone = [e for k, e in before.items() if k not in after]
            if gone:                     # e.g. ECN turned off: its entries go
                conn.delete(gone)
            same = [e for k, e in after.items() if k in before]
            if same:
                conn.modify(same)
            new = [e for k, e in after.items() if k not in before]
            if new:
                conn.insert(new)
        self.qos = qos

    def require_primary(self, what: str) -> None:
        """``NotPrimaryError`` (one line) if another client has taken primary on a switch."""
        for conn in self.conns.values():
            if conn.lost_to is not None:
                raise NotPrimaryError(conn.not_primary_text(what), conn.lost_to)

    def take_primary(self) -> dict[str, int]:
        """Primary again on every switch where another client took it (the
        controller never does this by itself): {switch: election id now ours}."""
        return {name: conn.take_primary() for name, conn in self.conns.items() if not conn.is_primary}

    def _qos_tables(self, switch: str, qos: QosSpec) -> dict[bytes, object]:
        """The QoS table entries of a switch by key (table, match, priority);
        its clone sessions depend on the ports only and never change."""
        out = {}
        for e in qos_entities(self.fabric, self.p4info, switch, qos, self.mtu_bytes,
                              self.reaction_fabric_ns, self.dilation):
            if isinstance(e, p4runtime_pb2.TableEntry):
                key = p4runtime_pb2.TableEntry(table_id=e.table_id, match=e.match,
                                               priority=e.priority)
                out[key.SerializeToString(deterministic=True)] = e
        return out

    def _ports(self, switch: str) -> list[int]:
        """The counter indices worth reading on ``switch``: its ports and the CPU port."""
        return [p.port_no for p in self.fabric.ports(switch)] + [CPU_PORT]

    def _each_switch(self, fn: Callable[[str, SwitchConnection], T]) -> dict[str, T]:
        """``fn(name, conn)`` for every switch at once: each switch's P4Runtime
        server answers in its own process, so the round trips overlap."""
        if len(self.conns) <= 1:
            return {name: fn(name, conn) for name, conn in self.conns.items()}
        with ThreadPoolExecutor(max_workers=min(16, len(self.conns))) as pool:
            futures = {name: pool.submit(fn, name, conn) for name, conn in self.conns.items()}
            return {name: f.result() for name, f in futures.items()}

    def _read_cells(self, conn: SwitchConnection, counters: list[str],
                    indices: list[int]) -> dict[tuple[str, int], tuple[int, int]]:
        """{(counter, index): (packets, bytes)}, all in one Read: a wildcard
        read would return every cell of MAX_PORTS (thousands, mostly zero)."""
        ids = {self.p4info.counter_id(c): c for c in counters}
        ents = [conn.codec.counter_entry(c, i) for c in counters for i in indices]
        return {(ids[e.counter_entry.counter_id], e.counter_entry.index.index):
                (e.counter_entry.data.packet_count, e.counter_entry.data.byte_count)
                for e in conn.read(ents)}

    def read_port_counters(self) -> dict[tuple[str, int], dict]:
        """(switch, port) -> {rx_packets, rx_bytes, enq_..., tx_..., pipeline_drop_...,
        and malformed_<reason>_packets/_bytes for the reasons that counted something}
        for every port of the fabric's switches (and their CPU port). On
        InfiniBand, ib.p4's: rx_packets/_bytes and fecn_mark_packets (what
        a port sent, per VL, is in the switch's stats)."""
        if self.fabric.link_layer == "infiniband":
            return self._read_ib_port_counters()

        def one(name: str, conn: SwitchConnection) -> dict[tuple[str, int], dict]:
            ports = self._ports(name)
            cells = self._read_cells(conn, list(PORT_COUNTERS.values()), ports)
            bad = self._read_cells(conn, ["malformed_drop_counter"],
                                   [p * MALFORMED_SLOTS + r for p in ports for r in MALFORMED_PREFIX])
            out: dict[tuple[str, int], dict] = {}
            for port in ports:
                cell = out.setdefault((name, port), {})
                for prefix, counter in PORT_COUNTERS.items():
                    cell[f"{prefix}_packets"], cell[f"{prefix}_bytes"] = cells[(counter, port)]
                for reason, prefix in MALFORMED_PREFIX.items():
                    packets, nbytes = bad[("malformed_drop_counter", port * MALFORMED_SLOTS + reason)]
                    if packets:
                        cell[f"{prefix}_packets"], cell[f"{prefix}_bytes"] = packets, nbytes
            return out
        return {k: v for part in self._each_switch(one).values() for k, v in part.items()}

    def _read_ib_port_counters(self) -> dict[tuple[str, int], dict]:
        def one(name: str, conn: SwitchConnection) -> dict[tuple[str, int], dict]:
            ports = [p.port_no for p in self.fabric.ports(name)]
            cells = self._read_cells(conn, ["ib_rx_port_counter", "fecn_mark_counter"], ports)
            return {(name, p): {"rx_packets": cells[("ib_rx_port_counter", p)][0],
                                "rx_bytes": cells[("ib_rx_port_counter", p)][1],
                                "fecn_mark_packets": cells[("fecn_mark_counter", p)][0]}
                    for p in ports}
        return {k: v for part in self._each_switch(one).values() for k, v in part.items()}

    def read_priority_counters(self) -> dict[tuple[str, int, int], dict]:
        """(switch, port, priority) -> {enq_packets, tx_packets, ecn_mark_packets, pause_tx_packets, ...},
        only for cells that counted something."""
        def one(name: str, conn: SwitchConnection) -> dict[tuple[str, int, int], dict]:
            indices = [p * NUM_PRIORITIES + q for p in self._ports(name) for q in range(NUM_PRIORITIES)]
            cells = self._read_cells(conn, list(PORT_PRIORITY_COUNTERS.values()), indices)
            out: dict[tuple[str, int, int], dict] = {}
            for prefix, counter in PORT_PRIORITY_COUNTERS.items():
                for index in indices:
                    packets, nbytes = cells[(counter, index)]
                    if packets or nbytes:
                        cell = out.setdefault((name, index // NUM_PRIORITIES, index % NUM_PRIORITIES), {})
                        cell[f"{prefix}_packets"] = packets
                        cell[f"{prefix}_bytes"] = nbytes
            return out
        return {k: v for part in self._each_switch(one).values() for k, v in part.items()}

    def bytes_sent_on(self, ports: list[tuple[str, int]]) -> int:
        """Bytes the switches sent out of the given (switch, port)s so far."""
        total = 0
        for sw, port in ports:
            # One cell per read: a target's P4Runtime server shares the CPU
            # with its data plane, so keep polling cheap.
            cells = self.conns[sw].read_counter("tx_port_counter", index=port)
            total += cells.get(port, (0, 0))[1]
        return total

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()
