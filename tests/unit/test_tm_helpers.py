"""Shared helpers of the traffic-manager unit tests (no tests here): a TM wired to real P4 counters."""
from __future__ import annotations

from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulator.dataplane.pipeline import FabricPipeline, Verdict, _ipv4_header_checksum
from emulator.dataplane.state import SwitchState
from emulator.dataplane.tm import TrafficManager
from emulator.p4.p4info import P4Info

ROUTER_MAC = bytes.fromhex("020000000101")
ROCE_PRIO = 3
_P4 = None


def p4info() -> P4Info:
    global _P4
    if _P4 is None:
        _P4 = P4Info.load()
    return _P4


def make_tm(ports, buffer_bytes=1_000_000, seed=1, log=None):
    """A TrafficManager whose counters are a configured SwitchState's (no tables)."""
    p4 = p4info()
    state = SwitchState()
    state.reset(p4.table_ids, p4.action_profile_ids, p4.counter_sizes)
    pipe = FabricPipeline(state, p4)
    tm = TrafficManager(ports, buffer_bytes, ROUTER_MAC, seed=seed, log=log)
    pipe.on_tables = tm.set_tables
    _ = pipe.tables
    return tm, state, pipe


def verdict(egress, ingress, prio=0, pfc=None, ecn=None) -> Verdict:
    return Verdict(egress, priority=prio, pfc=pfc, ecn=ecn,
                   in_cell=ingress * 8 + prio, eg_cell=egress * 8 + prio)


_TEMPLATES: dict[tuple, bytes] = {}


def roce(size=1000, ecn=0b10, dscp=26, sport=49152, ident=1) -> bytes:
    """A UDP/4791 IPv4 frame of ``size`` bytes (valid header checksum)."""
    key = (size, ecn, dscp, sport)
    t = _TEMPLATES.get(key)
    if t is None:
        hdr = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01") / IP(
            src="10.0.1.1", dst="10.0.1.2", tos=dscp << 2 | ecn, id=0, ttl=63) / UDP(
            sport=sport, dport=4791, chksum=0)
        t = _TEMPLATES[key] = raw(hdr / (b"\x5a" * (size - len(hdr))))
    f = bytearray(t)
    f[18], f[19] = ident >> 8 & 0xFF, ident & 0xFF
    csum = _ipv4_header_checksum(f)
    f[24], f[25] = csum >> 8, csum & 0xFF
    return bytes(f)


class Collect:
    """A port's ``send``: what leaves the wire, with the release call's now."""

    def __init__(self):
        self.frames: list[tuple[int, bytes]] = []
        self.now = 0

    def __call__(self, frame):
        self.frames.append((self.now, bytes(frame)))


def attach(tm) -> dict[int, Collect]:
    out = {}
    for no, port in tm.ports.items():
        out[no] = port.send = Collect()
    return out


def run(tm, out, until_ns, step_ns=1000, start_ns=0):
    """Drive timers, serving and wires from ``start_ns`` to ``until_ns`` in steps."""
    for now in range(start_ns, until_ns + 1, step_ns):
        for c in out.values():
            c.now = now
        tm.poll(now)
        tm.transmit(now)
