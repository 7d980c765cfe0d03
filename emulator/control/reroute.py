"""The controller's reroute: dead next hops out of the ECMP groups and routes, and back.

A switch reports a port that lost or regained its signal on its P4Runtime
stream (``emulator/p4/port_status.py``). A link is down while either of its
ends reports no signal (a real port whose receiver loses the signal signals
a remote fault, and its peer takes the link down too). On every change the
controller recomputes every switch's routes on the fabric without the dead
links -- the same shortest-path rule as at install (``topo.routes``) -- and
writes each switch the difference to what it holds:

    insert new members, insert new groups, modify routes, insert routes,
    delete routes, delete groups, delete members

(one Write per step, so nothing refers to what is not there yet or any
more). Members and groups keep their ids: a next hop, or a set of them, has
one id for the run (the install's, or the next free one), so restoring a
link writes back the entries the install wrote. A prefix no switch can
reach any more loses its route: frames to it are dropped by the pipeline's
table miss (black-holed), not sent onto a dead link.

Every write carries the fabric time it takes effect: the report's time plus
``reaction_ns``, the modelled control-plane delay, so a rerun reroutes at the
same fabric ns. In virtual time (``ordered``) reports are handled in fabric
order between windows (``release``), not in the wall order they arrive in;
elsewhere as they come (docs/virtual-time.md, "Controller writes at a fabric
time").
"""
from __future__ import annotations

import json
import logging
import threading
from itertools import groupby
from pathlib import Path
from p4.v1 import p4runtime_pb2 as pb

from emulator.atomic import atomic_write_text
from emulator.p4.p4info import P4Info
from emulator.p4.port_status import decode_other, port_status_ack
from emulator.topo import Fabric, Route, compute_routes, ecmp_groups, nexthop_members

log = logging.getLogger(__name__)


def entity_ids(routes: list[Route], switch: str) -> tuple[dict, dict]:
    """(next hop -> member id, next-hop set -> group id) of one switch's routes:
    the ids the install writes."""
    members = {nh: i + 1 for i, nh in enumerate(nexthop_members({switch: routes})[switch])}
    groups = {hops: i + 1 for i, hops in enumerate(ecmp_groups({switch: routes})[switch])}
    return members, groups


class _FabricWithout:
    """The fabric as routing sees it with some ports' links dead."""

    def __init__(self, fabric: Fabric, dead: set[tuple[str, int]]):
        self._fabric = fabric
        self._dead = dead

    def ports(self, node):
        name = node if isinstance(node, str) else node.name
        return tuple(p for p in self._fabric.ports(node) if (name, p.port_no) not in self._dead)

    def __getattr__(self, name):
        return getattr(self._fabric, name)


