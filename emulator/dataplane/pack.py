"""Several embedded switches in one process: one loop for their ports.

Every switch process holds ~20 MB of its own (the pages of the fork
server's heap that its reference counts touched, gRPC's threads), however
small its tables: 12 switches of a 32-host fabric were 262 MB. A pack runs
several::

    python -m emulator.dataplane.pack PACK.json

``PACK.json`` is ``emulator.schema.switch.SwitchPackConfig``: a
``SwitchConfig`` file per member. Each member is the ``EmbeddedSwitch``
its config describes (a pack with InfiniBand members runs as ``python -m
emulator.ib.pack``, which builds those as ``IbSwitch``es and otherwise is
this module), with its own P4Runtime server on its own port, its
own stats and raw logs; only the loop is shared: one ``select`` over every
member's ports until the earliest thing due in any, then each member with
frames waiting or something due takes its turn (``EmbeddedSwitch.turn``),
frame for frame what its own process would do.

Signals: SIGTERM/SIGINT stop every member (each writes its stats); SIGUSR1
takes the snapshot of the members whose ``snapshot_request_path`` exists
(the Mininet node creates it before it signals), so a snapshot asked for
one switch never clears another's counters. A bad member config: one line
naming it, exit 2, nothing started.
"""
from __future__ import annotations

import gc
import json
import signal
import sys
from pathlib import Path

from emulator.clock import MONOTONIC
from emulator.errors import ConfigError
from emulator.lifeline import die_with_runner
from emulator.p4.p4info import P4Info
from emulator.schema.switch import SwitchConfig, SwitchPackConfig, snapshot_request_path
from emulator.vtime.member import process_clock

from .switch import EmbeddedSwitch, close_together, servers_phrase, start_servers, write_atomic


def ethernet_switch(scfg: SwitchConfig, clock) -> tuple[EmbeddedSwitch, P4Info]:
    """The member ``scfg`` describes and its P4Info: an Ethernet switch."""
    if scfg.ib is not None:
        raise ConfigError(scfg.name, "ib", "an InfiniBand switch runs in python -m emulator.ib.pack")
    p4info = P4Info.load(scfg.p4info_path) if scfg.p4info_path else P4Info.load()
    return EmbeddedSwitch(scfg, p4info, clock), p4info


def build_members(cfg: SwitchPackConfig, clock=MONOTONIC, make_switch=ethernet_switch) -> list[tuple]:
    """Every member switch (``make_switch(scfg, clock) -> (switch, p4info)``),
    its sockets open, on the pack's ``clock``; ``ConfigError`` for the first
    bad one (the sockets of those before it closed)."""
    members = []
    try:
        for path in cfg.members:
            scfg = SwitchConfig.load(path)
            try:
                sw, p4info = make_switch(scfg, clock)
            except OSError as e:
                raise ConfigError(path, "ports", f"cannot open them: {e}") from None
            members.append((sw, scfg, p4info))
    except BaseException:
        for sw, _, _ in members:
            sw.close()
            for port in sw.ports.values():
                port.sock.close()
        raise
    return members


def run(switches: list[EmbeddedSwitch], stopped, clock=MONOTONIC) -> None:
    """One loop for ``switches`` until ``stopped()``.

    Each member's next wake is kept and recomputed only after its own turn:
    nothing but its turn changes what it has due (frames arrive through
    select; a packet-out or snapshot asked for is looked at every pass), and
    asking every member every pass cost the pack a third of its CPU."""
    owner = {fd: i for i, sw in enumerate(switches) for fd in sw.fds}     # fd -> member
    fds = list(owner)
    wait_readable = clock.wait_readable
    clock = clock.now_ns
    now = clock()
    for sw in switches:
        sw.begin()
    wakes = [sw.next_wake_ns(now) for sw in switches]
    # each member's (turn, next_wake_ns, control_pending), bound once
    loops = [(i, sw.turn, sw.next_wake_ns, sw.control_pending) for i, sw in enumerate(switches)]
    none: tuple = ()
    while not stopped():
        readable = wait_readable(fds, min(wakes))
        mine: list = [none] * len(loops)
        for fd in readable:
            i = owner[fd]
            if mine[i]:
                mine[i].append(fd)
            else:
                mine[i] = [fd]
        now = clock()
        for i, turn, next_wake, control_pending in loops:
            r = mine[i]
            wake = wakes[i]
            if r or wake <= now or control_pending():
                turn(r, wake)
                wakes[i] = next_wake(clock())


def main(argv: list[str] | None = None, make_switch=ethernet_switch,
         module: str = "emulator.dataplane.pack") -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(f"usage: python -m {module} PACK.json", file=sys.stderr)
        return 2
    die_with_runner(unsupervised_signal=signal.SIGTERM)
    try:
        cfg = SwitchPackConfig.load(argv[0])
        clock = process_clock(cfg.vtime_socket, f"pack:{Path(argv[0]).stem}")
        members = build_members(cfg, clock, make_switch)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    stop = [False]

    def on_stop(*_):
        stop[0] = True

    def on_snapshot(*_):
        for sw, scfg, _ in members:
            req = snapshot_request_path(scfg.stats_path) if scfg.stats_path else None
            if req is not None and req.exists():
                req.unlink(missing_ok=True)
                if hasattr(sw, "request_snapshot"):     # not an InfiniBand switch
                    sw.request_snapshot()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGUSR1, on_snapshot)
    servers = []
    try:
        for sw, scfg, p4info in members:       # each in its own management namespace, if any
            mine = start_servers(sw, scfg, p4info)
            servers += mine
            print(f"{scfg.name}: ready, {servers_phrase(mine)}, {len(scfg.ports)} ports", flush=True)
        gc.collect()                      # as serve() does: startup garbage is long-lived
        gc.freeze()
        gc.set_threshold(100_000, 50, 50)
        run([sw for sw, _, _ in members], lambda: stop[0], clock)
    finally:
        for server in servers:
            server.stop()
        for sw, scfg, _ in members:
            sw.close()
            if scfg.stats_path:
                write_atomic(Path(scfg.stats_path), json.dumps(sw.stats(), indent=1))
        if hasattr(clock, "leave"):
            clock.leave()
        close_together(port.sock for sw, _, _ in members for port in sw.ports.values())
    return 0


if __name__ == "__main__":
    sys.exit(main())
