"""The collective engine over real RDMA: two "servers" (network namespaces,
one agent process each) x 2 GPUs, NIC g of server 0 joined back-to-back to
NIC g of server 1 by a veth pair (rail-like, no switch: each NIC's gateway
MAC is its peer's MAC). Needs root."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from emulator.collectives import report
from emulator.control.qos import mtu_frame_bytes
from emulator.experiment.fidelity import nic_verdict
from emulator.wire import WIRE_OVERHEAD_BYTES

PY = sys.executable
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
S, G = 2, 2
DILATION = 4000   # 25 Mbit/s per NIC in wall time; doubled while the NICs fall behind
MAX_DILATION = 64000
LINK_GBPS = 100                        # fabric rate of each NIC link
NVLINK_GBPS = 900 * 8                  # 900 GB/s per GPU, per direction
MTU = 1024
# an MTU frame's serialization at the fabric rate: the NIC lag's yardstick
FRAME_FABRIC_NS = round((mtu_frame_bytes(MTU) + WIRE_OVERHEAD_BYTES) * 8 / LINK_GBPS)


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True, timeout=20)


def mac(s, g):
    return f"02:00:0a:63:{g:02x}:{s + 1:02x}"


def ip(s, g):
    return f"10.99.{g}.{s + 1}"


@pytest.fixture
def servers(request, tmp_path):
    tag = f"{os.getpid() % 100000}"
    ns = [f"coll-{tag}-s{s}" for s in range(S)]
    dev = {(s, g): f"cl{tag}s{s}g{g}"[:15] for s in range(S) for g in range(G)}

    def cleanup():
        for n in ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=20)
        for g in range(G):
            subprocess.run(["ip", "link", "del", dev[(0, g)]], capture_output=True, timeout=20)

    request.addfinalizer(cleanup)
    for n in ns:
        sh("ip", "netns", "add", n)
    for g in range(G):
        sh("ip", "link", "add", dev[(0, g)], "type", "veth", "peer", "name", dev[(1, g)])
        for s in range(S):
            d = dev[(s, g)]
            sh("ip", "link", "set", d, "netns", ns[s])
            sh("ip", "-n", ns[s], "link", "set", d, "address", mac(s, g))
            sh("ip", "netns", "exec", ns[s], "sysctl", "-qw", f"net.ipv6.conf.{d}.disable_ipv6=1")
            sh("ip", "-n", ns[s], "addr", "add", f"{ip(s, g)}/24", "dev", d)
            sh("ip", "-n", ns[s], "link", "set", d, "up")
    return {"ns": ns, "dev": dev, "dir": tmp_path}


DEADLINE_S = 30   # the servers' deadline at DILATION; the same fabric work at any D


def run_servers(env, workload, dilation=DILATION, start_in_s=1.5):
    # the same fabric time at a higher D takes D / DILATION times the wall time
    deadline_s = DEADLINE_S * max(1.0, dilation / DILATION)
    start = time.time_ns() + int(start_in_s * 1e9)
    procs, paths = [], []
    for s in range(S):
        cfg = {"server": s, "servers": S, "dilation": dilation,
               "nics": [{"ifname": env["dev"][(s, g)], "mac": mac(s, g), "ip": ip(s, g),
                         "gateway_mac": mac(1 - s, g), "rate_bps": int(LINK_GBPS * 1e9),   # fabric
                         "mtu_bytes": MTU} for g in range(G)],
               "rank_ips": {str(r * G + g): ip(r, g) for r in range(S) for g in range(G)},
               "nvlink": {"rate_bps": int(NVLINK_GBPS * 1e9 / dilation), "delay_ns": 500 * dilation},
               "workload": workload, "start_at_unix_ns": start, "deadline_s": deadline_s,
               "result_path": str(env["dir"] / f"s{s}.result.json")}
        p = env["dir"] / f"s{s}.json"
        p.write_text(json.dumps(cfg))
        paths.append(cfg["result_path"])
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", env["ns"][s], PY, "-m", "emulator.collectives.agent", str(p)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    try:
        for p in procs:
            outs.append((p.returncode,) + p.communicate(timeout=deadline_s + 10) + (p.returncode,))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = []
    for path, out in zip(paths, outs):
        assert os.path.exists(path), out
        with open(path) as f:
            results.append(json.load(f))
    for r, out in zip(results, outs):
        assert r["error"] is None and out[3] == 0, (r["error"], out[2][-2000:])
    return results


@pytest.mark.netns
def test_all_reduce_256k_over_rdma_rails(servers):
    size = 256 << 10
    wl = {"slice_bytes": 65536, "slots": 4,
          "tests": [{"collective": "all_reduce", "sizes": [size], "iters": 4, "warmup_iters": 1,
                     "algorithm": "ring"},
                    {"collective": "all_reduce", "sizes": [size], "iters": 4, "warmup_iters": 1,
                     "algorithm": "hierarchical"},
                    {"collective": "all_gather", "sizes": [size], "iters": 2, "warmup_iters": 0}],
          "training": {"steps": 3, "warmup_steps": 1, "compute_us": 20, "size_bytes": size,
                       "algorithm": "hierarchical"}}
    # Bandwidth bounds hold only for a run that kept its schedule: at a
    # dilation where the NICs fell behind (a loaded machine), run again at 2 x D.
    dilation = DILATION
    while True:
        t0 = time.monotonic()
        res = run_servers(servers, wl, dilation)
        wall_s = time.monotonic() - t0
        behind = [nic_verdict(nic, dilation, FRAME_FABRIC_NS) for s in res for nic in s["nics"]]
        if not any(v["behind"] for v in behind) or dilation >= MAX_DILATION:
            break
        dilation *= 2
    assert not any(v["behind"] for v in behind), behind
    rows = report.collective_rows([r for s in res for r in s["records"]], dilation)
    by = {(r["collective"], r["algorithm"]): r for r in rows}
    for r in rows:                               # every rank's result is right
        assert r["wrong"] == 0 and r["nranks"] == 4, r
    link_GBps = LINK_GBPS / 8
    ring = by[("all_reduce", "ring")]
    assert ring["busbw_GBps"] <= link_GBps * 1.001, ring
    assert ring["busbw_GBps"] >= 0.6 * link_GBps, ring
    # Hierarchical: the NICs carry only 2(S-1)/S x size/G each; busbw (over
    # n = 4 ranks) is bounded by (n-1)/(S-1) x the link, and beats the ring.
    hier = by[("all_reduce", "hierarchical")]
    assert hier["busbw_GBps"] <= 3 * link_GBps * 1.001, hier
    assert hier["busbw_GBps"] > ring["busbw_GBps"], (hier, ring)
    tr = report.training_summary([r for s in res for r in s["training"]], dilation)
    assert tr["wrong"] == 0 and tr["steps"] == 3
    assert tr["step_time_us"]["mean"] >= 20 + tr["collective_time_us"]["mean"] * 0.9
    for s in res:
        for nic in s["nics"]:
            # receives for doorbells/credits are always posted in time (no RNR),
            # and every frame was well-formed
            assert nic["tx_rnr_naks"] == 0 and nic["rx_rnr_naks"] == 0, nic
            assert nic["rx_icrc_errors"] == 0 and nic["rx_bad_requests"] == 0, nic
    print(report.format_table(rows))
    print(json.dumps(tr), f"wall {wall_s:.1f} s at D = {dilation}")