class SwitchRoutes:
    """What the controller holds written on one switch's ``ecmp_selector`` and ``ipv4_lpm``."""

    def __init__(self, p4info: P4Info, switch: str, routes: list[Route]):
        self.p4info = p4info
        self.switch = switch
        self.member_ids, self.group_ids = entity_ids(routes, switch)
        self.members = set(self.member_ids)
        self.groups = set(self.group_ids)
        self.routes = {r.prefix: r for r in routes}

    def _id(self, ids: dict, key) -> int:
        if key not in ids:
            ids[key] = max(ids.values(), default=0) + 1
        return ids[key]

    def _member(self, nh):
        return self.p4info.action_profile_member(
            "ecmp_selector", self.member_ids[nh], "set_nexthop",
            {"port": nh.port_no, "smac": nh.smac, "dmac": nh.dmac})

    def _group(self, hops):
        return self.p4info.action_profile_group(
            "ecmp_selector", self.group_ids[hops], [self.member_ids[nh] for nh in hops])

    def _route(self, r: Route):
        net, plen = r.prefix.split("/")
        ref = ({"group_id": self.group_ids[r.next_hops]} if r.is_ecmp
               else {"member_id": self.member_ids[r.next_hops[0]]})
        return self.p4info.table_entry("ipv4_lpm", {"ipv4_dst": (net, int(plen))}, **ref)

    def update(self, routes: list[Route]) -> list[tuple[int, list]]:
        """The Write batches, in order, that turn what the switch holds into
        ``routes`` ([]: nothing changes); what it holds is then ``routes``."""
        want_members = nexthop_members({self.switch: routes})[self.switch]
        want_groups = ecmp_groups({self.switch: routes})[self.switch]
        want = {r.prefix: r for r in routes}
        for nh in want_members:
            self._id(self.member_ids, nh)
        for hops in want_groups:
            self._id(self.group_ids, hops)
        gone_routes = [self.routes[p] for p in self.routes if p not in want]
        changed = [r for p, r in want.items() if p in self.routes and self.routes[p] != r]
        new_routes = [r for p, r in want.items() if p not in self.routes]
        steps = [
            (pb.Update.INSERT, [self._member(nh) for nh in want_members if nh not in self.members]),
            (pb.Update.INSERT, [self._group(h) for h in want_groups if h not in self.groups]),
            (pb.Update.MODIFY, [self._route(r) for r in changed]),
            (pb.Update.INSERT, [self._route(r) for r in new_routes]),
            (pb.Update.DELETE, [self._route(r) for r in gone_routes]),
            (pb.Update.DELETE, [self._group(h) for h in sorted(self.groups - set(want_groups),
                                                               key=self.group_ids.get)]),
            (pb.Update.DELETE, [self._member(nh) for nh in sorted(self.members - set(want_members))]),
        ]
        self.members, self.groups, self.routes = set(want_members), set(want_groups), want
        return [(utype, ents) for utype, ents in steps if ents]

    def snapshot(self) -> tuple:
        return frozenset(self.members), frozenset(self.groups), dict(self.routes)

    def changes_since(self, snap: tuple) -> int:
        """Entries added, removed or changed since ``snapshot``."""
        members, groups, routes = snap
        return (len(members ^ self.members) + len(groups ^ self.groups)
                + len(routes.keys() ^ self.routes.keys())
                + sum(1 for p, r in routes.items() if p in self.routes and self.routes[p] != r))


