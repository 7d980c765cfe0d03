"""The leaves an embedded switch serves over gNMI, and how each is read.

Every leaf reads the switch's own state, never a copy kept for gNMI:

    /interfaces/interface[name=IF]/state/oper-status          UP | DOWN (no signal: local or remote fault)
    /interfaces/interface[name=IF]/state/counters/in-pkts, in-octets     fabric.p4 rx_port_counter
                                     .../out-pkts, out-octets             fabric.p4 tx_port_counter
                                     .../in-discards                      fabric.p4 pipeline_drop_counter
                                     .../out-discards                     the TM's queue drops
    /qos/interfaces/interface[interface-id=IF]/output/queues/queue[name=N]/state/
        transmit-pkts, transmit-octets, dropped-pkts, dropped-octets     the TM's queue N
        fabric-emu/ecn-marked-pkts, pfc-pause-sent, pfc-pause-received,
        fabric-emu/pfc-paused-ns, depth-octets, max-depth-octets, headroom-dropped-pkts

OpenConfig has no leaf for the ``fabric-emu/...`` ones: they are this
emulator's augmentation of the queue's state (docs/telemetry.md). The P4
counters are read the way a P4Runtime counter Read reads them (under the
state's lock: a pipeline config replaces the arrays); the traffic manager's
are plain ints its loop alone writes.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Callable

from emulator.clock import NEVER_NS
from emulator.dataplane.gnmi_server.paths import Elem, Leaf
from emulator.dataplane.port_status import merged_windows, no_signal_windows
from emulator.wire import NUM_PRIORITIES

VENDOR = "fabric-emu"        # the augmentation's container in a queue's state
UP, DOWN = "UP", "DOWN"
Reader = Callable[[int], object]          # fabric ns -> the leaf's value then


def _e(elem: str, **keys: str) -> Elem:
    return (elem, tuple(sorted((k.replace("_", "-"), v) for k, v in keys.items())))


class DownWindows:
    """When a port's link is down, as sorted, merged [from, until) windows (fabric ns)."""

    def __init__(self, windows: list[tuple[int, int]]):
        merged = merged_windows(windows)
        self.starts = [w[0] for w in merged]
        self.ends = [w[1] for w in merged]

    def status(self, t_ns: int) -> str:
        i = bisect_right(self.starts, t_ns) - 1
        return DOWN if i >= 0 and t_ns < self.ends[i] else UP

    def changes(self, after_ns: int, until_ns: int) -> list[tuple[int, str]]:
        """(time, new status) of the changes in (after_ns, until_ns], in order."""
        out = []
        for s, e in zip(self.starts, self.ends):
            if after_ns < s <= until_ns:
                out.append((s, DOWN))
            if e < NEVER_NS and after_ns < e <= until_ns:
                out.append((e, UP))
        return out

    def next_change_ns(self, after_ns: int) -> int:
        return min([t for w in zip(self.starts, self.ends) for t in w if after_ns < t < NEVER_NS],
                   default=NEVER_NS)


def port_down_windows(port_cfg) -> DownWindows:
    """When the port's oper-status is DOWN: when it has no signal, the one
    rule its reports to the controller follow too (IEEE 802.3's local and
    remote fault, ``dataplane/port_status.no_signal_windows``)."""
    return DownWindows(no_signal_windows(port_cfg))


OPER_STATUS = "oper-status"
IF_COUNTERS = ("in-pkts", "in-octets", "out-pkts", "out-octets", "in-discards", "out-discards")
QUEUE_STATE = ("transmit-pkts", "transmit-octets", "dropped-pkts", "dropped-octets")
QUEUE_VENDOR = ("ecn-marked-pkts", "pfc-pause-sent", "pfc-pause-received", "pfc-paused-ns",
                "depth-octets", "max-depth-octets", "headroom-dropped-pkts")


def interface_leaves(ifname: str) -> list[Leaf]:
    base = (_e("interfaces"), _e("interface", name=ifname), _e("state"))
    return [base + (_e(OPER_STATUS),)] + [base + (_e("counters"), _e(n)) for n in IF_COUNTERS]


