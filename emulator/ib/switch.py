"""One embedded InfiniBand switch: raw sockets on its veth ports,
``p4src/ib.p4``'s pipeline and a credit-based link layer on every port.

    python -m emulator.ib.switch CONFIG.json    (``SwitchConfig`` with ``ib``)

Per port, per data VL, one ``VlCredits``: the receive buffer this switch
keeps for packets arriving on the port, and the credit its peer granted for
what the switch sends out of it. Per port an ``IbEgressPort`` (VL queues,
arbitration, credit gating, serialization at the port's rate) and a
``Wire`` (propagation delay). A single thread moves packets::

    frame in on port p
      link packet          -> credits[p][vl].on_fc: FCTBS resets ABR, FCCL the new limit
      data packet on VL v  -> credits[p][v].on_data (no room: the peer ignored
                              its credit; dropped and counted as an overrun)
                           -> IbPipeline.ingress (LFT) -> egress port e
                           -> queued on e's VL (ib.p4's sl2vl of (e, SL))
    e's turn (arbitration and credit) -> IbPipeline.egress (VL, FECN, VCRC)
                           -> Wire -> the veth; the packet's blocks leave p's
                              buffer (credits[p][v].release)
    each port and VL       -> a flow-control packet when its buffer freed
                              enough, and at least every update period (the
                              first at start: the initial credit)

A packet is never dropped for want of buffer: a VL without credit waits
(``stalled_ns``). Its stats, and virtual time: ``docs/virtual-time.md``, "The
InfiniBand switch: stats and virtual time".
"""
from __future__ import annotations

import heapq
import sys

from emulator.nic.packet_socket import SocketRxStats
from emulator.clock import MONOTONIC, NEVER_NS, Clock
from emulator.dataplane.pcap import IbPcapWriter
from emulator.dataplane.state import SwitchState
from emulator.dataplane.switch import (
    RX_BATCH, RX_MAX_BYTES, RawLogs, open_port_socket, switch_main,
)
from emulator.errors import ConfigError
from emulator.ib.credits import CreditParams, VlCredits, blocks
from emulator.ib.frames import fc_frame, parse_fc
from emulator.ib.headers import LRH_BYTES, fc_wire_ns
from emulator.ib.pipeline import DROP_PORT, IbPipeline
from emulator.ib.port import IbEgressPort
from emulator.link import CommitWire, Wire
from emulator.p4.p4info import IB_P4INFO, P4Info
from emulator.rundir import RawDir
from emulator.schema.switch import PortConfig, SwitchConfig
from emulator.wire import ETH_HDR_BYTES, ETH_P_IB_DATA, ETH_P_IB_LINK
from emulator.vtime.member import process_clock

IDLE_WAKE_NS = 50_000_000


class IbSwitchPort:
    def __init__(self, cfg: PortConfig, vls: list[int], params: CreditParams, clock: Clock,
                 pcap: IbPcapWriter | None, send_data):
        self.cfg = cfg
        self.port_no = cfg.port_no
        sock = open_port_socket(cfg.ifname)
        self.rx_kernel = SocketRxStats(sock)    # frames the kernel dropped before we read them
        attach = getattr(clock, "attach_port", None)     # virtual time
        self.sock = sock if attach is None else attach(sock, cfg.ifname)
        now = clock.now_ns()
        self.credits = {vl: VlCredits(params, now) for vl in vls}
        self.egress = IbEgressPort(cfg.rate_bps, self.credits, send_data,
                                   carrier_bytes=ETH_HDR_BYTES)
        self.wire = Wire(cfg.delay_ns) if attach is None else CommitWire(cfg.delay_ns, self.send_at)
        self.fc_wire_ns = fc_wire_ns(cfg.rate_bps)
        self.pcap = pcap
        self.clock = clock
        self._captures: list[tuple[int, int, bytes]] = []   # virtual time: sent, not yet written
        self._captured = 0
        self.send_errors = 0
        self.fc_tx = {vl: 0 for vl in vls}
        self.fc_rx = {vl: 0 for vl in vls}
        self.vl_errors = 0            # data packets in or out on a VL this port does not run
        self.fc_errors = 0            # flow-control packets dropped: bad LPCRC or Op, unknown VL

    def send(self, frame) -> None:
        try:
            self.sock.send(frame)
        except OSError:               # ENOBUFS/EAGAIN: the veth peer's backlog is full
            self.send_errors += 1
        if self.pcap is not None:
            self.pcap.write(self.clock.now_ns(), frame)

    def send_at(self, frame, arrival_ns: int) -> None:
        """Virtual time: hand ``frame`` over now, arriving at ``arrival_ns``
        (captured then: a dilated run's capture is its release)."""
        self.sock.due_ns = arrival_ns
        try:
            self.sock.send(frame)
        except OSError:
            self.send_errors += 1
        if self.pcap is not None:
            self._captured += 1
            heapq.heappush(self._captures, (arrival_ns, self._captured, frame))

    def write_captures(self, until_ns: int) -> None:
        """Virtual time: write the sent packets that arrived by ``until_ns``
        (the pcap stays in time order with the packets received)."""
        captures, write = self._captures, self.pcap.write
        while captures and captures[0][0] <= until_ns:
            t, _, frame = heapq.heappop(captures)
            write(t, frame)


