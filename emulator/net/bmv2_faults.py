"""Scripted link faults on the BMv2 target (dilated time): what BMv2 can do,
and the commands that do it.

BMv2 keeps its own clock, so its faults act on the wall clock of a dilated
run: the fault at fabric ``t`` at wall ``t0 + t x D`` (``Bmv2FaultPlayer``).
What it can do, through the real link or its own runtime:

* ``link_down`` / ``link_up`` / ``link_flap``: the link's veth pair set down
  and up in its namespaces (``ip link set dev IF down|up``, both ends: a
  veth end that goes down takes its peer's carrier with it). A veth pair
  has no direction of its own, so only ``direction: both`` is possible.
* ``link_degrade``: the sending switch port's egress queues (all eight
  priorities) at the degraded rate through BMv2's Thrift runtime
  (``set_queue_rate``, packets/s from the dilated rate and the MTU frame,
  the conversion of ``net/bmv2.py``), and back at its end. A direction a
  host's NIC sends on is not BMv2's to slow.

Everything else is refused in one line naming the kind and why before
anything is built (``experiment.faults.bmv2_fault_refusal``): BMv2 has no
per-frame hook on a link (random loss, bit errors), its state goes only
with its process (switch_down/up: the embedded target models the reboot),
and a host's storm or stall is timed in virtual time.

Pure but for the player's thread: the steps are data, the runner executes them.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from emulator.atomic import atomic_write_text
from emulator.clock import NEVER_NS
from emulator.net.bmv2 import NUM_PRIORITIES, queue_rate_pps

@dataclass(frozen=True)
class Bmv2FaultStep:
    """Commands to run at fabric time ``at_ns``: ``via`` "ip" in ``node``'s
    namespace (its shell), or "thrift" on switch ``node``'s Thrift CLI."""
    at_ns: int
    node: str
    via: str
    commands: tuple[str, ...]
    link: tuple[str, str] | None = None     # the step's link, its ends sorted

    def as_dict(self) -> dict:
        return {"at_ns": self.at_ns, "node": self.node, "via": self.via,
                "commands": list(self.commands), "link": list(self.link) if self.link else None}


def link_steps(fabric, ends: dict) -> list[Bmv2FaultStep]:
    """The veth pairs' downs and ups: ``ends`` (sender, receiver) ->
    ``EndFaults`` (``experiment.faults.end_faults``); a link's two
    directions are down together (``VETH_BOTH``), so each link once."""
    steps, seen = [], set()
    for (sender, receiver), ef in sorted(ends.items()):
        link = frozenset((sender, receiver))
        if not ef.down or link in seen:
            continue
        seen.add(link)
        port = fabric.port_towards(sender, receiver)
        sides = ((sender, port.ifname), (receiver, fabric.port(receiver, port.peer_port_no).ifname))
        for d in ef.down:
            for state, at_ns in (("down", d.from_ns), ("up", d.until_ns)):
                if at_ns < NEVER_NS:
                    steps += [Bmv2FaultStep(at_ns, node, "ip", (f"ip link set dev {ifname} {state}",),
                                            tuple(sorted(link)))
                              for node, ifname in sides]
    return steps


def downed_receivers(fabric, ends: dict) -> dict[str, tuple[str, str]]:
    """Each direction a link fault takes down, "sender->receiver" -> the
    receiver's (node, ifname): the veth end whose kernel counts what got through."""
    out = {}
    for (sender, receiver), ef in sorted(ends.items()):
        if ef.down:
            port = fabric.port_towards(sender, receiver)
            out[f"{sender}->{receiver}"] = (receiver, fabric.port(receiver, port.peer_port_no).ifname)
    return out


def veth_rx_frames(ip_json: str) -> int:
    """The frames a link end received, from ``ip -s -j link show dev IF``."""
    return int(json.loads(ip_json)[0]["stats64"]["rx"]["packets"])


def degrade_steps(fabric, ends: dict, dilation: float, mtu_frame_bytes: int) -> list[Bmv2FaultStep]:
    """A degraded direction's sending switch port: all its queues at the
    rate then (packets/s, dilated), at each rate change."""
    steps = []
    for (sender, receiver), ef in sorted(ends.items()):
        if not ef.rates:
            continue
        port = fabric.port_towards(sender, receiver)
        link = fabric.links[port.link_index]
        for rc in ef.rates:
            pps = queue_rate_pps(max(1, int(link.rate_bps * rc.rate_fraction / dilation)), mtu_frame_bytes)
            steps.append(Bmv2FaultStep(rc.at_ns, sender, "thrift", tuple(
                f"set_queue_rate {pps} {port.port_no} {prio}" for prio in range(NUM_PRIORITIES)),
                tuple(sorted((sender, receiver)))))
    return steps


def bmv2_fault_steps(fabric, ends: dict, dilation: float, mtu_frame_bytes: int) -> list[Bmv2FaultStep]:
    """Every step of a run, in time order (ties: links before rates, then by node)."""
    steps = link_steps(fabric, ends) + degrade_steps(fabric, ends, dilation, mtu_frame_bytes)
    return sorted(steps, key=lambda s: (s.at_ns, s.via != "ip", s.node))


class Bmv2FaultPlayer:
    """Runs the steps on the wall clock of a dilated run: the step at fabric
    ``t`` at monotonic ``t0_ns + t x dilation``; ``applied``: (step, the
    fabric ns it ran at, from the wall clock) for the results."""

    def __init__(self, steps: Iterable[Bmv2FaultStep], execute: Callable[[Bmv2FaultStep], None],
                 dilation: float, clock_ns: Callable[[], int] = time.monotonic_ns,
                 sleep: Callable[[float], None] = time.sleep,
                 rx_frames: Callable[[], dict[str, int]] = dict):
        self.steps = sorted(steps, key=lambda s: s.at_ns)
        self.execute = execute
        # the downed directions' receivers' counts from before the traffic
        self.rx_frames = rx_frames
        self.rx_before = rx_frames()
        self.dilation = float(dilation)
        self.clock_ns = clock_ns
        self.sleep = sleep
        self.applied: list[tuple[Bmv2FaultStep, float]] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run(self, t0_ns: int) -> None:
        """Each step at its time, until the last or ``stop``."""
        for step in self.steps:
            while not self._stop.is_set():
                left_ns = t0_ns + step.at_ns * self.dilation - self.clock_ns()
                if left_ns <= 0:
                    break
                self.sleep(min(left_ns / 1e9, 0.05))
            if self._stop.is_set():
                return
            self.execute(step)
            self.applied.append((step, (self.clock_ns() - t0_ns) / self.dilation))

    def start(self, t0_ns: int) -> "Bmv2FaultPlayer":
        def body():
            try:
                self.run(t0_ns)
            except BaseException as e:      # the runner reports it after the traffic
                self.error = e
        self._thread = threading.Thread(target=body, name="bmv2-faults", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def record(self) -> dict:
        """The steps as played (``applied_ns``: the fabric ns they ran at) and
        per downed direction the frames its receiver's veth got since the start."""
        after = self.rx_frames()
        return {"steps": [{**step.as_dict(), "applied_ns": int(round(t))} for step, t in self.applied],
                "rx_frames": {d: n - self.rx_before.get(d, 0) for d, n in after.items()}}

    def write(self, path) -> None:
        atomic_write_text(path, json.dumps(self.record(), indent=1))