def queue_leaves(ifname: str, priority: int) -> list[Leaf]:
    base = (_e("qos"), _e("interfaces"), _e("interface", interface_id=ifname), _e("output"),
            _e("queues"), _e("queue", name=str(priority)), _e("state"))
    return [base + (_e(n),) for n in QUEUE_STATE] + [base + (_e(VENDOR), _e(n)) for n in QUEUE_VENDOR]


def leaf_paths(ifnames: list[str]) -> list[Leaf]:
    """A switch's leaves, in its catalog's order, from its interfaces' names alone."""
    out = [leaf for name in ifnames for leaf in interface_leaves(name)]
    return out + [leaf for name in ifnames for p in range(NUM_PRIORITIES)
                  for leaf in queue_leaves(name, p)]


class Catalog:
    """The switch's leaves (``leaves[i]``: ``leaf_paths``' order), the reader
    of each (``readers[i]``), and which are states that change on events
    (``on_change``: oper-status)."""

    def __init__(self, switch):
        self.switch = switch
        self.leaves: list[Leaf] = []
        self.readers: list[Reader] = []
        self.on_change: list[bool] = []
        self.down: dict[int, DownWindows] = {}      # leaf index of an oper-status -> its windows
        ids = switch.pipeline.ids
        for port in switch.ports.values():
            self._interface(port, ids)
        for port in switch.ports.values():
            for prio in range(NUM_PRIORITIES):
                self._queue(port.cfg.ifname, switch.tm.ports[port.port_no], prio)

    def _add(self, leaves: list[Leaf], readers: dict[str, Reader],
             windows: DownWindows | None = None) -> None:
        for leaf in leaves:
            name = leaf[-1][0]
            if name == OPER_STATUS:
                self.down[len(self.leaves)] = windows
            self.leaves.append(leaf)
            self.readers.append(readers[name])
            self.on_change.append(name == OPER_STATUS)

    def _p4(self, counter_id: int, index: int, field: str) -> Reader:
        state = self.switch.state

        def read(_t: int) -> int:
            with state.lock:
                arr = state.counters.get(counter_id)
                return getattr(arr, field)[index] if arr is not None else 0
        return read

    def _interface(self, port, ids) -> None:
        no, tm_port = port.port_no, self.switch.tm.ports[port.port_no]
        windows = port_down_windows(port.cfg)
        self._add(interface_leaves(port.cfg.ifname), {
            OPER_STATUS: windows.status,
            "in-pkts": self._p4(ids.rx_port_counter, no, "packets"),
            "in-octets": self._p4(ids.rx_port_counter, no, "bytes"),
            "out-pkts": self._p4(ids.tx_port_counter, no, "packets"),
            "out-octets": self._p4(ids.tx_port_counter, no, "bytes"),
            "in-discards": self._p4(ids.pipeline_drop_counter, no, "packets"),
            "out-discards": lambda _t: sum(tm_port.drops),
        }, windows)

    def _queue(self, ifname: str, q, p: int) -> None:
        self._add(queue_leaves(ifname, p), {
            "transmit-pkts": lambda _t: q.tx_packets[p],
            "transmit-octets": lambda _t: q.tx_bytes[p],
            "dropped-pkts": lambda _t: q.drops[p],
            "dropped-octets": lambda _t: q.drop_bytes[p],
            "ecn-marked-pkts": lambda _t: q.ecn_marks[p],
            "pfc-pause-sent": lambda _t: q.pause_tx[p],
            "pfc-pause-received": lambda _t: q.pause_rx[p],
            "pfc-paused-ns": lambda t: q.paused_ns_at(p, t),
            "depth-octets": lambda _t: q.depth[p],
            "max-depth-octets": lambda _t: q.max_depth[p],
            "headroom-dropped-pkts": lambda _t: q.headroom_drops[p],
        })

    def read(self, indexes: list[int], t_ns: int) -> list:
        """The values of ``indexes`` at fabric time ``t_ns`` (the switch's state now)."""
        readers = self.readers
        return [readers[i](t_ns) for i in indexes]
