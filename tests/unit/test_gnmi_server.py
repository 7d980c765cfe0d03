"""The switch's gNMI server over gRPC (the generated stubs, on loopback), on a
switch whose loop runs on a manual clock (Unix socket pairs instead of veths)."""
from __future__ import annotations

import json
import socket
import threading

import grpc
import pytest
from gnmi import gnmi_pb2 as pb
from gnmi import gnmi_pb2_grpc as pb_grpc

from emulator.dataplane import switch as switch_mod
from emulator.dataplane.gnmi_server import GnmiServer
from emulator.dataplane.gnmi_server.encode import decode_value
from emulator.dataplane.gnmi_server.paths import format_path, parse_path
from emulator.dataplane.switch import EmbeddedSwitch, SwitchConfig
from emulator.p4.p4info import P4Info
from tests.unit.test_tm_helpers import roce, verdict
from tests.unit.test_tm_switch import PORTS, StopAt

SER_NS = (1000 + 24) * 8000          # a 1000-byte frame at 1 Mbit/s: 8.192 ms
STOP_NS = 40_000_000
Q2 = "/qos/interfaces/interface[interface-id=s1-eth2]/output/queues/queue[name=0]/state"
OPER = "/interfaces/interface/state/oper-status"


class Rig:
    """A switch (port 2 down over [15, 25) ms as a sender; port 1's way in
    down from 30 ms on; links of 1 ms) with its gNMI server on 127.0.0.1; frames queued on
    port 2 at 0 when ``run`` starts the loop until ``STOP_NS``."""

    def __init__(self, tmp_path, monkeypatch):
        self.ends = {p["ifname"]: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for p in PORTS}
        for mine, _ in self.ends.values():
            mine.setblocking(False)
        monkeypatch.setattr(switch_mod, "open_port_socket", lambda ifname: self.ends[ifname][0])
        ports = [{**p, "rate_bps": 1_000_000, "delay_ns": 1_000_000} for p in PORTS]
        ports[1]["faults"] = {"sender": "s1", "receiver": "s2",
                              "down": [{"from_ns": 15_000_000, "until_ns": 25_000_000}]}
        ports[0]["rx_down"] = [{"from_ns": 30_000_000, "until_ns": 2**62}]
        path = tmp_path / "sw.json"
        path.write_text(json.dumps({"name": "s1", "device_id": 3, "grpc_port": 1, "ports": ports,
                                    "gnmi_listen": "127.0.0.1:0"}))
        self.clock = StopAt(STOP_NS)
        self.sw = self.clock.switch = EmbeddedSwitch(SwitchConfig.load(path), P4Info.load(), self.clock)
        self.server = GnmiServer(self.sw, self.sw.cfg.gnmi_listen)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.server.start()}")
        self.stub = pb_grpc.gNMIStub(self.channel)

    def run(self, frames: int = 4) -> None:
        for i in range(frames):
            assert self.sw.tm.enqueue(0, roce(1000, ident=i), verdict(2, 1))
        self.sw.run()

    def close(self) -> None:
        self.server.stop()
        self.channel.close()
        self.sw.close()
        for pair in self.ends.values():
            for s in pair:
                s.close()


@pytest.fixture
def rig(tmp_path, monkeypatch):
    r = Rig(tmp_path, monkeypatch)
    yield r
    r.close()


def stream(rig: Rig, subs: list[pb.Subscription], **kw) -> tuple[threading.Thread, list]:
    """A STREAM subscription read by a thread; back once it is in place."""
    sl = pb.SubscriptionList(mode=pb.SubscriptionList.STREAM, encoding=pb.PROTO,
                             subscription=subs, **kw)
    call = rig.stub.Subscribe(iter([pb.SubscribeRequest(subscribe=sl)]))
    got, synced = [], threading.Event()

    def read():
        for resp in call:
            if resp.sync_response:
                synced.set()
            else:
                got.extend((resp.update.timestamp, format_path(u.path).rsplit("/", 1)[1],
                            decode_value(u.val)) for u in resp.update.update)
        synced.set()
    t = threading.Thread(target=read, daemon=True)
    t.start()
    assert synced.wait(10)
    return t, got


