"""A switch port's operational status as its receiver sees it, for the controller.

A port whose link's direction into it goes down (a scripted ``link_down``,
``schema.faults``) sees no signal from the time the last frame sent before
the fault would have arrived: the fault's time plus the link's propagation
delay. The switch reports that loss of signal, and the signal's return, to
its controller over P4Runtime (``p4rt_server/port_events.py``) at exactly
that fabric time; the switch's loop wakes for it (``next_ns``) like for any
other event. The faults are known to the port's own process (``PortConfig.
rx_down``), so the report needs nothing from the far end: no frame,
no wall clock.

A switch that goes down (``switch_down``: a modelled reboot) loses its
tables and reports nothing while it is down -- its ports' losses are its
neighbours' to report; when it is back (``switch_up``) it tells the
controller, which programs it again.

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


class PortStatusWatch:
    """The port events of a switch in fabric-time order (ties: by port, a
    loss before a return)."""

    __slots__ = ("_events", "_i")

    def __init__(self, ports: Iterable, reboots: Iterable = ()) -> None:
        """ports: ``schema.switch.PortConfig``s (``rx_down``, ``delay_ns``);
        reboots: when the switch itself is down (``DownInterval``s)."""
        events = []
        for d in reboots:
            events.append(PortEvent(d.from_ns, SWITCH, False))
            if d.until_ns < NEVER_NS:
                events.append(PortEvent(d.until_ns, SWITCH, True))
        for p in ports:
            for d in p.rx_down:
                events.append(PortEvent(d.from_ns + p.delay_ns, p.port_no, False))
                if d.until_ns < NEVER_NS:
                    events.append(PortEvent(d.until_ns + p.delay_ns, p.port_no, True))
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