class Rerouter:
    """Takes the port reports of every switch of a controller and reroutes."""

    def __init__(self, fabric: Fabric, p4info: P4Info, conns: dict, reaction_ns: int,
                 routes: dict[str, list[Route]] | None = None, port_entities=None):
        """conns: switch -> its ``SwitchConnection`` (primary); routes: what
        the install wrote (default: the fabric's); port_entities(switch):
        its entities beside the routes, by kind (``FabricController.
        port_entities``), written again when a switch is back from a reboot."""
        routes = routes if routes is not None else compute_routes(fabric)
        self.fabric = fabric
        self.p4info = p4info
        self.port_entities = port_entities or (lambda switch: {})
        self.off: set[str] = set()       # switches down (a modelled reboot)
        self.conns = conns
        self.reaction_ns = int(reaction_ns)
        self.held = {sw: SwitchRoutes(p4info, sw, routes[sw]) for sw in conns}
        self.down: set[tuple[str, int]] = set()     # ports reporting no signal
        self.reports: list[dict] = []      # every port report, as handled
        self.reroutes: list[dict] = []     # every change of the dead links, and its writes
        self._lock = threading.Lock()
        self._pending: list[tuple] | None = None     # ordered: reports held, not handled yet
        self._outbox: list[tuple] | None = None      # writes of a release, sent at its end
        self._names = {id(c): name for name, c in conns.items()}
        for conn in conns.values():
            conn.on_other = self._on_other

    def _on_other(self, conn, other) -> None:
        got = decode_other(other) or {}
        name = self._names[id(conn)]
        if isinstance(got.get("port_status"), dict):
            ps = got["port_status"]
            report = (int(ps["fabric_ns"]), name, int(ps["port"]), ps.get("oper_status") == "UP")
        elif isinstance(got.get("switch_status"), dict):
            ps = got["switch_status"]
            report = (int(ps["fabric_ns"]), name, None, ps.get("status") == "UP")
        else:
            return
        error = None
        with self._lock:
            if self._pending is not None:          # handled in fabric order by ``release``
                self._pending.append(report)
                report = None
        try:
            if report is not None:
                self._handle_instant(report[0], [report])
        except Exception as e:      # the switch is told, and fails the run in one line
            error = f"{type(e).__name__}: {e}"
            log.exception("reroute after %s's report failed", name)
        conn.send_other(port_status_ack(int(ps["event_id"]), error))

    def ordered(self):
        """Hold the reports from now on and handle them in fabric order when
        ``release`` says none before its time can still come (virtual time:
        the coordinator's ``between_windows``). Returns ``release``."""
        with self._lock:
            if self._pending is None:
                self._pending = []
        return self.release

    def release(self, until_ns: int) -> None:
        """Handle the held reports before ``until_ns`` -- when no report
        before it can come any more -- in (fabric ns, switch, port) order, a
        switch's own status before its ports', each ns's reports at once; then
        send their writes. A write to a switch that went down later in the
        same release is dropped: the switch wiped what it had queued then."""
        def key(r):
            return (r[0], r[2] is not None, r[1], r[2] or 0, r[3])
        with self._lock:
            due = sorted((r for r in self._pending if r[0] < until_ns), key=key)
            if not due:
                return
            self._pending = [r for r in self._pending if r[0] >= until_ns]
            self._outbox = []
        try:
            for fabric_ns, reports in groupby(due, key=lambda r: r[0]):
                try:
                    self._handle_instant(fabric_ns, list(reports))
                except Exception as e:
                    raise RuntimeError(f"controller: the reroute for the port reports at "
                                       f"{fabric_ns} ns failed: {type(e).__name__}: {e}") from e
            for switch, utype, ents, at_ns in self._outbox:
                self._send(switch, utype, ents, at_ns)
        finally:
            self._outbox = None

    def _write(self, switch: str, utype, ents: list, at_ns: int) -> None:
        if self._outbox is not None:
            self._outbox.append((switch, utype, ents, at_ns))
        else:
            self._send(switch, utype, ents, at_ns)

    def _send(self, switch: str, utype, ents: list, at_ns: int) -> None:
        conn = self.conns[switch]
        {pb.Update.INSERT: conn.insert, pb.Update.MODIFY: conn.modify,
         pb.Update.DELETE: conn.delete}[utype](ents, at_ns=at_ns)

    def _handle_instant(self, fabric_ns: int, reports: list[tuple]) -> None:
        """Reports of one fabric ns: (ns, switch, port or None for the
        switch itself, up), switches' own first."""
        ports = []
        for _, switch, port, up in reports:
            if port is None:
                self.switch_status(switch, up, fabric_ns)
            else:
                ports.append((switch, port, up))
        if ports:
            self.handle_many(fabric_ns, ports)

    def switch_status(self, switch: str, up: bool, fabric_ns: int) -> dict | None:
        """A switch went down (its state lost: nothing is written to it
        meanwhile; its neighbours' ports report its links) or is back: its
        whole state written again, timed for ``fabric_ns + reaction_ns`` --
        when its links come up (``experiment/faults.py``) -- with routes as
        if its links were up. The reinstall (None for a down)."""
        with self._lock:
            self.reports.append({"switch": switch, "port": None, "peer": None,
                                 "oper_status": "UP" if up else "DOWN", "detected_ns": fabric_ns})
            held = self.held[switch]
            if not up:
                self.off.add(switch)
                held.members, held.groups, held.routes = set(), set(), {}
                if self._outbox:         # wiped from its queue as it went down
                    self._outbox[:] = [w for w in self._outbox
                                       if w[0] != switch or w[3] <= fabric_ns]
                self._lost_by(switch, fabric_ns)
                return None
            self.off.discard(switch)
            mine = {(switch, p.port_no) for p in self.fabric.ports(switch)}
            mine |= {(p.peer, p.peer_port_no) for p in self.fabric.ports(switch)}
            routes = compute_routes(_FabricWithout(self.fabric, self._dead_ports() - mine))
            at_ns = fabric_ns + self.reaction_ns
            static = self.port_entities(switch)
            # the install's order: the station, members, groups, routes, QoS, INT
            batches = [static.get("tables")] + [ents for _, ents in held.update(routes.get(switch, []))]
            batches += [static.get("qos"), static.get("int")]
            updates = 0
            for ents in batches:
                if ents:
                    self._write(switch, pb.Update.INSERT, ents, at_ns)   # onto nothing: inserts only
                    updates += len(ents)
            reroute = {"detected_ns": fabric_ns, "converged_ns": at_ns, "links_down": self._links_down(),
                       "programmed": [switch], "changes": updates, "reinstalled": switch}
            self.reroutes.append(reroute)
            return reroute

    def _links_down(self) -> list:
        return sorted({tuple(sorted((a, self.fabric.port(a, n).peer))) for a, n in self.down})

    def _dead_ports(self) -> set[tuple[str, int]]:
        """Both ends of every link one of whose ends reports no signal."""
        dead = set()
        for sw, port_no in self.down:
            p = self.fabric.port(sw, port_no)
            dead |= {(sw, port_no), (p.peer, p.peer_port_no)}
        return dead

    def handle(self, switch: str, port: int, up: bool, fabric_ns: int) -> dict | None:
        """A port's report: the writes it calls for, each timed for
        ``fabric_ns + reaction_ns``, made before this returns; the reroute
        (None: the dead links did not change, e.g. the link's other end
        had reported already)."""
        return self.handle_many(fabric_ns, [(switch, port, up)])

    def handle_many(self, fabric_ns: int, ports: list[tuple[str, int, bool]]) -> dict | None:
        """The reports (switch, port, up) of one fabric ns, as one change."""
        with self._lock:
            before = self._dead_ports()
            for switch, port, up in ports:
                if switch in self.off:     # a report from a switch that is off: none comes
                    continue
                self.reports.append({"switch": switch, "port": port,
                                     "peer": self.fabric.port(switch, port).peer,
                                     "oper_status": "UP" if up else "DOWN", "detected_ns": fabric_ns})
                (self.down.discard if up else self.down.add)((switch, port))
            dead = self._dead_ports()
            if dead == before:
                return None
            batch = self._batch(fabric_ns)
            routes = compute_routes(_FabricWithout(self.fabric, dead))
            for sw in sorted(set(self.held) - self.off):
                for utype, ents in self.held[sw].update(routes.get(sw, [])):
                    self._write(sw, utype, ents, batch["_at_ns"])
            changed = {sw: self.held[sw].changes_since(snap) for sw, snap in batch["_before"].items()
                       if sw not in self.off}
            batch["_changed"] = {sw: n for sw, n in changed.items() if n}
            batch.update({"converged_ns": None, "links_down": self._links_down()})
            self._tally(batch)
            return batch

    @staticmethod
    def _tally(batch: dict) -> None:
        """A reroute's ``programmed``, ``changes`` and ``converged_ns`` from
        the writes of it that a switch takes (``_changed``)."""
        changed = batch["_changed"]
        batch.update({"converged_ns": batch["_at_ns"] if changed else batch["detected_ns"],
                      "programmed": sorted(changed), "changes": sum(changed.values())})

    def _lost_by(self, switch: str, fabric_ns: int) -> None:
        """``switch`` went down at ``fabric_ns``, its queued writes lost
        (``port_events.report_switch``): a reroute whose writes to it were due
        later did not program it, a reinstall of it due later took no effect."""
        for r in self.reroutes:
            if r.get("converged_ns") is None or r["converged_ns"] <= fabric_ns:
                continue
            if r.get("reinstalled") == switch:
                r.update({"converged_ns": None, "programmed": [], "changes": 0})
            elif switch in r.get("_changed", {}):
                del r["_changed"][switch]
                self._tally(r)

    def _batch(self, fabric_ns: int) -> dict:
        """The reroute of the reports at ``fabric_ns``: those of one instant
        (the ends of one link, a switch's neighbours) reach the controller in
        any wall order, each writing for the same instant, where the switches
        apply them together; one record, from the state before the first to
        the state after the last, is the same whatever the order."""
        last = self.reroutes[-1] if self.reroutes else None
        if last is not None and last["detected_ns"] == fabric_ns and "reinstalled" not in last:
            return last
        batch = {"detected_ns": fabric_ns, "_at_ns": fabric_ns + self.reaction_ns,
                 "_before": {sw: h.snapshot() for sw, h in self.held.items() if sw not in self.off}}
        self.reroutes.append(batch)
        return batch

    def results(self) -> dict:
        """The reports and reroutes in fabric-time order."""
        with self._lock:
            reports = sorted(self.reports, key=lambda r: (r["detected_ns"], r["switch"], r["port"] or 0))
            reroutes = [{k: v for k, v in r.items() if not k.startswith("_")}
                        for r in sorted(self.reroutes, key=lambda r: r["detected_ns"])]
        return {"reaction_ns": self.reaction_ns, "reports": reports, "reroutes": reroutes}

    def write(self, path: Path) -> None:
        atomic_write_text(path, json.dumps(self.results(), indent=1))