def test_capabilities_say_gnmi_0_10_0_its_models_and_encodings(rig):
    caps = rig.stub.Capabilities(pb.CapabilityRequest())
    assert caps.gNMI_version == "0.10.0"
    assert [m.name for m in caps.supported_models] == ["openconfig-interfaces", "openconfig-qos",
                                                       "fabric-emu-qos"]
    assert list(caps.supported_encodings) == [pb.JSON_IETF, pb.PROTO]


def test_a_server_never_asked_builds_no_catalog_and_stops_cleanly(rig):
    rig.run()
    rig.server.stop()
    assert rig.server.catalog is None        # its leaves: made at the first request
    assert rig.sw.stats()["gnmi"]["requests"] == {}


def test_get_reads_the_traffic_managers_counters_and_the_link_state(rig):
    rig.run()
    rig.clock.set(STOP_NS)
    resp = rig.stub.Get(pb.GetRequest(path=[parse_path(Q2), parse_path(OPER)], encoding=pb.JSON_IETF))
    (n,) = resp.notification
    got = {format_path(u.path): decode_value(u.val) for u in n.update}
    q = rig.sw.tm.ports[2]
    assert got[Q2 + "/transmit-pkts"] == q.tx_packets[0] == 4
    assert got[Q2 + "/transmit-octets"] == q.tx_bytes[0] == 4 * 1000
    assert got[Q2 + "/fabric-emu/depth-octets"] == 0 and got[Q2 + "/dropped-pkts"] == 0
    assert got["/interfaces/interface[name=s1-eth1]/state/oper-status"] == "DOWN"   # its way in
    assert got["/interfaces/interface[name=s1-eth2]/state/oper-status"] == "UP"
    assert n.timestamp == rig.clock.now_ns()


