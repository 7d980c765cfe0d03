"""A fabric split across two servers with Mininet's cluster edition
(``emulator/net/cluster.py``): two emulated servers on this machine
(``tests/cluster_rig.py``: network namespaces joined by a veth pair, b with
its own sshd and its own view of the run directory) run the shipped
``experiments/cluster-pods.yaml``, one pod each, in virtual time: b's
processes join the runner's coordinator through the ssh connection the
runner holds, and the run is the same run as on one server."""
from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from tests.cluster_rig import TwoServers, unavailable_reason
from tests.conftest import FABRIC_EMU, REPO
from tests.losses import assert_no_drops_no_retransmissions
from tests.reruns import without_wall

pytestmark = [pytest.mark.fabric, pytest.mark.usefixtures("no_leftovers"),
              pytest.mark.skipif(unavailable_reason() is not None,
                                 reason=str(unavailable_reason()))]


def _experiment(rig: TwoServers, tmp_path):
    data = yaml.safe_load((REPO / "experiments" / "cluster-pods.yaml").read_text())
    data["topology"] = str(REPO / "topologies" / "pods-2x2x2.yaml")
    data["cluster"] = rig.cluster_spec(data["cluster"]["placement"])
    path = tmp_path / "cluster-pods.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _ours(run_dir) -> list[str]:
    """Processes on this machine (both servers share its pid space) whose
    command line names the run directory."""
    from emulator.net.clean import _cmdlines
    return [cmdline for _, cmdline in _cmdlines() if str(run_dir) in cmdline]


def _b_sockets(rig: TwoServers) -> set[str]:
    """Virtual time's forwarded socket files as b sees its /tmp."""
    out = rig.ssh("ls -d /tmp/fabric-emu-vt-*.sock 2>/dev/null").stdout
    return set(out.split())


