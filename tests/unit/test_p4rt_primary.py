"""Who may write: the controller loses primary to another P4Runtime client,
says so in one line, and takes it back only when told -- over real gRPC to
the embedded target's servers (one per switch of a clos-2x2, no namespaces)."""
import logging

import grpc
import pytest
from google.rpc import code_pb2 as C

from emulator.cli import P4RT_SHELL_ELECTION_ID, p4runtime_banner
from emulator.control.controller import CONTROLLER_ELECTION_ID, FabricController
from emulator.control.p4rt_client import NotPrimaryError, SwitchConnection
from emulator.control.qos import QosSpec
from emulator.dataplane.p4rt_server import P4RuntimeServer
from emulator.dataplane.state import SwitchState
from emulator.experiment.dilation import with_dilation
from emulator.experiment.model import load_experiment
from emulator.schema.qos import EcnSpec
from emulator.topo import load_fabric
from tests.conftest import REPO

from .test_p4rt_server import eventually

FABRIC = load_fabric(REPO / "topologies" / "clos-2x2.yaml")
HIGH = 1 << 64          # election id (1, 0)


@pytest.fixture
def live():
    """Every switch's P4Runtime server, and the controller connected to them and installed."""
    servers = {}
    for sw in FABRIC.switches():
        servers[sw.name] = P4RuntimeServer(SwitchState(), FABRIC.device_id(sw.name), 0)
        servers[sw.name].start()
    ctl = FabricController(FABRIC, {n: (s.address, s.device_id) for n, s in servers.items()}, qos=QosSpec())
    others = []

    def other(switch, election_id, **kw):
        c = SwitchConnection(servers[switch].address, servers[switch].device_id, election_id, timeout=3.0, **kw)
        others.append(c)
        return c

    try:
        ctl.connect()
        ctl.install()
        yield servers, ctl, other
    finally:
        for c in others:
            c.close()
        ctl.close()
        for s in servers.values():
            s.stop(grace=0)


def _kmin(server):
    """kmin_bytes of the switch's ecn_config entries (the first action parameter: (id, value))."""
    tid = server.contract.table_id("ecn_config")
    return {e.action.params[0][1] for e in server.state.tables[tid].values()}


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_losing_primary_is_one_line_and_it_comes_back_only_when_asked(live, caplog):
    servers, ctl, other = live
    caplog.set_level(logging.WARNING)
    conn, leaf1 = ctl.conns["leaf1"], servers["leaf1"]
    assert all(c.is_primary and c.election_id == HIGH + 1 for c in ctl.conns.values())
    shell = other("leaf1", (1, 2))                  # p4runtime_sh --election-id 1,2
    assert shell.is_primary
    assert eventually(lambda: _warnings(caplog)) and conn.lost_to == HIGH + 2   # logged once it is known
    assert _warnings(caplog) == [
        f"leaf1 ({leaf1.address}, device 1): lost primary to election id 1,2 (ours: 1,1): "
        "another P4Runtime client took over; writes are refused until take_primary"]
    # A QoS change: refused in one line, nothing written anywhere.
    kmin = {n: _kmin(s) for n, s in servers.items()}
    changed = QosSpec(ecn=EcnSpec(kmin_bytes=20_000))
    with pytest.raises(NotPrimaryError) as e:
        ctl.set_qos(changed)
    assert str(e.value) == (f"leaf1 ({leaf1.address}, device 1): QoS change refused: lost primary to election "
                            "id 1,2 (ours: 1,1): another P4Runtime client took over; writes are refused "
                            "until take_primary")
    assert {n: _kmin(s) for n, s in servers.items()} == kmin and ctl.qos == QosSpec()
    # A Write the switch refuses: the same line, from its PERMISSION_DENIED.
    entry = ctl.p4info.table_entry("my_station", {"eth_dst": 7}, "NoAction")
    with pytest.raises(NotPrimaryError) as e:
        conn.insert(entry)
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED and e.value.primary_election_id == HIGH + 2
    assert "\n" not in str(e.value) and "Write of 1 update refused: lost primary to election id 1,2" in str(e.value)
    # The shell leaves: nobody is primary, and the controller does not take it back by itself.
    shell.close()
    assert eventually(lambda: conn.arbitration_status == C.NOT_FOUND)
    assert leaf1.arbitration.primary is None and not conn.is_primary
    with pytest.raises(NotPrimaryError):
        ctl.set_qos(changed)
    # Asked, it does: above the highest id the switch has seen (1,2), on leaf1 only.
    assert ctl.take_primary() == {"leaf1": HIGH + 3}
    assert conn.is_primary and conn.lost_to is None and ctl.take_primary() == {}
    ctl.set_qos(changed)
    assert all(_kmin(s) == {20_000} for s in servers.values())
    assert len(_warnings(caplog)) == 1


def test_the_banners_shell_line_leaves_the_controller_primary(live, caplog):
    """The election id the banner gives the shell is below the controller's:
    the shell is a backup that reads; the id the banner says to use to write
    takes over (and the controller says so)."""
    servers, ctl, other = live
    caplog.set_level(logging.WARNING)
    exp = with_dilation(load_experiment(REPO / "experiments" / "demo.yaml"), 10000)
    banner = p4runtime_banner(exp, {n: s.address for n, s in servers.items()})
    lines = banner.splitlines()
    shells = [x for x in lines if "python3 -m p4runtime_sh" in x]
    assert [x.split()[0] for x in shells] == ["leaf1", "leaf2", "spine1", "spine2"]
    assert all(x.endswith("--election-id 1,0") for x in shells)
    assert f"--grpc-addr {servers['leaf1'].address} --device-id 1 " in shells[0]
    assert lines[-2:] == [
        "The controller is every switch's primary client (election id 1,1): these shells are backups, "
        "they read but cannot write.",
        "To write from a shell, give it --election-id 1,2 or higher: the controller says it lost primary, "
        "and `take_primary` at the mininet> prompt takes it back."]
    assert P4RT_SHELL_ELECTION_ID < CONTROLLER_ELECTION_ID
    backup = other("leaf1", P4RT_SHELL_ELECTION_ID, require_primary=False)
    assert backup.arbitration_status == C.ALREADY_EXISTS and not backup.is_primary
    assert len(backup.read_table_entries("ipv4_lpm")) == 3
    assert ctl.conns["leaf1"].is_primary and _warnings(caplog) == []
    other("leaf1", (1, 2))
    assert eventually(lambda: _warnings(caplog)) and ctl.conns["leaf1"].lost_to == HIGH + 2
    assert len(_warnings(caplog)) == 1 and "lost primary to election id 1,2" in _warnings(caplog)[0]