def test_stream_samples_on_the_grid_and_changes_at_their_exact_times(rig):
    t, got = stream(rig, [
        pb.Subscription(path=parse_path(Q2 + "/transmit-pkts"), mode=pb.SAMPLE,
                        sample_interval=5_000_000),
        pb.Subscription(path=parse_path(OPER), mode=pb.ON_CHANGE)])
    rig.run()
    rig.server.stop()
    t.join(10)
    oper = [(ts, v) for ts, leaf, v in got if leaf == "oper-status"]
    # no signal (docs/faults.md): port 2 hears its partner's remote fault two link
    # delays after its own way out went down, port 1 loses its way in one delay after
    assert oper == [(0, "UP"), (0, "UP"), (17_000_000, "DOWN"), (27_000_000, "UP"),
                    (31_000_000, "DOWN")]
    samples = [(ts, v) for ts, leaf, v in got if leaf == "transmit-pkts"]
    # frame k starts serializing at k x SER: counted then; the state after the events at t
    grid = [(k * 5_000_000, min(4, k * 5_000_000 // SER_NS + 1)) for k in range(9)]
    assert samples[:-1] == grid
    assert samples[-1] == (rig.clock.now_ns(), 4)          # the last: as the switch stopped


def test_a_rerun_on_the_same_clock_streams_the_same_notifications(tmp_path, monkeypatch):
    runs = []
    for i in range(2):
        (tmp_path / str(i)).mkdir()
        r = Rig(tmp_path / str(i), monkeypatch)
        try:
            t, got = stream(r, [pb.Subscription(path=parse_path("/qos"), mode=pb.SAMPLE,
                                                sample_interval=3_000_000)])
            r.run()
            r.server.stop()
            t.join(10)
            runs.append(got)
        finally:
            r.close()
    assert runs[0] == runs[1] and len(runs[0]) > 8 * 11 * 2 * 10


def test_suppress_redundant_sends_only_changes(rig):
    t, got = stream(rig, [pb.Subscription(path=parse_path(Q2 + "/transmit-pkts"), mode=pb.SAMPLE,
                                          sample_interval=1_000_000, suppress_redundant=True)])
    rig.run()
    rig.server.stop()
    t.join(10)
    assert [v for _, _, v in got] == [1, 2, 3, 4]


def test_once_and_poll_read_the_state_when_asked(rig):
    sl = pb.SubscriptionList(mode=pb.SubscriptionList.ONCE, encoding=pb.PROTO,
                             subscription=[pb.Subscription(path=parse_path(OPER))])
    resps = list(rig.stub.Subscribe(iter([pb.SubscribeRequest(subscribe=sl)])))
    assert [r.WhichOneof("response") for r in resps] == ["update", "sync_response"]
    assert len(resps[0].update.update) == 2
    sl.mode = pb.SubscriptionList.POLL
    reqs = [pb.SubscribeRequest(subscribe=sl), pb.SubscribeRequest(poll=pb.Poll()),
            pb.SubscribeRequest(poll=pb.Poll())]
    resps = list(rig.stub.Subscribe(iter(reqs)))
    assert [r.WhichOneof("response") for r in resps] == ["update", "sync_response"] * 3


@pytest.mark.parametrize("call, code, message", [
    (lambda s: s.Get(pb.GetRequest(path=[parse_path("/interfaces/interface[name=nope]")],
                                   encoding=pb.PROTO)),
     grpc.StatusCode.NOT_FOUND, "unknown path /interfaces/interface[name=nope]"),
    (lambda s: s.Get(pb.GetRequest(path=[parse_path(OPER)])),
     grpc.StatusCode.UNIMPLEMENTED, "encoding JSON is not supported"),
    (lambda s: s.Set(pb.SetRequest()), grpc.StatusCode.UNIMPLEMENTED, "read-only"),
    (lambda s: list(s.Subscribe(iter([pb.SubscribeRequest(subscribe=pb.SubscriptionList(
        encoding=pb.PROTO, subscription=[pb.Subscription(path=parse_path(Q2), mode=pb.ON_CHANGE)]))]))),
     grpc.StatusCode.INVALID_ARGUMENT, "ON_CHANGE is served for oper-status only"),
    (lambda s: list(s.Subscribe(iter([pb.SubscribeRequest(subscribe=pb.SubscriptionList(
        encoding=pb.PROTO, subscription=[pb.Subscription(path=parse_path(Q2), mode=pb.SAMPLE,
                                                         sample_interval=10)]))]))),
     grpc.StatusCode.INVALID_ARGUMENT, "below the switch's minimum"),
    (lambda s: list(s.Subscribe(iter([pb.SubscribeRequest(poll=pb.Poll())]))),
     grpc.StatusCode.INVALID_ARGUMENT, "must hold a SubscriptionList"),
    (lambda s: list(s.Subscribe(iter([pb.SubscribeRequest(subscribe=pb.SubscriptionList(
        mode=7, encoding=pb.PROTO, subscription=[pb.Subscription(path=parse_path(Q2))]))]))),
     grpc.StatusCode.INVALID_ARGUMENT, "unknown SubscriptionList mode 7"),
    (lambda s: list(s.Subscribe(iter([pb.SubscribeRequest(subscribe=pb.SubscriptionList(
        encoding=pb.PROTO, subscription=[pb.Subscription(path=parse_path(Q2), mode=9)]))]))),
     grpc.StatusCode.INVALID_ARGUMENT, "unknown subscription mode 9"),
])
def test_a_bad_request_gets_a_status_that_says_why_and_is_counted(rig, call, code, message):
    with pytest.raises(grpc.RpcError) as e:
        call(rig.stub)
    assert e.value.code() == code and message in e.value.details()
    assert rig.sw.stats()["gnmi"]["errors"] == {code.name: 1}
