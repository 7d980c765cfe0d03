"""NVLink / NVSwitch inside one server, in process (htsim style).

An NVSwitch with one port per GPU. A transfer from GPU a to GPU b occupies
a's uplink (GPU -> switch) and b's downlink (switch -> GPU), each serialized
at ``rate_bps``, and arrives ``delay_ns`` after its last byte left the
downlink. Messages are modelled as fluid and cut-through: the downlink
starts when both the message has started on the uplink and the downlink is
free, and cannot finish before the uplink has; two GPUs sending to one GPU
therefore share its downlink one message after the other (FIFO by message,
and messages are the schedule's slices). No frames cross a veth: NVLink is
not Ethernet, and at 900 GB/s packets would swamp a Python process.

Times are wall ns of the injected clock (``emulator.clock``); ``rate_bps``
and ``delay_ns`` are already dilated (rate / D, delay x D) like every rate handed to an agent.
The transfer copies its bytes when it is issued (the caller passes a copy),
so what arrives is exactly what was sent.
"""
from __future__ import annotations

from typing import Callable

from emulator.clock import MONOTONIC, Clock, TimerHeap


class NvlinkSwitch:
    def __init__(self, ports: int, rate_bps: float, delay_ns: float, clock: Clock = MONOTONIC):
        # a 1-GPU server has no NVLink (rate 0, NvlinkConfig): nothing crosses it
        if ports < 1 or (ports > 1 and rate_bps <= 0) or delay_ns < 0:
            raise ValueError("NVLink needs ports >= 1, rate_bps > 0 (with 2 GPUs or more), delay_ns >= 0")
        self.rate_bps, self.delay_ns, self.clock = float(rate_bps), float(delay_ns), clock
        self.up_free_ns = [0.0] * ports       # when each GPU's uplink is next free
        self.down_free_ns = [0.0] * ports     # when each GPU's downlink is next free
        self.tx_bytes = [0] * ports
        self.rx_bytes = [0] * ports
        self._events = TimerHeap()            # (fn, args): arrivals and credits

    def serialization_ns(self, nbytes: int) -> float:
        return nbytes * 8e9 / self.rate_bps

    def transfer(self, src: int, dst: int, nbytes: int, on_arrival: Callable, *args) -> float:
        """Send ``nbytes`` from GPU ``src`` to GPU ``dst``; call
        ``on_arrival(*args)`` when the last byte has arrived. Returns that time."""
        if src == dst:
            raise ValueError("an NVLink transfer needs two different GPUs")
        now = float(self.clock.now_ns())
        ser = self.serialization_ns(nbytes)
        up_start = max(now, self.up_free_ns[src])
        up_end = up_start + ser
        self.up_free_ns[src] = up_end
        down_start = max(up_start, self.down_free_ns[dst])
        down_end = max(down_start + ser, up_end)
        self.down_free_ns[dst] = down_end
        self.tx_bytes[src] += nbytes
        self.rx_bytes[dst] += nbytes
        due = down_end + self.delay_ns
        self._events.push(due, (on_arrival, args))
        return due

    def after(self, delay_ns: float, fn: Callable, *args) -> None:
        """Call ``fn(*args)`` ``delay_ns`` from now (a flag written over
        NVLink, e.g. a credit: latency only, its bytes are negligible)."""
        self._events.push(self.clock.now_ns() + delay_ns, (fn, args))

    def poll(self, now: int | None = None) -> int:
        """Run the events that are due; return how many ran."""
        return self._events.run_due(self.clock.now_ns() if now is None else now)

    def next_event_ns(self) -> float | None:
        return self._events.next_due_ns()

    def idle(self) -> bool:
        return not self._events