class IbSwitch:
    def __init__(self, cfg: SwitchConfig, p4info: P4Info, clock: Clock = MONOTONIC):
        if cfg.ib is None:
            raise ConfigError(f"switch {cfg.name}: no 'ib' section: not an InfiniBand switch")
        self.cfg = cfg
        self.clock = clock
        self.virtual = hasattr(clock, "attach_port")     # emulator.vtime
        self.state = SwitchState()
        self.pipeline = IbPipeline(self.state, p4info)
        ib = cfg.ib
        self.params = CreditParams(buffer_blocks=ib.buffer_blocks, update_blocks=ib.update_blocks,
                                   update_period_ns=ib.update_period_ns)
        self.vls = list(range(ib.vls))
        self.mac = cfg.router_mac_bytes()
        run_dir = cfg.run_dir
        self.ports: dict[int, IbSwitchPort] = {}
        for p in cfg.ports:
            pcap = IbPcapWriter(RawDir(run_dir).port_pcap(p.ifname), clock) \
                if cfg.pcap and run_dir is not None else None
            self.ports[p.port_no] = IbSwitchPort(p, self.vls, self.params, clock, pcap,
                                                 self._sender(p.port_no))
        self._by_fd = {port.sock.fileno(): port for port in self.ports.values()}
        self.pcap_ports = [port for port in self.ports.values() if port.pcap is not None]
        # queue depths per port and VL, as the Ethernet switch samples its
        # priorities ({sw}.qdepth.csv: its "priority" column is the VL)
        self.sample_ns = cfg.sample_interval_ns if run_dir is not None else 0
        self.logs = RawLogs(run_dir, cfg.name) if self.sample_ns else None
        self._sampled = {p: {} for p in self.ports}
        self._stop = False
        self._next_sample: int | None = None
        self._wake = 0
        self.rx_frames = 0
        self.since_ns = clock.now_ns()
        # Flow-control packets go from the bring-up on, while the agents launch
        # and the CPU is busy: the lateness window starts with the first data
        # packet (as an Ethernet switch's first frame is the traffic's), and a
        # switch that forwards none has none; before it nothing could wait on
        # us (incast-ib's spine2, ~150 credit packets and 0-32 data packets a
        # run, read 0.6-1.9 on credits made late at the launch; a run at 1500
        # was rerun at 6000).
        self.lateness_since_ns: int | None = None

    def stop(self, *_):
        self._stop = True

    # ------------------------------------------------------------------ data path
    def _sender(self, port_no: int):
        def send(end_ns: int, vl: int, frame, meta) -> None:
            in_port, in_vl, n_blocks, depth = meta
            out = self.pipeline.egress(frame, port_no, depth)
            self.ports[port_no].wire.put(end_ns, bytes(out))
            # the packet left the buffer of the port it came in on
            self.ports[in_port].credits[in_vl].release(n_blocks)
        return send

    def receive(self, port: IbSwitchPort, frame, now_ns: int) -> None:
        self.rx_frames += 1
        if port.pcap is not None:
            if self.virtual:            # what it sent that arrived before: first
                port.write_captures(now_ns - 1)
            port.pcap.write(now_ns, frame)
        ethertype = (frame[12] << 8) | frame[13] if len(frame) >= 14 else -1
        if ethertype == ETH_P_IB_LINK:
            fc = parse_fc(frame)
            cr = port.credits.get(fc[0]) if fc is not None else None
            if cr is not None:
                cr.on_fc(fc[1], fc[2], now_ns)
                port.fc_rx[fc[0]] += 1
            else:
                port.fc_errors += 1     # a bad LPCRC or Op, or a VL this port does not run
        egress_port, frame = self.pipeline.ingress(frame, port.port_no)   # counts; link packets stop here
        if ethertype != ETH_P_IB_DATA or len(frame) < ETH_HDR_BYTES + LRH_BYTES:
            return
        vl = frame[14] >> 4
        cr = port.credits.get(vl)
        n = blocks(len(frame) - ETH_HDR_BYTES)
        if cr is None:
            port.vl_errors += 1
            return
        if not cr.on_data(n):
            return                                    # an overrun: counted in cr.overruns
        if self.lateness_since_ns is None:
            self.lateness_since_ns = now_ns
            for p in self.ports.values():
                p.wire.clear_stats()
        out = self.ports.get(egress_port)
        if egress_port == DROP_PORT or out is None:
            cr.release(n)        # dropped (counted by the pipeline): its blocks still count in ABR
            return
        out_vl = self.pipeline.egress_vl(egress_port, frame[15] >> 4)
        if out_vl not in out.credits:
            # sl2vl names a VL the egress port does not run: the packet would
            # reach its peer on a VL without credit there. Dropped, counted.
            out.vl_errors += 1
            cr.release(n)
            return
        out.egress.enqueue(now_ns, frame, vl=out_vl,
                           meta=(port.port_no, vl, n, out.egress.depth(out_vl)))

    def _flow_control(self, now_ns: int) -> int:
        """Send the flow-control packets due; the next time one falls due."""
        nxt = now_ns + IDLE_WAKE_NS
        for port in self.ports.values():
            for vl, cr in port.credits.items():
                if cr.fc_due(now_ns):
                    fctbs, fccl = cr.make_fc(now_ns)
                    # after the packet being serialized, whose blocks FCTBS
                    # counts (the peer resets its ABR to it: never ahead of data)
                    port.wire.put(max(now_ns, port.egress.busy_until) + port.fc_wire_ns,
                                  fc_frame(self.mac, vl, fctbs, fccl))
                    port.fc_tx[vl] += 1
                nxt = min(nxt, cr.next_fc_ns())
        return nxt

    def transmit(self, now_ns: int) -> int:
        """Serve every port, send the flow-control packets due and release
        the wires; the next time anything is due. Flow control after the
        ports: the blocks a packet frees as it starts out go back to the
        port's peer now, not at whatever turn comes next (then its credit
        would come as late as the loop's next wake-up, which no model says)."""
        ports = self.ports.values()
        nxt = now_ns + IDLE_WAKE_NS
        for port in ports:
            t = port.egress.service(now_ns)
            if t is not None and t < nxt:
                nxt = t
        fc = self._flow_control(now_ns)
        if fc < nxt:
            nxt = fc
        for port in ports:
            if port.wire.in_flight:
                port.wire.release(now_ns, port.send)
                if port.wire.in_flight:
                    nxt = min(nxt, port.wire.in_flight[0][0])
        return nxt

    def _sample(self, now_ns: int) -> None:
        write = self.logs.qdepth
        for port_no, port in self.ports.items():
            last = self._sampled[port_no]
            for vl, depth in port.egress.depth_bytes.items():
                if last.get(vl, 0) != depth:
                    write(f"{now_ns},{port_no},{vl},{depth}\n")
                    last[vl] = depth

    # -- the loop: its own (``run``), or a switch pack's (dataplane/pack.py), as
    # the Ethernet switch's: ``fds``, ``begin``, ``next_wake_ns``, ``turn``
    def run(self) -> None:
        """The switch's loop until ``stop``: wait for a frame or the next
        thing due, then take a turn."""
        self.begin()
        fds, clock = self.fds, self.clock
        while not self._stop:
            self.turn(clock.wait_readable(fds, self._wake))

    @property
    def fds(self) -> list[int]:
        """The ports' sockets, to wait on."""
        return list(self._by_fd)

    def begin(self) -> None:
        """Start the samples from now; send what is due (the initial credit).
        Virtual time: at the first turn, after the first wait -- the switch
        starts before the agents open their sockets, and the first window
        opens once every process is there (a credit sent before would be lost)."""
        now = self.clock.now_ns()
        self._next_sample = now + self.sample_ns if self.sample_ns else None
        self._wake = now if self.virtual else self._due(now)

    def next_wake_ns(self, now: int) -> int:
        """When the loop must take its next turn if no frame arrives first."""
        return self._wake

    def control_pending(self) -> bool:
        """Nothing waits for a turn but frames and time: ib.p4 has no CPU port
        (no packet-out), and the switch takes no stats snapshots."""
        return False

    def turn(self, readable, wake_ns: int | None = None) -> None:
        """Drain ``readable`` (fds) through the pipeline into the VL queues,
        then sample and send what is due."""
        now = self.clock.now_ns()
        for fd in readable:
            port = self._by_fd[fd]
            for _ in range(RX_BATCH):
                try:
                    frame = port.sock.recv(RX_MAX_BYTES)
                except BlockingIOError:
                    break
                self.receive(port, frame, now)
        now = self.clock.now_ns()
        self._wake = self._due(now)
        if self.virtual and self.pcap_ports:
            for port in self.pcap_ports:
                port.write_captures(now)

    def _due(self, now: int) -> int:
        """A queue-depth sample if one is due, every port served; the next wake."""
        nxt = self._next_sample
        if nxt is not None:
            if self.virtual:
                if nxt < now:             # samples skipped while idle: back on the grid
                    nxt += -(-(now - nxt) // self.sample_ns) * self.sample_ns
                if now >= nxt:
                    self._sample(now)
                    nxt += self.sample_ns
            elif now >= nxt:
                self._sample(now)
                nxt = max(nxt + self.sample_ns, now + 1)   # a late loop: no catch-up burst
            self._next_sample = nxt
        wake = self.transmit(now)
        if nxt is None or nxt >= wake or (self.virtual and not self._unsampled()):
            return wake       # (virtual time: a sample that would write nothing is a window)
        return nxt

    def _unsampled(self) -> bool:
        """A queue's depth changed since the last sample: one is worth taking."""
        for port_no, port in self.ports.items():
            last = self._sampled[port_no]
            for vl, depth in port.egress.depth_bytes.items():
                if last.get(vl, 0) != depth:
                    return True
        return False

    # ------------------------------------------------------------------ stats
    def stats(self) -> dict:
        now = self.clock.now_ns()
        ports = []
        for p in self.ports.values():
            p.rx_kernel.poll()
            ports.append({
                "port": p.port_no, "ifname": p.cfg.ifname, "send_errors": p.send_errors,
                "rx_socket_drops": p.rx_kernel.drops,
                "vl_errors": p.vl_errors, "fc_errors": p.fc_errors,
                # the run's fidelity (experiment.fidelity); no data packet, no window
                **(p.wire.lateness_stats() if self.lateness_since_ns is not None else
                   {"released_frames": 0, "max_lateness_ns": 0, "lateness_hist": []}),
                "vls": [{"vl": vl, "tx_packets": p.egress.tx_packets[vl],
                         "max_depth_bytes": p.egress.max_depth_bytes[vl],
                         "tx_bytes": p.egress.tx_bytes[vl], "stalls": cr.stalls,
                         "stalled_ns": cr.stalled_total_ns(now), "overruns": cr.overruns,
                         "fc_tx": p.fc_tx[vl], "fc_rx": p.fc_rx[vl]}
                        for vl, cr in p.credits.items()]})
        return {"name": self.cfg.name, "link_layer": "infiniband", "since_ns": self.since_ns,
                "until_ns": now, "lateness_since_ns": self.lateness_since_ns,
                "rx_frames": self.rx_frames, "ports": ports}

    def close(self) -> None:
        if self.logs is not None:
            self.logs.close()
        for port in self.pcap_ports:
            # virtual time: every packet sent, as the Ethernet switch's pcaps
            # have them; up to this process's last time instead would differ
            # with how the switches are packed into processes
            port.write_captures(NEVER_NS)
            port.pcap.close()


def _build(cfg: SwitchConfig) -> tuple[IbSwitch, P4Info, str]:
    p4info = P4Info.load(cfg.p4info_path or IB_P4INFO)
    switch = IbSwitch(cfg, p4info, process_clock(cfg.vtime_socket, cfg.name))
    return switch, p4info, f"{cfg.name}: ready (InfiniBand, {len(switch.vls)} VL)"


def main(argv: list[str] | None = None) -> int:
    return switch_main(argv, "emulator.ib.switch", _build)


if __name__ == "__main__":
    sys.exit(main())
