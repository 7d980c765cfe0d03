"""The PFC watchdog of the embedded traffic manager, as SONiC's pfcwd does it.

SONiC (the "PFC Watchdog Design" HLD, sonic-net/SONiC wiki; orchagent's
``pfc_detect_*.lua`` and ``pfc_restore.lua``) watches each lossless queue:

* **detection**: the queue is held paused by PFC frames its port received,
  it holds frames and sends none, for ``detection_time``: a PFC storm
  (a peer that keeps pausing, as a stuck NIC does);
* **mitigation**: ``drop`` discards what the queue holds and what arrives for
  it, and the frames of that priority that arrive on that port (SONiC's
  ingress and egress drop ACLs); ``forward`` sends the queue's frames as if
  no pause had come. Either way the queue ignores PFC frames from then on;
* **restoration**: once no PAUSE came for ``restoration_time``, the queue
  honours PFC again.

SONiC polls its counters every ``POLL_INTERVAL`` (100 ms by default), so it
finds a storm up to one interval late. Here each queue is looked at when
its detection time ends, and again every detection time while it stays
paused (a paused queue with no frames harms nobody: it is not a storm
until it holds some); a storm ends exactly ``restoration_time`` after the
last PAUSE: event times in fabric ns, the same in every rerun.

Pure like the rest of the traffic manager: times come in as arguments.
A queue is a cell, ``port << 3 | priority`` (the buffer's cell numbering).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from emulator.clock import TimerHeap
from emulator.wire import NUM_PRIORITIES

if TYPE_CHECKING:
    from emulator.dataplane.priority_port import PriorityPort
    from emulator.dataplane.tm import TrafficManager

_DETECT, _RESTORE = 0, 1
STORM_EVENT, RESTORE_EVENT = "pfcwd_storm", "pfcwd_restore"


class PfcWatchdog:
    """Storm state, timers and counters per (port, priority) queue."""

    def __init__(self, tm: "TrafficManager", detection_ns: int, restoration_ns: int,
                 action: str = "drop"):
        self.tm = tm
        self.detection_ns = detection_ns
        self.restoration_ns = restoration_ns
        self.action = action
        self.drop = action == "drop"
        self.timers = TimerHeap()                # (cell, _DETECT | _RESTORE)
        # cells in a storm; the TM's enqueue drops their frames (action drop)
        self.storming: set[int] = set()
        self.last_pause_ns: dict[int, int] = {}
        self.storms: dict[int, int] = {}         # storms detected, per cell
        self.restores: dict[int, int] = {}       # storms restored, per cell
        self.tx_drops: dict[int, int] = {}       # frames of the stormed queue dropped
        self.rx_drops: dict[int, int] = {}       # frames arriving on the stormed port dropped

    # ------------------------------------------------------------ PFC in
    def pause_rx(self, now_ns: int, port: "PriorityPort", prio: int) -> bool:
        """A PAUSE for ``prio`` came in on ``port`` at ``now_ns``: True if
        the queue is in a storm and ignores it, else False (the caller
        pauses the queue, then calls ``watch``)."""
        cell = port.port_no << 3 | prio
        self.last_pause_ns[cell] = now_ns
        return cell in self.storming

    def watch(self, now_ns: int, port: "PriorityPort", prio: int) -> None:
        """The queue was paused at ``now_ns``: if that pause began now, look
        again when the detection time has run."""
        if port.paused_since[prio] == now_ns:
            self.timers.push(now_ns + self.detection_ns, (port.port_no << 3 | prio, _DETECT))

    # ------------------------------------------------------------ timers
    def next_due_ns(self) -> int | None:
        return self.timers.next_due_ns()

    def poll(self, now_ns: int) -> None:
        """The detections and restorations due by ``now_ns``, by time then cell."""
        due = self.timers.next_due_ns()
        if due is None or due > now_ns:
            return
        for _, (cell, kind) in sorted(self.timers.pop_due_with_time(now_ns)):
            port = self.tm.ports[cell >> 3]
            if kind == _DETECT:
                self._detect(now_ns, port, cell & 7)
            else:
                self._restore(now_ns, port, cell & 7)

    def _detect(self, now_ns: int, port: "PriorityPort", prio: int) -> None:
        cell = port.port_no << 3 | prio
        if cell in self.storming:
            return
        self.tm.serve_port(now_ns, port)         # frames due by now go; a pause that ran out ends
        if not port.held(prio, now_ns):
            return                               # the next pause is watched anew
        held_ns = now_ns - port.paused_since[prio]
        if held_ns < self.detection_ns:          # paused again since: its own time
            self.timers.push(port.paused_since[prio] + self.detection_ns, (cell, _DETECT))
        elif port.nonempty >> prio & 1:
            self._storm(now_ns, port, prio)
        else:                                    # paused, nothing held: look again later
            self.timers.push(now_ns + self.detection_ns, (cell, _DETECT))

    def _storm(self, now_ns: int, port: "PriorityPort", prio: int) -> None:
        cell = port.port_no << 3 | prio
        self.storming.add(cell)
        self.storms[cell] = self.storms.get(cell, 0) + 1
        self.tm.serve_port(now_ns, port)         # the link is at now: what it frees starts now
        port.lift_pause(prio, now_ns)
        self.tm.log(now_ns, port.port_no, prio, STORM_EVENT, int(self.drop))
        if self.drop:
            self.tx_drops[cell] = self.tx_drops.get(cell, 0) + self.tm.flush_queue(now_ns, port, prio)
        last = self.last_pause_ns.get(cell, now_ns)
        self.timers.push(max(now_ns, last + self.restoration_ns), (cell, _RESTORE))

    def _restore(self, now_ns: int, port: "PriorityPort", prio: int) -> None:
        cell = port.port_no << 3 | prio
        last = self.last_pause_ns.get(cell, 0)
        if now_ns < last + self.restoration_ns:  # a PAUSE came since: wait from it
            self.timers.push(last + self.restoration_ns, (cell, _RESTORE))
            return
        self.storming.discard(cell)
        self.restores[cell] = self.restores.get(cell, 0) + 1
        self.tm.log(now_ns, port.port_no, prio, RESTORE_EVENT, int(self.drop))

    # ------------------------------------------------------------ drops
    def dropped(self, cell: int, egress: bool) -> None:
        """A frame the storm of ``cell`` dropped: bound for its queue
        (``egress``), or arriving on its port in its priority."""
        counts = self.tx_drops if egress else self.rx_drops
        counts[cell] = counts.get(cell, 0) + 1

    # ------------------------------------------------------------ results
    def port_stats(self, port_no: int) -> list[dict]:
        """Per priority of ``port_no``: storms detected and restored, frames dropped."""
        out = []
        for p in range(NUM_PRIORITIES):
            cell = port_no << 3 | p
            out.append({"pfcwd_storms": self.storms.get(cell, 0),
                        "pfcwd_restores": self.restores.get(cell, 0),
                        "pfcwd_tx_drops": self.tx_drops.get(cell, 0),
                        "pfcwd_rx_drops": self.rx_drops.get(cell, 0),
                        "pfcwd_storming": cell in self.storming})
        return out

    def clear_stats(self) -> None:
        for counts in (self.storms, self.restores, self.tx_drops, self.rx_drops):
            counts.clear()
