"""Samples taken by the switch's own loop, at exact fabric times.

A STREAM subscription's SAMPLE leaves are read on a grid of the switch's
clock -- multiples of the interval from fabric time 0 -- and its ON_CHANGE
leaves (oper-status) at the exact times they change, by the loop that owns
the state (``EmbeddedSwitch.turn`` calls ``tick`` first thing): never by a
gRPC thread at a wall-clock moment. So a virtual-time run's samples are the
same in every rerun.

A sample at ``t`` is the state after every event at or before ``t``. At
the start of a turn at ``now`` nothing has changed since the last turn, so
every grid point before ``now`` reads the state as it is then; one at
``now`` waits for the next turn. A dilated loop wakes just past each grid
point (``next_due_ns``); a virtual one needs no wake-up to be exact -- idle,
the state holds still -- so, like its queue-depth samples, it skips them
and catches up at its next turn. When the switch stops, ``close`` serves
the grid up to its last turn and, off the grid, a last sample at that
turn's time: the state the run ended with (what its stats.json holds). Its
own last turn, not its process's clock: a pack's clock runs on to its
other switches' events, and the samples must not depend on the packing.

What a tick reads goes to the subscription's queue as plain values; the
gRPC thread that serves the subscription builds the messages.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

from emulator.clock import NEVER_NS
from emulator.dataplane.gnmi_server.leaves import Catalog

END = None                 # queued last: the switch is stopping


@dataclass(eq=False)
class StreamSub:
    """One STREAM subscription: its SAMPLE groups (interval ns -> leaf
    indexes) and its ON_CHANGE leaves; what the loop read goes to ``out`` as
    (fabric ns, leaf indexes, values)."""
    sample: dict[int, list[int]]
    on_change: list[int]
    since_ns: int                           # the switch's time when it was made
    out: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    next_ns: dict[int, int] = field(default_factory=dict)
    checked_ns: int = 0                     # ON_CHANGE: changes up to here were sent

    def __post_init__(self) -> None:
        for interval in self.sample:
            self.next_ns[interval] = -(-self.since_ns // interval) * interval
        self.checked_ns = self.since_ns


class Sampler:
    """The STREAM subscriptions of one switch, as its loop serves them."""

    def __init__(self, catalog: Catalog, virtual: bool):
        self.catalog = catalog
        self.virtual = virtual
        self._lock = threading.Lock()        # ``subs`` is changed by gRPC threads
        # the streams served (empty: nothing to sample; the loop looks each turn)
        self.subs: tuple[StreamSub, ...] = ()
        self.samples = 0                     # (switch's) sample instants served
        self.last_turn_ns = 0                # when the loop last ticked (``close``)

    def add(self, sub: StreamSub) -> None:
        with self._lock:
            self.subs = self.subs + (sub,)

    def remove(self, sub: StreamSub) -> None:
        with self._lock:
            self.subs = tuple(s for s in self.subs if s is not sub)

    def next_due_ns(self) -> int:
        """When the loop must wake for a sample or a change (NEVER: none).
        Virtual time: only changes (samples catch up, see the module)."""
        due = NEVER_NS
        down = self.catalog.down
        for sub in self.subs:
            if not self.virtual and sub.next_ns:
                due = min(due, min(sub.next_ns.values()) + 1)
            for i in sub.on_change:
                due = min(due, down[i].next_change_ns(sub.checked_ns))
        return due

    def tick(self, now_ns: int, final: bool = False) -> None:
        """Serve every grid point before ``now_ns`` and every change up to it
        (the loop, before its turn changes anything); ``final``: the grid up
        to ``now_ns`` and the last sample (``close``)."""
        subs = self.subs
        if not subs:
            return
        if not final:
            self.last_turn_ns = now_ns
        read = self.catalog.read
        for sub in subs:
            for interval, leaves in sub.sample.items():
                t = sub.next_ns[interval]
                while t < now_ns or (final and t == now_ns):
                    sub.out.put((t, leaves, read(leaves, t)))
                    self.samples += 1
                    t += interval
                sub.next_ns[interval] = t
                if final and t - interval != now_ns:
                    sub.out.put((now_ns, leaves, read(leaves, now_ns)))
            if sub.on_change and sub.checked_ns < now_ns:
                changes = sorted((t, i, status) for i in sub.on_change
                                 for t, status in self.catalog.down[i].changes(sub.checked_ns, now_ns))
                for t, i, status in changes:
                    sub.out.put((t, [i], [status]))
                sub.checked_ns = now_ns

    def close(self) -> None:
        """The switch stopped (its loop has ended): the last samples, at its
        last turn, then every subscription ends."""
        self.tick(max([self.last_turn_ns] + [s.since_ns for s in self.subs]), final=True)
        with self._lock:
            subs, self.subs = self.subs, ()
        for sub in subs:
            sub.out.put(END)
