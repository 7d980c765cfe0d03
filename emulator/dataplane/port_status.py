"""A switch port's operational status: when it has no signal -- one rule for
the controller's reports and gNMI's oper-status (docs/faults.md, "Detection").

IEEE 802.3's link fault signalling (clause 46, 46.3.4; clause 81 for 40/100
Gb/s): a port whose receiver loses the signal is in local fault and sends
remote fault to its partner; either takes the link down at that end. With
``d`` the link's delay, a port has no signal (``no_signal_windows``):

* local fault: the direction INTO it down over [a, b) (at its sender,
  ``PortConfig.rx_down``): over [a + d, b + d);
* remote fault: the direction it SENDS on down over [c, e)
  (``PortConfig.faults.down``): the partner's local fault over [c + d, e + d),
  its remote fault here a delay later, [c + 2d, e + 2d);

and their union (while the partner's way to us is down its remote fault is
lost, but then we are in local fault: the union is exact).

The switch reports each change to its controller over P4Runtime
(``p4rt_server/port_events.py``) at that fabric time, its loop waking for it
(``next_ns``); its gNMI server serves the same windows. A switch that goes
down (``switch_down``: a modelled reboot) reports nothing while down; when
back (``switch_up``) it tells the controller, which programs it again.

Pure: times are arguments.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple

from emulator.clock import NEVER_NS


SWITCH = 0          # a PortEvent's port_no for the switch itself (a modelled reboot)


class PortEvent(NamedTuple):
    at_ns: int      # fabric time the receiver loses (or regains) the signal
    port_no: int    # SWITCH: the switch goes down (its state lost) or is back
    up: bool


def _shifted(intervals, by_ns: int) -> list[tuple[int, int]]:
    return [(d.from_ns + by_ns, d.until_ns + by_ns if d.until_ns < NEVER_NS else NEVER_NS)
            for d in intervals]


def no_signal_windows(port_cfg) -> list[tuple[int, int]]:
    """When the port has no signal (local or remote fault, the module
    docstring): sorted, merged [from, until) windows of fabric ns
    (``until`` NEVER_NS: to the run's end). ``port_cfg``: a
    ``schema.switch.PortConfig`` (``rx_down``, ``faults``, ``delay_ns``)."""
    d = port_cfg.delay_ns
    windows = _shifted(port_cfg.rx_down, d)
    if port_cfg.faults is not None:
        windows += _shifted(port_cfg.faults.down, 2 * d)
    return merged_windows(windows)


def merged_windows(windows) -> list[tuple[int, int]]:
    """[from, until) windows sorted, those that overlap or touch as one."""
    merged: list[list[int]] = []
    for start, end in sorted(windows):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


class PortStatusWatch:
    """The port events of a switch in fabric-time order (ties: by port, a
    loss before a return)."""

    __slots__ = ("_events", "_i")

    def __init__(self, ports: Iterable, reboots: Iterable = ()) -> None:
        """ports: ``schema.switch.PortConfig``s (``no_signal_windows``);
        reboots: when the switch itself is down (``DownInterval``s)."""
        events = []
        for d in reboots:
            events.append(PortEvent(d.from_ns, SWITCH, False))
            if d.until_ns < NEVER_NS:
                events.append(PortEvent(d.until_ns, SWITCH, True))
        for p in ports:
            for start, end in no_signal_windows(p):
                events.append(PortEvent(start, p.port_no, False))
                if end < NEVER_NS:
                    events.append(PortEvent(end, p.port_no, True))
        events.sort(key=lambda e: (e.at_ns, e.port_no, e.up))
        self._events = events
        self._i = 0

    def __bool__(self) -> bool:
        return bool(self._events)

    def next_ns(self) -> int:
        """When the next event falls due (``NEVER_NS``: no more)."""
        return self._events[self._i].at_ns if self._i < len(self._events) else NEVER_NS

    def due(self, now_ns: int) -> list[PortEvent]:
        """The events due by ``now_ns``, each once, in order."""
        out = []
        events = self._events
        while self._i < len(events) and events[self._i].at_ns <= now_ns:
            out.append(events[self._i])
            self._i += 1
        return out