def _one_run(rig: TwoServers, exp, out) -> dict:
    """Run ``exp`` into ``out`` and check all a run over two servers must do."""
    before = _b_sockets(rig)
    r = rig.run_in_a([*FABRIC_EMU, "run", exp, "--out", out, "--no-plots"], cwd=REPO,
                     timeout_s=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    # Virtual time (auto): the window barrier spans both servers.
    assert s["time"] == "virtual" and not s["fell_behind"]
    # Every WRITE crossed the servers and arrived intact, nothing resent.
    assert s["complete"] and len(s["flows"]) == 4
    assert all(f["intact"] for f in s["flows"]), s["flows"]
    assert_no_drops_no_retransmissions(s, out)
    ports = {(p["node"], p["peer"]): p for p in s["ports"]}
    # The links between the pods' spines and the super spines are the
    # ones that join the servers (super1 on a, super2 on b): each carried.
    cross = [("spine1", "super1"), ("spine2", "super2"), ("spine3", "super1"),
             ("spine4", "super2")]
    assert sum(ports[c]["tx_packets"] + ports[c]["rx_packets"] for c in cross) >= 4 * 256
    # b's switches' own stats and every agent's result came back.
    switches = {sw["node"]: sw for sw in s["switches"]}
    assert switches["leaf3"]["tx_packets"] > 0 and switches["leaf4"]["tx_packets"] > 0
    for name in ("leaf3", "spine3", "super2"):
        assert (out / "run" / f"{name}.log").exists()
    for h in ("h5", "h6", "h7", "h8"):
        assert json.loads((out / "run" / f"{h}.result.json").read_text())["complete"]
    # Every process joined the coordinator, b's through the forward there:
    # each switch process (one each on a cluster) and agent process (a's
    # packed, b's one each: one log per process).
    run = out / "run"
    vt = s["virtual_time"]
    agent_procs = len(list(run.glob("*.agent.log")))
    assert vt["members"] == 10 + agent_procs and vt["windows"] > 0
    assert {"leaf3", "leaf4", "spine3", "spine4", "super2"} <= set(vt["switch_processes_wall"])
    assert vt["foreign_frames"] == 0 and vt["early_frames"] == 0
    # b's processes named b's socket, a's the runner's own.
    def socket_of(config):
        return json.loads((run / config).read_text())["vtime_socket"]
    b_socket = socket_of("leaf3.switch.json")
    assert b_socket.startswith("/tmp/fabric-emu-vt-") and b_socket.endswith("-b.sock")
    assert {socket_of(f"{n}.switch.json") for n in ("leaf4", "spine3", "super2")} == {b_socket}
    assert {socket_of(f"{h}.agent.json") for h in ("h5", "h6", "h7", "h8")} == {b_socket}
    a_socket = socket_of("leaf1.switch.json")
    assert a_socket != b_socket and socket_of("h1.agent.json") == a_socket
    # Nothing left: no process of the run, no interface but the servers'
    # own on either, b's copy of the run directory and its socket file gone.
    assert _ours(out / "run") == []
    assert sorted(rig.interfaces(rig.ns_a)) == ["fecla", "lo"]
    assert sorted(rig.interfaces(rig.ns_b)) == ["feclb", "lo"]
    assert rig.ssh(f"test -e {out / 'run'}").returncode == 1
    assert _b_sockets(rig) == before
    return s


def _on_one_server(exp, out) -> dict:
    """``exp`` without its ``cluster:`` section: the whole fabric on this
    machine, in the root namespace (no rig)."""
    data = yaml.safe_load(exp.read_text())
    del data["cluster"]
    path = out.parent / "one-server.yaml"
    path.write_text(yaml.safe_dump(data))
    r = subprocess.run([*FABRIC_EMU, "run", path, "--out", out, "--no-plots"], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


def _the_run(s: dict) -> dict:
    """What two runs of one experiment share: summary.json but for its wall
    fields, the file it was read from and how many processes joined the
    barrier (how the nodes were packed; ``_one_run`` checks the cluster's)."""
    s = without_wall(s)
    return {**s, "source": None, "virtual_time": {**s["virtual_time"], "members": None}}


def test_a_fabric_split_over_two_servers_runs_in_virtual_time_as_on_one_server(tmp_path):
    """The split run is the run the same file gives on one machine (nodes
    packed into other processes, no ssh-carried link): a rerun that could
    differ anywhere the barrier across the servers let a frame or a window
    through out of its fabric-time order."""
    outs = tmp_path / "outs"               # b's view of it: its own (cluster_rig)
    split, alone = outs / "split", tmp_path / "one" / "out"
    with TwoServers(tmp_path / "rig", private_dir=outs) as rig:
        exp = _experiment(rig, tmp_path)
        s1 = _one_run(rig, exp, split)
    (tmp_path / "one").mkdir()
    s2 = _on_one_server(exp, alone)
    assert s2["time"] == "virtual" and s2["virtual_time"]["members"] < s1["virtual_time"]["members"]
    # The same run: summary.json but for its wall fields, every CSV.
    assert _the_run(s1) == _the_run(s2)
    csvs = sorted(p.name for p in split.glob("*.csv"))
    assert "queue_depth.csv" in csvs and "pfc_events.csv" in csvs
    assert csvs == sorted(p.name for p in alone.glob("*.csv"))
    for name in csvs:
        assert (split / name).read_bytes() == (alone / name).read_bytes(), name


def test_a_placement_naming_an_unknown_node_is_one_line_and_builds_nothing(tmp_path):
    data = yaml.safe_load((REPO / "experiments" / "cluster-pods.yaml").read_text())
    data["topology"] = str(REPO / "topologies" / "pods-2x2x2.yaml")
    data["cluster"]["placement"] = {"leaf9": "a"}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    r = subprocess.run([*FABRIC_EMU, "run", path, "--out", tmp_path / "out"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip() == (f"fabric-emu: {path}: cluster.placement.leaf9: "
                                "no such switch or server in the topology")
    assert not (tmp_path / "out").exists()


def test_a_server_whose_sshd_refuses_the_forward_is_one_line_and_leaves_nothing(tmp_path):
    out = tmp_path / "out"
    with TwoServers(tmp_path / "rig", private_dir=out,
                    sshd_options=("AllowStreamLocalForwarding no",)) as rig:
        exp = _experiment(rig, tmp_path)
        before = _b_sockets(rig)
        r = rig.run_in_a([*FABRIC_EMU, "run", exp, "--out", out], cwd=REPO, timeout_s=120)
        assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
        errors = [x for x in r.stderr.splitlines() if x.startswith("fabric-emu:")]
        assert len(errors) == 1 and r.stderr.strip().endswith(errors[0]), r.stderr
        line = errors[0]
        assert re.fullmatch(r"fabric-emu: cluster server b: forwarding virtual time's socket to "
                            r"/tmp/fabric-emu-vt-[0-9a-f]+-b\.sock there failed: .+", line), line
        assert _ours(out / "run") == [] and _b_sockets(rig) == before
        assert sorted(rig.interfaces(rig.ns_a)) == ["fecla", "lo"]
        assert sorted(rig.interfaces(rig.ns_b)) == ["feclb", "lo"]
        assert rig.ssh(f"test -e {out / 'run'}").returncode == 1


def test_a_killed_runner_takes_its_processes_on_both_servers_and_clean_there_removes_the_rest(tmp_path):
    import time
    out = tmp_path / "out"
    with TwoServers(tmp_path / "rig", private_dir=out) as rig:
        exp = _experiment(rig, tmp_path)
        data = yaml.safe_load(exp.read_text())
        for t in data["traffic"]:        # long enough to be killed mid-run
            t["size_bytes"] = 32 << 20
        exp.write_text(yaml.safe_dump(data))
        sockets_before = _b_sockets(rig)
        console = tmp_path / "console.txt"
        with console.open("w") as sink:
            runner = subprocess.Popen(["ip", "netns", "exec", rig.ns_a, *FABRIC_EMU, "run", exp,
                                       "--out", out, "--no-plots"], cwd=REPO, stdout=sink,
                                      stderr=sink)
        try:
            deadline = time.monotonic() + 120
            # the runner's progress line counts windows: every process on
            # both servers joined and fabric time moves
            while not re.search(r"[1-9]\d* windows", console.read_text()):
                assert runner.poll() is None and time.monotonic() < deadline, \
                    "the run never started: " + console.read_text()[-2000:]
                time.sleep(0.1)
            assert [p for p in _ours(out / "run") if "emulator.net.remote_exec" in p]
        finally:
            runner.kill()           # `ip netns exec` execs: this is the runner itself
            runner.wait()
        deadline = time.monotonic() + 30
        while _ours(out / "run") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _ours(out / "run") == []          # b's switches and agents too (remote_exec)
        # b's interfaces outlive the runner, as a crashed local run's would,
        # and the socket file of virtual time's forward: clean there.
        assert len(rig.interfaces(rig.ns_b)) > 2
        assert len(_b_sockets(rig) - sockets_before) == 1
        r = rig.ssh(f"cd {REPO} && {' '.join(FABRIC_EMU)} clean")
        assert r.returncode == 0, r.stderr
        assert sorted(rig.interfaces(rig.ns_b)) == ["feclb", "lo"]
        assert _b_sockets(rig) <= sockets_before
        assert sorted(rig.interfaces(rig.ns_a)) == ["fecla", "lo"]


def _kernel_has_gretap() -> bool:
    """Asked the kernel directly, in a throwaway network namespace."""
    return subprocess.run(["unshare", "--net", "ip", "link", "add", "g", "type", "gretap",
                           "local", "127.0.0.1", "remote", "127.0.0.2"],
                          capture_output=True).returncode == 0


def test_gre_links_run_where_the_kernel_has_gretap_and_are_refused_in_one_line_where_not(tmp_path):
    """``link: gre``: Mininet's gretap links between the servers, in virtual
    time like ssh's; on a kernel without gretap, one line naming the server
    before anything is built (not an interface vanishing mid-build)."""
    out = tmp_path / "out"
    with TwoServers(tmp_path / "rig", private_dir=out) as rig:
        data = yaml.safe_load(_experiment(rig, tmp_path).read_text())
        data["cluster"]["link"] = "gre"
        exp = tmp_path / "gre.yaml"
        exp.write_text(yaml.safe_dump(data))
        if _kernel_has_gretap():
            s = _one_run(rig, exp, out)
            assert s["complete"]
            return
        r = rig.run_in_a([*FABRIC_EMU, "run", exp, "--out", out], cwd=REPO, timeout_s=120)
        assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
        errors = [x for x in r.stderr.splitlines() if x.startswith("fabric-emu:")]
        assert len(errors) == 1 and r.stderr.strip().endswith(errors[0]), r.stderr
        assert "cluster server a: its kernel cannot make the gretap links" in errors[0]
        assert errors[0].endswith("say link: ssh")
        assert _ours(out / "run") == []
        assert sorted(rig.interfaces(rig.ns_a)) == ["fecla", "lo"]
        assert sorted(rig.interfaces(rig.ns_b)) == ["feclb", "lo"]
