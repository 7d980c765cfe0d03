"""``p4src/ib.p4`` on the embedded target: the InfiniBand switch pipeline in
Python, table by table, reading what P4Runtime wrote (``SwitchState``) as
``emulator.dataplane.pipeline.FabricPipeline`` does for fabric.p4.

* ``ingress(frame, port)`` -> (egress port, frame): link packets
  (``ETH_P_IB_LINK``) are the link layer's and never reach forwarding
  (counted in ``ib_drop_counter[DROP_LINK_PACKET]``; the switch hands them
  to its credit machinery first), anything not InfiniBand is dropped
  (``DROP_NOT_IB``), a DLID without an ``lft`` entry too
  (``DROP_NO_LFT_ENTRY``); ``ib_rx_port_counter`` counts every frame.
* ``egress(frame, port, qdepth_packets)`` -> frame: the VL ``sl2vl`` gives
  (port, SL) (no entry: VL 0), FECN set when the packet found the egress
  queue at or above ``cc_threshold[port]`` packets (0: never), one such
  packet in marking_rate + 1 (counted in ``fecn_mark_counter``), and the VCRC resealed -- which BMv2 cannot do
  (its crc16 has another polynomial; ``p4src/ib.p4``'s header).
"""
from __future__ import annotations

from emulator.dataplane.pipeline import DROP_PORT  # noqa: F401  (re-exported: the IB switch's)
from emulator.dataplane.state import SwitchState
from emulator.ib.headers import LNH_IBA_LOCAL, LRH_BYTES, reseal_vcrc
from emulator.p4.p4info import P4Info
from emulator.wire import ETH_HDR_BYTES, ETH_P_IB_DATA, ETH_P_IB_LINK

DROP_NOT_IB, DROP_LINK_PACKET, DROP_NO_LFT_ENTRY = 0, 1, 2   # p4src/ib.p4's DROP_* indexes
_LRH = ETH_HDR_BYTES              # the carrier, then the LRH
_BTH = _LRH + LRH_BYTES


class _Ids:
    def __init__(self, p4info: P4Info):
        self.lft = p4info.table_id("lft")
        self.dlid = p4info.match_field_id("lft", "dlid")
        self.forward = p4info.action_id("forward")
        self.forward_port = p4info.param_id("forward", "port")
        self.sl2vl = p4info.table_id("sl2vl")
        self.sl2vl_port = p4info.match_field_id("sl2vl", "port")
        self.sl2vl_sl = p4info.match_field_id("sl2vl", "sl")
        self.set_vl = p4info.action_id("set_vl")
        self.set_vl_vl = p4info.param_id("set_vl", "vl")
        self.cc_threshold = p4info.table_id("cc_threshold")
        self.cc_port = p4info.match_field_id("cc_threshold", "port")
        self.set_cc_threshold = p4info.action_id("set_cc_threshold")
        self.set_cc_packets = p4info.param_id("set_cc_threshold", "packets")
        self.set_cc_rate = p4info.param_id("set_cc_threshold", "marking_rate")
        self.drop_counter = p4info.counter_id("ib_drop_counter")
        self.rx_counter = p4info.counter_id("ib_rx_port_counter")
        self.fecn_counter = p4info.counter_id("fecn_mark_counter")


class _Tables:
    """Dicts compiled from one generation of the state."""

    def __init__(self, state: SwitchState, ids: _Ids):
        def exact(table, fields, action, param):
            return {tuple(e.match[f][1] for f in fields): e.action.param(param)
                    for e in state.tables.get(table, {}).values()
                    if e.action is not None and e.action.action_id == action}
        with state.lock:
            self.generation = state.generation
            self.configured = bool(state.counters)
            self.lft = {k[0]: v for k, v in exact(ids.lft, (ids.dlid,), ids.forward,
                                                  ids.forward_port).items()}
            self.sl2vl = exact(ids.sl2vl, (ids.sl2vl_port, ids.sl2vl_sl), ids.set_vl, ids.set_vl_vl)
            # port -> (threshold packets, marking rate)
            self.cc = {e.match[ids.cc_port][1]: (e.action.param(ids.set_cc_packets),
                                                 e.action.param(ids.set_cc_rate))
                       for e in state.tables.get(ids.cc_threshold, {}).values()
                       if e.action is not None and e.action.action_id == ids.set_cc_threshold}
            self.drops = state.counters.get(ids.drop_counter)
            self.rx = state.counters.get(ids.rx_counter)
            self.fecn = state.counters.get(ids.fecn_counter)


class IbPipeline:
    """Ingress and egress of ib.p4 over one switch's P4Runtime state."""

    def __init__(self, state: SwitchState, p4info: P4Info):
        self.state = state
        self.ids = _Ids(p4info)
        self._tables: _Tables | None = None
        self.cc_marking_countdown: dict[int, int] = {}   # ib.p4's register, per port

    @property
    def tables(self) -> _Tables:
        t = self._tables
        if t is None or t.generation != self.state.generation:
            t = self._tables = _Tables(self.state, self.ids)
        return t

    def ingress(self, frame, ingress_port: int) -> tuple[int, bytes]:
        t = self.tables
        if not t.configured:
            return DROP_PORT, frame           # no pipeline config yet: like BMv2, nothing passes
        t.rx.count(ingress_port, len(frame))
        ethertype = (frame[12] << 8) | frame[13] if len(frame) >= 14 else -1
        if ethertype == ETH_P_IB_LINK:
            t.drops.count(DROP_LINK_PACKET, len(frame))
            return DROP_PORT, frame
        if ethertype != ETH_P_IB_DATA or len(frame) < _BTH:
            t.drops.count(DROP_NOT_IB, len(frame))
            return DROP_PORT, frame
        dlid = (frame[_LRH + 2] << 8) | frame[_LRH + 3]
        port = t.lft.get(dlid)
        if port is None:
            t.drops.count(DROP_NO_LFT_ENTRY, len(frame))
            return DROP_PORT, frame
        return port, frame

    def egress_vl(self, egress_port: int, sl: int) -> int:
        """The VL ib.p4's sl2vl gives (port, SL): the queue a packet waits in."""
        return self.tables.sl2vl.get((egress_port, sl), 0)

    def egress(self, frame, egress_port: int, qdepth_packets: int) -> bytearray:
        """The packet as it leaves ``egress_port``: its VL, FECN, VCRC."""
        t = self.tables
        out = bytearray(frame)
        vl = t.sl2vl.get((egress_port, out[_LRH + 1] >> 4), 0)
        out[_LRH] = (vl << 4) | (out[_LRH] & 0x0F)
        threshold, marking_rate = t.cc.get(egress_port, (0, 0))
        if (threshold and qdepth_packets >= threshold and out[_LRH + 1] & 0x03 == LNH_IBA_LOCAL
                and len(out) >= _BTH + 12):
            left = self.cc_marking_countdown.get(egress_port, 0)
            if left == 0:                     # one eligible packet in marking_rate + 1
                out[_BTH + 4] |= 0x80                                # BTH FECN
                t.fecn.count(egress_port, len(out))
                self.cc_marking_countdown[egress_port] = marking_rate
            else:
                self.cc_marking_countdown[egress_port] = left - 1
        carrier, packet = out[:_LRH], out[_LRH:]
        return carrier + reseal_vcrc(packet)
