"""How host agents and switches are cut into processes, and a pack's bad input."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from emulator.net.packing import (
    AUTO_AGENT_PROCESSES, AUTO_SMALL_AGENTS, AUTO_SMALL_SWITCHES, WAKE_SPIN_NS,
    agent_packs as packs, small_fabric_processes, switch_packs, wake_spin_ns,
)
from emulator.schema.load import FieldError
from emulator.schema.agent import AgentPackConfig
from tests.conftest import REPO

H = [f"h{i}" for i in range(1, 33)]


def test_auto_runs_a_small_fabrics_agents_in_half_as_many_processes_as_cores():
    small = H[:AUTO_SMALL_AGENTS]
    assert packs(small, "auto", cpus=2) == [small]            # 2 cores: one process of agents
    assert packs(small, "auto", cpus=4) == [small[:4], small[4:]]
    assert packs(H[:3], "auto", cpus=16) == [["h1"], ["h2"], ["h3"]]   # never an empty process
    assert packs(H[:3], "auto", cpus=1) == [H[:3]]
    assert small_fabric_processes(2) == 1 and small_fabric_processes(1) == 1
    assert small_fabric_processes(8) == 4


def test_auto_packs_more_agents_evenly_into_the_limit_in_order():
    groups = packs(H, "auto")
    assert len(groups) == AUTO_AGENT_PROCESSES
    assert [len(g) for g in groups] == [32 // AUTO_AGENT_PROCESSES] * AUTO_AGENT_PROCESSES
    assert [h for g in groups for h in g] == H
    sizes = [len(g) for g in packs(H[:AUTO_SMALL_AGENTS + 1], "auto", cpus=2)]
    assert len(sizes) == AUTO_AGENT_PROCESSES and max(sizes) - min(sizes) <= 1
    assert sorted(sizes, reverse=True) == sizes and sum(sizes) == AUTO_SMALL_AGENTS + 1


def test_a_fixed_size_fills_groups_in_order():
    assert packs(H[:5], 2) == [["h1", "h2"], ["h3", "h4"], ["h5"]]
    assert packs(H[:2], 4) == [["h1", "h2"]]


def test_auto_runs_a_small_fabrics_switches_by_the_cores_and_packs_threes_beyond():
    S = [f"s{i}" for i in range(1, 21)]
    small = S[:AUTO_SMALL_SWITCHES]
    assert switch_packs(small, "auto", cpus=2) == [small]
    assert switch_packs(small, "auto", cpus=4) == [small[:5], small[5:]]
    groups = switch_packs(S[:12], "auto", cpus=2)
    assert [len(g) for g in groups] == [3, 3, 3, 3] and [s for g in groups for s in g] == S[:12]
    assert [len(g) for g in switch_packs(S, "auto")] == [3, 3, 3, 3, 3, 3, 2]
    assert switch_packs(S[:3], 2) == [["s1", "s2"], ["s3"]]
    assert switch_packs(S[:3], 1) == [["s1"], ["s2"], ["s3"]]


def test_the_experiment_schema_takes_auto_or_a_positive_count():
    from emulator.schema.experiment import AgentsSpec, SwitchSpec
    for spec in (AgentsSpec, SwitchSpec):
        assert spec().per_process == "auto"
        assert spec(per_process=4).per_process == 4
        for bad in (0, -1, "some"):
            with pytest.raises(ValueError):
                spec(per_process=bad)


def test_a_pack_needs_members():
    with pytest.raises((ValueError, FieldError)):
        AgentPackConfig(members=[])


def _run_pack(tmp_path, module: str, members, name: str) -> subprocess.CompletedProcess:
    """``python -m module`` on a pack config of ``members``, as a runner would start it."""
    path = tmp_path / name
    path.write_text(json.dumps({"members": members}))
    env = {k: v for k, v in os.environ.items() if k != "FABRIC_EMU_RUNNER_PID"}
    return subprocess.run([sys.executable, "-m", module, str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env=env)


def _pack(tmp_path, members) -> subprocess.CompletedProcess:
    return _run_pack(tmp_path, "emulator.agents.pack", members, "p.pack.json")


def test_a_member_with_a_bad_config_exits_2_naming_its_file(tmp_path):
    bad = tmp_path / "h2.agent.json"
    bad.write_text(json.dumps({"host": "h2"}))               # no NIC, no result_path
    p = _pack(tmp_path, [{"config": str(bad), "netns_pid": os.getpid()}])
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("error: ") and str(bad) in line


def test_a_pack_config_without_members_exits_2_naming_the_field(tmp_path):
    p = _pack(tmp_path, [])
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert "p.pack.json" in line and "members" in line


def test_a_member_whose_host_is_gone_exits_2_naming_its_config(tmp_path):
    cfg = tmp_path / "h3.agent.json"
    cfg.write_text("{}")
    p = _pack(tmp_path, [{"config": str(cfg), "netns_pid": 2 ** 22 + 7}])   # above pid_max
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert str(cfg) in line and "namespace" in line


def _switch_pack(tmp_path, members) -> subprocess.CompletedProcess:
    return _run_pack(tmp_path, "emulator.dataplane.pack", members, "s.pack.json")


def test_a_switch_pack_with_a_bad_member_exits_2_naming_its_file(tmp_path):
    bad = tmp_path / "leaf1.switch.json"
    bad.write_text(json.dumps({"name": "leaf1"}))            # no device, no ports
    p = _switch_pack(tmp_path, [str(bad)])
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("error: ") and "leaf1.switch.json" in line


def test_a_switch_pack_whose_port_does_not_exist_exits_2_naming_its_file(tmp_path):
    cfg = tmp_path / "leaf2.switch.json"
    cfg.write_text(json.dumps({"name": "leaf2", "device_id": 2, "grpc_port": 1,
                               "ports": [{"port_no": 1, "ifname": "nosuch-eth9",
                                          "rate_bps": 1000000, "delay_ns": 0}]}))
    p = _switch_pack(tmp_path, [str(cfg)])
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("error: ") and "leaf2.switch.json: ports: cannot open" in line


def test_ended_members_are_released_together_and_the_first_error_raises_after_all():
    # a NIC's close waits for RCU grace periods: the members' releases overlap
    # (each waits at the barrier for the other: one after the other, it breaks)
    import threading

    from emulator.agents.pack import release_together
    barrier = threading.Barrier(2, timeout=10)
    released = []

    class Member:
        def __init__(self, name, fail=False):
            self.name, self.fail = name, fail

        def release(self):
            barrier.wait()
            released.append(self.name)
            if self.fail:
                raise OSError(f"{self.name}: cannot write its result")

    with pytest.raises(OSError, match="h2: cannot write"):
        release_together([Member("h1"), Member("h2", fail=True)])
    assert sorted(released) == ["h1", "h2"]
    release_together([])             # a pack whose members all failed to open: nothing


def test_an_agent_pack_spins_before_its_timers_only_when_every_busy_process_has_a_core():
    # the demo on 2 cores: one agent pack + one switch pack
    assert wake_spin_ns(2, cpus=2) == WAKE_SPIN_NS > 0
    assert wake_spin_ns(3, cpus=2) == 0      # a process per node, or a workload's servers
    assert wake_spin_ns(8, cpus=8) == WAKE_SPIN_NS and wake_spin_ns(9, cpus=8) == 0
