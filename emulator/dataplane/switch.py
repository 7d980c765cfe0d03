"""One embedded switch: raw sockets on its veth ports, the fabric pipeline, egress queues.

One process per switch (``python -m emulator.dataplane CONFIG.json``), like
BMv2's ``simple_switch_grpc``: the Mininet node class starts and stops it the
same way, the kernel spreads switches over cores, and a crash takes down one
switch, not the fabric. Inside, a single thread moves packets (the P4Runtime
server's gRPC threads only touch ``SwitchState`` under its lock):

    select() on all ports  ->  drain each readable socket  ->  FabricPipeline.ingress
        ->  EgressQueue.enqueue  ...  EgressQueue.serve (at the link rate)
        ->  Wire (propagation delay)  ->  socket.send on the egress veth

The loop sleeps until the next frame's serialization slot or release time,
so an idle switch costs nothing and a busy one never sends early.
"""
from __future__ import annotations

import ctypes
import gc
import json
import select
import signal
import socket
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from emulator.dataplane.egress import EgressQueue, Wire
from emulator.dataplane.pipeline import CPU_PORT, DROP_PORT, FabricPipeline
from emulator.dataplane.state import SwitchState
from emulator.p4.p4info import P4Info

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_QDISC_BYPASS = 20
PACKET_IGNORE_OUTGOING = 23
RX_BATCH = 64              # frames drained from one socket per wakeup
IDLE_WAKE_S = 0.05         # how often an idle loop looks at packet-outs and stop
LATE_THRESHOLD_NS = 1_000_000  # a release later than this counts as falling behind


def open_port_socket(ifname: str) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    sock.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.bind((ifname, 0))
    sock.setblocking(False)
    return sock


@dataclass
class PortConfig:
    port_no: int
    ifname: str
    rate_bps: int
    delay_ns: int
    buffer_bytes: int


@dataclass
class SwitchConfig:
    name: str
    device_id: int
    grpc_port: int
    ports: list[PortConfig]
    p4info_path: str | None = None
    stats_path: str | None = None

    @classmethod
    def load(cls, path: str | Path) -> "SwitchConfig":
        raw = json.loads(Path(path).read_text())
        raw["ports"] = [PortConfig(**p) for p in raw["ports"]]
        return cls(**raw)


class SwitchPort:
    """A front-panel port: its socket, its egress queue and the wire beyond it."""

    def __init__(self, cfg: PortConfig):
        self.cfg = cfg
        self.port_no = cfg.port_no
        self.sock = open_port_socket(cfg.ifname)
        self.queue = EgressQueue(cfg.rate_bps, cfg.buffer_bytes)
        self.wire = Wire(cfg.delay_ns)
        self.send_errors = 0

    def send(self, frame) -> None:
        try:
            self.sock.send(frame)
        except OSError:  # ENOBUFS/EAGAIN: the veth peer's backlog is full
            self.send_errors += 1


class EmbeddedSwitch:
    def __init__(self, cfg: SwitchConfig, p4info: P4Info):
        self.cfg = cfg
        self.state = SwitchState()
        self.pipeline = FabricPipeline(self.state, p4info)
        self.ports = {p.port_no: SwitchPort(p) for p in cfg.ports}
        self._by_fd = {port.sock.fileno(): port for port in self.ports.values()}
        self._packet_outs: deque[tuple[bytes, int]] = deque()
        self.state.packet_out_handler = lambda payload, port: self._packet_outs.append((payload, port))
        self._stop = False
        self.rx_frames = 0
        tx_counter = self.pipeline.ids.tx_port_counter
        for port in self.ports.values():
            port.on_dequeue = self._counting(tx_counter, port.port_no)

    def _counting(self, counter_id: int, port_no: int):
        state = self.state

        def on_dequeue(frame):
            state.counters[counter_id].count(port_no, len(frame))
        return on_dequeue

    def stop(self, *_):
        self._stop = True

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        ports = list(self.ports.values())
        socks = [p.sock for p in ports]
        by_fd = self._by_fd
        ingress = self.pipeline.ingress
        clock = time.monotonic_ns
        while not self._stop:
            now = clock()
            wake = None
            for p in ports:
                t = p.queue.next_start_ns()
                if t is not None and (wake is None or t < wake):
                    wake = t
                t = p.wire.next_release_ns()
                if t is not None and (wake is None or t < wake):
                    wake = t
            timeout = IDLE_WAKE_S if wake is None else min(IDLE_WAKE_S, max(0.0, (wake - now) / 1e9))
            readable = select.select(socks, [], [], timeout)[0]
            for sock in readable:
                port = by_fd[sock.fileno()]
                port_no = port.port_no
                for _ in range(RX_BATCH):
                    try:
                        frame = sock.recv(4096)
                    except BlockingIOError:
                        break
                    self.rx_frames += 1
                    egress_port, out = ingress(frame, port_no)
                    self._to_egress(egress_port, out, port_no, clock())
            while self._packet_outs:
                payload, egress_port = self._packet_outs.popleft()
                self._to_egress(self.pipeline.packet_out(payload, egress_port), payload, None, clock())
            now = clock()
            for p in ports:
                if p.queue.frames:
                    p.queue.serve(now, p.wire, p.on_dequeue)
                if p.wire.in_flight:
                    p.wire.release(now, p.send, LATE_THRESHOLD_NS)

    def _to_egress(self, egress_port: int, frame, ingress_port, now_ns: int) -> None:
        if egress_port == DROP_PORT:
            return
        if egress_port == CPU_PORT:
            handler = self.state.packet_in_handler
            if handler is not None:
                handler(bytes(frame), ingress_port or 0)
            return
        port = self.ports.get(egress_port)
        if port is not None:  # like BMv2, a frame to a port that does not exist vanishes
            port.queue.enqueue(now_ns, frame)

    # ----------------------------------------------------------------- stats
    def stats(self) -> dict:
        return {
            "name": self.cfg.name,
            "rx_frames": self.rx_frames,
            "ports": [{
                "port": p.port_no, "ifname": p.cfg.ifname,
                "queue_drops": p.queue.drops, "max_depth_bytes": p.queue.max_depth_bytes,
                "late_frames": p.wire.late_frames, "max_lateness_ns": p.wire.max_lateness_ns,
                "send_errors": p.send_errors,
            } for p in self.ports.values()],
        }


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: if whoever started us dies, so do we (no orphans)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    from emulator.dataplane.p4rt_server import P4RuntimeServer

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m emulator.dataplane SWITCH_CONFIG.json", file=sys.stderr)
        return 2
    _die_with_parent()
    cfg = SwitchConfig.load(argv[0])
    p4info = P4Info.load(cfg.p4info_path) if cfg.p4info_path else P4Info.load()
    switch = EmbeddedSwitch(cfg, p4info)
    signal.signal(signal.SIGTERM, switch.stop)
    signal.signal(signal.SIGINT, switch.stop)
    server = P4RuntimeServer(switch.state, cfg.device_id, cfg.grpc_port, p4info)
    server.start()
    print(f"{cfg.name}: ready, P4Runtime on 127.0.0.1:{cfg.grpc_port}, "
          f"{len(cfg.ports)} ports", flush=True)
    # Startup garbage is long-lived; keep the collector off the packet path.
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 50)
    try:
        switch.run()
    finally:
        server.stop()
        if cfg.stats_path:
            Path(cfg.stats_path).write_text(json.dumps(switch.stats(), indent=1))
    return 0
