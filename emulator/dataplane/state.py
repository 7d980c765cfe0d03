"""The forwarding state of one embedded switch, as P4Runtime writes it.

The P4Runtime server (``emulator.dataplane.p4rt_server``) is the only writer;
the packet pipeline (``emulator.dataplane.pipeline``) is the reader. Entries
are kept in the target-neutral, already-decoded form of
``emulator.p4.entities`` (ints, not bytes), keyed the way P4Runtime
identifies them, so that Read returns what Write stored.

The pipeline compiles these dicts into its own lookup structures and caches
per-flow results; ``generation`` tells it when to throw those away. Both run
in one process; writes hold ``lock`` and bump ``generation`` last, so a
reader that sees a new generation sees the complete write.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

from emulator.clock import NEVER_NS

# The decoded entries are P4Runtime's (target-neutral); the pipeline imports
# ActionCall from here, with the state that holds them.
from emulator.p4.entities import ActionCall, ActionProfileGroup, TableEntry


@dataclass
class ActionProfileState:
    members: dict[int, ActionCall] = field(default_factory=dict)
    groups: dict[int, ActionProfileGroup] = field(default_factory=dict)


class CounterArray:
    """An indexed packets-and-bytes counter (v1model ``counter``)."""

    __slots__ = ("packets", "bytes")

    def __init__(self, size: int):
        self.packets = [0] * size
        self.bytes = [0] * size

    def count(self, index: int, nbytes: int) -> None:
        if 0 <= index < len(self.packets):
            self.packets[index] += 1
            self.bytes[index] += nbytes


class SwitchState:
    """Tables, action profiles and counters of one switch; the P4Info says which exist."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.generation = 0
        # table_id -> {entry.key(): TableEntry}
        self.tables: dict[int, dict[tuple, TableEntry]] = {}
        # action_profile_id -> ActionProfileState
        self.action_profiles: dict[int, ActionProfileState] = {}
        # counter_id -> CounterArray
        self.counters: dict[int, CounterArray] = {}
        # session_id -> p4.v1.CloneSessionEntry (see emulator/dataplane/p4rt_server/pre.py)
        self.clone_sessions: dict = {}
        # Set by the switch: inject a controller packet-out (payload, egress_port).
        self.packet_out_handler: Callable[[bytes, int], None] | None = None
        # Set by the P4Runtime server: deliver a packet-in (payload, ingress_port).
        self.packet_in_handler: Callable[[bytes, int], None] | None = None
        # Set by the switch: its clock's fabric time (a write timed for the
        # past is refused, p4rt_server/port_events.py).
        self.fabric_now_ns: Callable[[], int] | None = None
        # Set by the P4Runtime server: report a port's loss (up False) or
        # return of signal at a fabric time; True once the controller answered.
        self.port_status_handler: Callable[[int, bool, int], bool] | None = None
        # ... and the switch's own going down (its state lost) or coming back
        self.switch_status_handler: Callable[[bool, int], bool] | None = None
        # Writes the controller timed for a fabric time (port_events.py): the
        # earliest one's time, and what applies those due (the switch's loop).
        self.next_write_ns = NEVER_NS
        self.apply_due_writes: Callable[[int], None] = lambda now_ns: None
        self.failed_timed_writes = 0     # timed writes that failed when applied (a controller bug)

    def reset(self, table_ids, action_profile_ids, counter_sizes: dict[int, int]) -> None:
        """Empty state for a newly set pipeline config."""
        with self.lock:
            self.tables = {tid: {} for tid in table_ids}
            self.action_profiles = {aid: ActionProfileState() for aid in action_profile_ids}
            self.counters = {cid: CounterArray(size) for cid, size in counter_sizes.items()}
            self.clone_sessions = {}
            self.generation += 1

    def wipe(self) -> None:
        """A modelled reboot: every table entry, action-profile member and
        group and clone session gone, as P4Runtime wrote them; the counters
        are kept, so the run's accounting still adds up."""
        with self.lock:
            self.tables = {tid: {} for tid in self.tables}
            self.action_profiles = {aid: ActionProfileState() for aid in self.action_profiles}
            self.clone_sessions = {}
            self.on_wipe()
            self.generation += 1

    def on_wipe(self) -> None:
        """Set by the P4Runtime server: its managers' own bookkeeping goes too."""

    def changed(self) -> None:
        """Call after every completed write batch (holding ``lock``)."""
        self.generation += 1
