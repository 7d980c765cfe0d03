"""How fast does a switch target forward? (packets/s, one hop and leaf-spine-leaf, with loss)

    sudo .venv/bin/python bench/forwarding.py [--target embedded|bmv2] [--seconds 2] [--rates 10000,...]

Builds a 1-spine, 2-leaf fabric under Mininet with undilated 100 Gbps links
(so the traffic manager never limits: what is measured is the Python data
plane), blasts 1000-byte RoCEv2-sized UDP frames from h1 at each offered
rate, and counts what arrives at the destination host's interface:

    one hop     h1 -> leaf1 -> h2
    three hops  h1 -> leaf1 -> spine1 -> leaf2 -> h3

It also times the pipeline alone (no sockets) on the same frames. Every
figure is printed; nothing is asserted (speed targets live here, not in tests).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from emulator.net.fabric import FabricNet  # noqa: E402
from emulator.topo import fabric_from_dict  # noqa: E402

BENCH_FABRIC = {
    "name": "bench",
    "nodes": [{"name": "spine1", "role": "spine"}, {"name": "leaf1", "role": "leaf"},
              {"name": "leaf2", "role": "leaf"}, {"name": "h1", "role": "host"},
              {"name": "h2", "role": "host"}, {"name": "h3", "role": "host"}],
    "links": [{"a": "h1", "b": "leaf1", "rate_gbps": 100, "delay_us": 0},
              {"a": "h2", "b": "leaf1", "rate_gbps": 100, "delay_us": 0},
              {"a": "h3", "b": "leaf2", "rate_gbps": 100, "delay_us": 0},
              {"a": "leaf1", "b": "spine1", "rate_gbps": 100, "delay_us": 0},
              {"a": "leaf2", "b": "spine1", "rate_gbps": 100, "delay_us": 0}],
}


def rx_packets(host, ifname: str) -> int:
    return int(host.cmd(f"cat /sys/class/net/{ifname}/statistics/rx_packets").strip())


def blast(fnet, src: str, dst: str, pps: float, seconds: float) -> dict:
    fabric = fnet.fabric
    plan = fabric.addresses
    h_src, h_dst = fnet.host(src), fnet.host(dst)
    dst_if = plan.host_ifname(dst)
    before = rx_packets(h_dst, dst_if)
    out = h_src.cmd(
        f"{sys.executable} {REPO / 'bench/pktblast.py'} --ifname {plan.host_ifname(src)} "
        f"--src-mac {plan.host_mac(src)} --dst-mac {plan.gateway_mac(src)} "
        f"--src-ip {plan.host_ip(src)} --dst-ip {plan.host_ip(dst)} --pps {pps} --seconds {seconds}")
    time.sleep(0.3)  # let queues drain
    got = rx_packets(h_dst, dst_if) - before
    sent = json.loads(out.strip().splitlines()[-1])
    return {"offered_pps": sent["pps"], "sent": sent["sent"], "received": got,
            "delivered_pps": got / sent["seconds"], "loss": 1 - got / max(1, sent["sent"])}


def pipeline_only(n: int = 200_000) -> float:
    """ingress() calls per second on one core, flow cache warm (no I/O)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from emulator.control.controller import switch_entities
    from emulator.dataplane.pipeline import FabricPipeline
    from emulator.dataplane.state import SwitchState
    from emulator.p4.p4info import P4Info

    fabric = fabric_from_dict(BENCH_FABRIC)
    p4info = P4Info.load()
    state = SwitchState()
    state.reset(p4info.table_ids, p4info.action_profile_ids, p4info.counter_sizes)
    ents = switch_entities(fabric, p4info, "leaf1")
    prof = state.action_profiles[p4info.action_profile_id("ecmp_selector")]
    for m in ents["members"]:
        prof.members[m.member_id] = p4info.decode_action(m.action)
    for te in ents["tables"] + ents["routes"]:
        e = p4info.codec.decode_table_entry(te)
        state.tables[e.table_id][e.key()] = e
    state.changed()
    plan = fabric.addresses
    frames = [bytes(Ether(dst=plan.router_mac("leaf1"), src=plan.host_mac("h1"))
                    / IP(src=plan.host_ip("h1"), dst=plan.host_ip("h3")) / UDP(sport=0xC000 + i, dport=4791)
                    / (b"\0" * 950)) for i in range(16)]
    pipe = FabricPipeline(state, p4info)
    assert pipe.ingress(frames[0], 1)[0] == fabric.port("leaf1", 3).port_no
    t0 = time.perf_counter()
    for i in range(n):
        pipe.ingress(frames[i & 15], 1)
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rates", default="10000,20000,40000,60000,80000,100000,0",
                    help="offered packets/s, comma-separated; 0 = as fast as the sender can")
    ap.add_argument("--target", choices=("embedded", "bmv2"), default="embedded")
    a = ap.parse_args()
    print(f"target {a.target}")
    if a.target == "embedded":
        print(f"pipeline only (no I/O, one core): {pipeline_only():,.0f} packets/s")
    fabric = fabric_from_dict(BENCH_FABRIC)
    with tempfile.TemporaryDirectory(prefix="fabric-emu-bench-") as tmp:
        with FabricNet(fabric, tmp, dilation=1, target=a.target) as fnet:
            for label, dst in (("one hop (h1-leaf1-h2)", "h2"), ("three hops (h1-leaf1-spine1-leaf2-h3)", "h3")):
                print(f"\n{label}, 1000-byte frames")
                print(f"{'offered pps':>12} {'delivered pps':>14} {'loss':>8}")
                for rate in (float(r) for r in a.rates.split(",")):
                    r = blast(fnet, "h1", dst, rate, a.seconds)
                    print(f"{r['offered_pps']:12,.0f} {r['delivered_pps']:14,.0f} {r['loss']:8.2%}")


if __name__ == "__main__":
    main()
