"""Virtual time over a cluster (``emulator.net.cluster``): which socket each
node's processes join the coordinator by, the forward that carries it
over a server's shared ssh connection, and a forward that cannot be made,
refused in one line naming the server. No sshd needed: the servers are
never opened (the refusal is ssh's own, with no connection to ask)."""
from __future__ import annotations

import contextlib
import os
import shutil
import socket

import pytest

from emulator.errors import EnvironmentProblem
from emulator.net.cluster import Cluster, ClusterServer, remote_vtime_socket
from emulator.schema.cluster import ClusterSpec
from emulator.topo import load_fabric
from tests.conftest import REPO

SPEC = ClusterSpec.model_validate({"servers": [{"name": "a", "address": "localhost"},
                                               {"name": "b", "address": "10.0.0.2"}],
                                   "placement": "pods"})
COORDINATOR = "/tmp/fabric-emu-vt-abc/coordinator"
SUN_PATH_MAX = 107          # bytes of a Unix socket's path, its NUL aside


@pytest.fixture
def pods():
    return load_fabric(REPO / "topologies" / "pods-2x2x2.yaml")


@pytest.fixture
def clusters(pods, tmp_path):
    made = []

    def make(vtime_socket):
        made.append(Cluster(SPEC, pods, tmp_path / "run", vtime_socket=vtime_socket))
        return made[-1]
    yield make
    for c in made:
        c.close()


def test_each_node_joins_by_its_servers_socket_the_remote_one_its_own_per_run(clusters):
    cluster = clusters(COORDINATOR)
    b_path = remote_vtime_socket(cluster.run_token, "b")
    # switches, servers and a NIC (its server's) on a: the runner's socket itself
    for node in ("leaf1", "spine2", "super1", "h1", "h4"):
        assert cluster.vtime_socket_of(node) == COORDINATOR, node
    for node in ("leaf3", "spine4", "super2", "h5", "h8"):
        assert cluster.vtime_socket_of(node) == b_path, node
    assert cluster.vtime_sockets() == {"a": COORDINATOR, "b": b_path}
    # not the runner's path (which a remote machine lacks, and which two
    # servers sharing /tmp would both bind), and another run's differs
    assert b_path != COORDINATOR and b_path.startswith("/tmp/") and b_path.endswith("-b.sock")
    assert clusters(COORDINATOR).vtime_socket_of("leaf3") != b_path
    assert len(b_path.encode()) <= SUN_PATH_MAX


def test_a_dilated_cluster_run_has_no_socket_anywhere(clusters):
    cluster = clusters(None)
    assert cluster.vtime_sockets() == {"a": None, "b": None}
    assert cluster.vtime_socket_of("leaf3") is None and cluster.vtime_socket_of("h1") is None


def test_the_forward_is_a_stream_local_remote_forward_over_the_shared_connection(tmp_path):
    srv = ClusterServer(SPEC.servers[1], ["-i", "/k"], tmp_path)
    argv = srv.socket_forward_command("/tmp/r.sock", COORDINATOR)
    assert argv == ["ssh", "-o", "BatchMode=yes", "-i", "/k", "-o",
                    f"ControlPath={tmp_path / 'b.ssh'}", "-O", "forward",
                    "-R", f"/tmp/r.sock:{COORDINATOR}", "root@10.0.0.2"]


def test_the_runners_own_server_forwards_nothing(tmp_path):
    with pytest.raises(ValueError, match="server a is the runner's"):
        ClusterServer(SPEC.servers[0], [], tmp_path).forward_socket("/tmp/r.sock", COORDINATOR)


@pytest.mark.skipif(shutil.which("ssh") is None, reason="ssh is not installed")
def test_a_forward_that_cannot_be_made_is_one_line_naming_the_server_and_leaves_nothing(tmp_path):
    srv = ClusterServer(SPEC.servers[1], [], tmp_path)      # its connection never opened
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "coordinator"))
    with listener, pytest.raises(EnvironmentProblem) as e:
        srv.forward_socket("/tmp/r.sock", str(tmp_path / "coordinator"))
    msg = str(e.value)
    assert msg.count("\n") == 0
    assert msg.startswith("cluster server b: forwarding virtual time's socket to /tmp/r.sock "
                          "there failed: ")
    assert "AllowStreamLocalForwarding" in msg
    assert srv.forwarded_sockets == []          # nothing there to remove


def test_clean_knows_a_killed_runners_forwarded_socket_from_a_live_ones():
    """What ``fabric-emu clean`` removes on a server: a forward's socket file
    nothing listens on any more (its runner was killed), never a live one."""
    from emulator.net.clean import stale_vtime_sockets
    dead = remote_vtime_socket(f"test{os.getpid()}", "dead")
    live = remote_vtime_socket(f"test{os.getpid()}", "live")
    listener, gone = (socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2))
    try:
        gone.bind(dead)
        gone.close()                     # its file stays, as sshd leaves it
        listener.bind(live)
        listener.listen(1)
        stale = stale_vtime_sockets()
        assert dead in stale and live not in stale
    finally:
        listener.close()
        for path in (dead, live):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
