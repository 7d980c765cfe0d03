"""A host agent keeps time only through its NIC's clock (``emulator.clock``):
on a ``ManualClock`` its whole run -- the start, the posts at their offsets,
completions, the linger, its result's stamps -- happens at exact manual
times, with no read of the machine's clock. Virtual time rests on this seam:
a run whose clock is not the machine's must find no part keeping its own."""
from __future__ import annotations

import csv
import select
import socket

from tests.nics import roce_nic
from emulator.agents.host import HostAgent
from emulator.agents.run_logs import RunLogs
from emulator.nic.nic import RoceNic
from emulator.agents.pack import run_members
from emulator.clock import ManualClock
from emulator.schema.agent import HostAgentConfig

from .test_nic_core import IP_A, IP_B, MAC_A, MAC_B, QPN_A, QPN_B, ShimSock

RATE_BPS = 10_000_000_000
MS = 1_000_000
SIZE = 64 * 1024
START_AFTER_NS = 5 * MS          # the run starts this long after the agents are made
OFFSET_NS = 2 * MS               # the flow is posted this long after the start
LINGER_NS = 1 * MS


def make_agents(tmp_path, clock):
    sa, sb = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    start_at = clock.unix_ns() + START_AFTER_NS
    flow = {"flow_id": 3, "size_bytes": SIZE}
    agents = {}
    for h, mac, ip, gw, rip, qpn, rqpn, sock in (
            ("a", MAC_A, IP_A, MAC_B, IP_B, QPN_A, QPN_B, sa),
            ("b", MAC_B, IP_B, MAC_A, IP_A, QPN_B, QPN_A, sb)):
        cfg = HostAgentConfig(
            host=h, ifname="none", mac=mac, ip=ip, gateway_mac=gw, rate_bps=RATE_BPS,
            start_at_unix_ns=start_at, linger_s=LINGER_NS / 1e9, deadline_s=10,
            qps=[{"qpn": qpn, "remote_ip": rip, "remote_qpn": rqpn}],
            send=[{**flow, "qpn": qpn, "start_offset_ns": OFFSET_NS}] if h == "a" else [],
            expect=[{**flow, "qpn": qpn}] if h == "b" else [],
            result_path=str(tmp_path / f"{h}.result.json"))
        logs = RunLogs(str(tmp_path), h)
        nic = roce_nic(None, mac, ip, gw, rate_bps=RATE_BPS, sock=ShimSock(sock), logs=logs,
                      clock=clock)
        agents[h] = HostAgent(cfg, nic=nic, logs=logs)
    return agents, start_at


def test_a_host_agents_run_happens_at_its_clocks_times(tmp_path):
    clock = ManualClock(start_ns=10 * MS, unix_epoch_ns=1_000_000_000_000_000_000)
    agents, start_at = make_agents(tmp_path, clock)
    a, b = agents["a"], agents["b"]
    t0 = clock.now_ns() + START_AFTER_NS
    for ag in agents.values():
        ag.begin(start_at)
    running = dict(agents)
    fds = [fd for ag in agents.values() for fd in ag.nic.rx_fds]
    while running:
        wakes = []
        for h, ag in list(running.items()):
            ag.io.run_once(0)
            w = ag.step()
            if w is None:
                ag.finish_logs()
                del running[h]
                continue
            wakes.append(ag.nic.next_wake_ns(clock.now_ns(), w))
        if running and not select.select(fds, (), (), 0)[0]:
            clock.set(min(wakes))          # nothing in flight: on to the next thing due
    res_a, res_b = a.result(), b.result()
    assert res_a["complete"] and res_b["complete"] and res_b["expect"][0]["intact"]
    send = res_a["send"][0]
    # posted exactly at the start plus its offset, on the manual clock's Unix time
    assert send["post_unix_ns"] == send["scheduled_unix_ns"] == start_at + OFFSET_NS
    assert a.ready_unix_ns is None or a.ready_unix_ns <= start_at
    # 64 KiB at 10 Gbit/s: at least its serialization, and no second of the machine's
    assert SIZE * 8 * 1e9 / RATE_BPS <= send["fct_ns"] < 2 * MS
    # each agent ended when its linger ran out, on the manual clock
    assert a.stop_reason == b.stop_reason == "done"
    assert res_a["end_unix_ns"] == clock.unix_ns() <= start_at + OFFSET_NS + 2 * MS + LINGER_NS
    with open(tmp_path / "a.flows.csv") as f:
        rows = list(csv.reader(f))[1:]
    assert int(rows[0][0]) == t0 + OFFSET_NS and rows[-1][2] == str(SIZE)


def test_a_pack_of_agents_runs_on_its_members_clock(tmp_path):
    clock = ManualClock(start_ns=10 * MS, unix_epoch_ns=1_000_000_000_000_000_000)
    agents, start_at = make_agents(tmp_path, clock)
    run_members(list(agents.values()), [False])        # the clock: the members' own
    res = {h: ag.result() for h, ag in agents.items()}
    assert res["a"]["complete"] and res["b"]["complete"]
    assert res["a"]["send"][0]["post_unix_ns"] == start_at + OFFSET_NS
    assert res["a"]["ready_unix_ns"] == 1_000_000_000_000_000_000 + 10 * MS
