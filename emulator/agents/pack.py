"""Several host agents in one process: one loop for their NICs.

A host agent is a Python process of its own (``host.py``); 32 of them are
32 interpreters, each with ~10 MB of private memory (copy-on-write pages of
the fork server's heap that reference counts touched). A pack runs several
in one (``net/packing.py`` says which)::

    python -m emulator.agents.pack PACK.json

``PACK.json`` is ``emulator.schema.agent.AgentPackConfig``: a
``HostAgentConfig`` file per member and the pid of a process in that
member's host (its Mininet shell). Each member's NIC is opened in its own
host's network namespace (``emulator.netns.network_of``: its sockets stay
there), so the members are what ``host.py`` would have run, frame for frame;
only the loop is shared: one ``select`` waits on all their sockets until
the earliest timer of any (polling its last ``wake_spin_ns`` when the run's
busy processes have a core each: ``net/packing.wake_spin_ns``), then the members with frames waiting or a timer
due (only those) run their NIC and take its completions (``HostAgent.step``).

Members pass the start gate together (one ``READY`` line and ready file
each, one start time on stdin), and each ends as ``host.py`` would: its
progress file says done and its result is taken as it ends, while the
others go on; the results are written and the NICs closed together when
the last has ended. SIGTERM/SIGINT end them all, each writing what it has. Exit
0 when every member completed, 3 if one did not, 2 if a member's config
is bad (one line naming its file; the NICs opened before it are closed).
"""
from __future__ import annotations

import sys
from pathlib import Path

from emulator.clock import Clock, MonotonicClock
from emulator.schema.agent import AgentPackConfig
from emulator.errors import FabricEmuError

from emulator.nic.packet_socket import call_together
from emulator.lifeline import die_with_runner, stop_on_signals
from emulator.netns import network_of
from emulator.vtime.member import join_virtual_time, process_clock
from .host import AgentConfigError, HostAgent, load_agent
from .start_gate import all_ready_then_start

IDLE_WAIT_NS = 50_000_000      # the longest the loop sleeps with nothing due


def open_members(cfg: AgentPackConfig, clock: Clock | None = None) -> list[HostAgent]:
    """Every member's agent, its NIC opened in its own host's network
    namespace; ``AgentConfigError`` for the first that cannot be (the
    NICs already open are closed)."""
    agents: list[HostAgent] = []
    try:
        for m in cfg.members:
            try:
                with network_of(m.netns_pid):
                    agents.append(load_agent(m.config, clock))
            except FileNotFoundError as e:      # the host's namespace is gone
                raise AgentConfigError(f"{m.config}: host namespace of pid {m.netns_pid}: "
                                       f"{e.strerror}") from None
    except BaseException:
        for a in agents:
            a.nic.close()
            a.logs.close()
        raise
    return agents


def run_members(agents: list[HostAgent], stop_flag: list[bool],
                clock: Clock | None = None) -> None:
    """Gate, then one loop for all members until each has ended; each
    ``conclude``s as it ends (its result taken, logs closed) and all are
    ``release``d together (results written, NICs closed) when the last has."""
    clock = clock or agents[0].clock       # the members' NICs' (one clock a process)
    now_unix = clock.unix_ns()
    for a in agents:
        a.ready_unix_ns = now_unix
    start_at = all_ready_then_start([(a.host, a.cfg.ready_path) for a in agents],
                                    agents[0].cfg.start_at_unix_ns)
    leave = join_virtual_time(clock, lambda: all(a.all_done() for a in agents), stop_flag)
    for a in agents:
        a.begin(start_at)
    owner = {fd: a for a in agents for fd in a.nic.rx_fds}
    io_of = {a: a.io for a in agents}   # (a property: looked up once, not every pass)
    fds = list(owner)                    # what the loop waits on: rebuilt only when a member ends
    wakes = {a: 0 for a in agents}       # member -> monotonic ns it must run again by
    # members with frames waiting, and their fds, as the last select found;
    # None before the first one: every socket is read
    ready: dict[HostAgent, list[int]] | None = None
    ended: list[HostAgent] = []          # concluded, to release together at the end
    try:
        while wakes:
            now = clock.now_ns()
            stop = stop_flag[0]
            # Only the members with frames or something due run: a turn of
            # every NIC for any one's frame would cost the pack a NIC's work per member.
            for a in [a for a, w in wakes.items()
                      if stop or w <= now or ready is None or a in ready]:
                # receive (only where the select found frames), timers, transmit what is due
                io_of[a].run_once(0, None if ready is None else ready.get(a, ()))
                w = a.step(stop)
                if w is None:
                    del wakes[a]
                    for fd in a.nic.rx_fds:
                        owner.pop(fd, None)
                    fds = list(owner)
                    a.conclude()       # released with the others: it would stall them
                    ended.append(a)
                    continue
                now = clock.now_ns()
                w = a.nic.next_wake_ns(now, w)
                if a.gpu is not None and (t := a.gpu.next_event_ns()) is not None:
                    w = min(w, int(t) + 1)
                wakes[a] = w
            if not wakes:
                break
            wake = min(min(wakes.values()), now + IDLE_WAIT_NS)
            # a select even when something is due already (timeout 0): one
            # syscall, where reading every member's sockets blind is two each
            ready = {}
            for fd in clock.wait_readable(fds, wake):
                ready.setdefault(owner[fd], []).append(fd)
    finally:
        leave()                              # virtual time: nobody waits for this process now
        try:
            for a in wakes:                  # an exception: each writes what it has
                a.stop_reason = a.stop_reason or "signal"
                a.conclude()
                ended.append(a)
        finally:
            release_together(ended)


def release_together(agents: list[HostAgent]) -> None:
    """Every ended member's ``release`` at once (``call_together``): a NIC's
    close waits for two RCU grace periods (~24 ms here), so released one
    after the other, four members took 0.1 s of the run's end."""
    call_together(a.release for a in agents)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m emulator.agents.pack PACK.json", file=sys.stderr)
        return 2
    die_with_runner()
    stop = stop_on_signals()
    try:
        cfg = AgentPackConfig.load(argv[0])
        clock = process_clock(cfg.vtime_socket, f"agents:{Path(argv[0]).stem}", agent=True,
                              default=MonotonicClock(spin_ns=cfg.wake_spin_ns))
        agents = open_members(cfg, clock)
    except (FabricEmuError, AgentConfigError) as e:     # the pack's file, or a member's
        print(f"error: {e}", file=sys.stderr)
        return 2
    run_members(agents, stop, clock)
    return 0 if all(a.all_complete() for a in agents) else 3


if __name__ == "__main__":
    sys.exit(main())
