"""Two host agents in two network namespaces joined by a veth pair (no
switch: each side's gateway MAC is the peer's MAC). Needs root."""
from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from emulator import wire
from emulator.control.qos import mtu_frame_bytes
from emulator.experiment.fidelity import nic_verdict
from emulator.wire import WIRE_OVERHEAD_BYTES
from emulator.nic import roce
from emulator.agents.payload import pattern_bytes, pattern_matches, write_layout

# root, namespaces and veths: tests/conftest.py skips it, saying why, for
# other users, and ``make test-fast`` leaves it out
needs_root = pytest.mark.netns
_count = itertools.count(1)

PY = sys.executable
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAC = {"a": "02:00:00:00:0a:01", "b": "02:00:00:00:0b:01"}
IP = {"a": "10.99.0.1", "b": "10.99.0.2"}
QPN = {"a": 16, "b": 32}


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True, timeout=20)


@pytest.fixture
def veth(request, tmp_path):
    """Namespaces rtest-<pid>-<n>-{a,b}, interfaces rt<pid><n>{a,b}; removed
    in the finalizer even when the test fails."""
    n = next(_count)
    tag = f"{os.getpid()}{n}"
    ns = {s: f"rtest-{os.getpid()}-{n}-{s}" for s in "ab"}
    dev = {s: f"rt{tag}{s}"[:15] for s in "ab"}

    def cleanup():
        for s in "ab":
            subprocess.run(["ip", "netns", "del", ns[s]], capture_output=True, timeout=20)
        subprocess.run(["ip", "link", "del", dev["a"]], capture_output=True, timeout=20)

    request.addfinalizer(cleanup)
    for s in "ab":
        sh("ip", "netns", "add", ns[s])
    sh("ip", "link", "add", dev["a"], "type", "veth", "peer", "name", dev["b"])
    for s in "ab":
        sh("ip", "link", "set", dev[s], "netns", ns[s])
        sh("ip", "-n", ns[s], "link", "set", dev[s], "address", MAC[s])
        sh("ip", "netns", "exec", ns[s], "sysctl", "-qw", f"net.ipv6.conf.{dev[s]}.disable_ipv6=1")
        sh("ip", "-n", ns[s], "addr", "add", f"{IP[s]}/24", "dev", dev[s])
        sh("ip", "-n", ns[s], "link", "set", dev[s], "up")
    return {"ns": ns, "dev": dev, "dir": tmp_path}


def config(env, side, rate_bps, send=(), expect=(), deadline_s=15, start_in_s=1.2, **extra):
    peer = "b" if side == "a" else "a"
    cfg = {
        "host": side, "ifname": env["dev"][side], "mac": MAC[side], "ip": IP[side],
        "gateway_mac": MAC[peer], "rate_bps": rate_bps, "mtu_bytes": 1024, "dscp": 26,
        "tx_delay_ns": 0, "start_at_unix_ns": time.time_ns() + int(start_in_s * 1e9),
        "deadline_s": deadline_s,
        "qps": [{"qpn": QPN[side], "remote_ip": IP[peer], "remote_qpn": QPN[peer],
                 "udp_sport": 49152 + QPN[side]}],
        "send": list(send), "expect": list(expect),
        "result_path": str(env["dir"] / f"{side}.result.json"),
    }
    # a real-clock link at D = 1 on a CPU shared with the test: an ACK timeout
    # for its wall time (a runner gives nic.rto_us x D), not the fabric default
    cfg["rto_ns"] = 100_000_000
    cfg.update(extra)
    path = env["dir"] / f"{side}.json"
    path.write_text(json.dumps(cfg))
    return cfg, path


def start_agent(env, side, path):
    return subprocess.Popen(
        ["ip", "netns", "exec", env["ns"][side], PY, "-m", "emulator.agents.host", str(path)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_pair(env, cfg_a, cfg_b, timeout_s=20):
    procs = {s: start_agent(env, s, p) for s, p in (("a", cfg_a[1]), ("b", cfg_b[1]))}
    out = {}
    try:
        for s, p in procs.items():
            stdout, stderr = p.communicate(timeout=timeout_s)
            out[s] = (p.returncode, stdout, stderr)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    results = {}
    for s, cfg in (("a", cfg_a[0]), ("b", cfg_b[0])):
        assert os.path.exists(cfg["result_path"]), out[s][2]
        with open(cfg["result_path"]) as f:
            results[s] = json.load(f)
    return results, out


def add_loss(env, from_side, one_in):
    """Lose each frame ``from_side`` sends with probability 1/one_in.

    ``tc ... netem loss`` on the sender's egress where the kernel has
    sch_netem (netem reports a lost frame as sent). This kernel has neither
    netem nor gact, and a drop in the egress path is reported to an
    AF_PACKET sender as ENOBUFS (which the NIC rightly retries), so instead:
    a direct-action classic-BPF filter on the *receiver's* clsact ingress,
    ``ld rand; mod #one_in; jeq #0 -> TC_ACT_SHOT``. Ingress tc runs before
    protocol-bound packet sockets (ours is bound to ETH_P_IP) get the frame.
    """
    ns, dev = env["ns"][from_side], env["dev"][from_side]
    netem = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root",
                            "netem", "loss", f"{100 / one_in:g}%"], capture_output=True, timeout=20)
    if netem.returncode == 0:
        return
    peer = "b" if from_side == "a" else "a"
    ns, dev = env["ns"][peer], env["dev"][peer]
    sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "clsact")
    prog = [(0x20, 0, 0, 0xFFFFF000 + 56),   # ld rand (SKF_AD_OFF + SKF_AD_RANDOM)
            (0x94, 0, 0, one_in),            # A %= one_in
            (0x15, 0, 1, 0),                 # A == 0 ?
            (0x06, 0, 0, 2),                 #   TC_ACT_SHOT
            (0x06, 0, 0, 0)]                 #   TC_ACT_OK
    code = ",".join([str(len(prog))] + [" ".join(map(str, i)) for i in prog])
    sh("ip", "netns", "exec", ns, "tc", "filter", "add", "dev", dev, "ingress", "bpf", "da",
       "bytecode", code)


def ideal_ns(size_bytes, rate_bps, mtu=1024):
    """Serialization time of a WRITE of size_bytes: every frame + 24 bytes."""
    full, rest = divmod(size_bytes, mtu)
    sizes = [mtu] * full + ([rest] if rest else [])
    total = 0
    for i, plen in enumerate(sizes):
        flen = 14 + 20 + 8 + 12 + (16 if i == 0 else 0) + plen + (-plen & 3) + 4
        total += flen + wire.WIRE_OVERHEAD_BYTES
    return total * 8e9 / rate_bps


@needs_root
def test_write_and_send_over_veth(veth):
    rate = 20_000_000
    size = 4 << 20
    expect_b = [{"flow_id": 1, "qpn": QPN["b"], "op": "write", "size_bytes": size},
                {"flow_id": 2, "qpn": QPN["b"], "op": "send", "size_bytes": 20000}]
    addr = write_layout(expect_b)[1]
    a = config(veth, "a", rate,
               send=[{"flow_id": 1, "qpn": QPN["a"], "op": "write", "size_bytes": size,
                      "start_offset_ns": 0, "rkey": 0x1234, "remote_addr": addr},
                     {"flow_id": 2, "qpn": QPN["a"], "op": "send", "size_bytes": 20000,
                      "start_offset_ns": 10_000_000}],
               expect=[{"flow_id": 3, "qpn": QPN["a"], "op": "send", "size_bytes": 3000}],
               rto_ns=1_000_000_000, linger_s=0.3)   # clean link: no retransmissions
    b = config(veth, "b", rate, expect=expect_b, rto_ns=1_000_000_000, linger_s=0.3,
               send=[{"flow_id": 3, "qpn": QPN["b"], "op": "send", "size_bytes": 3000,
                      "start_offset_ns": 300_000_000}])
    res, out = run_pair(veth, a, b)
    assert out["a"][0] == 0 and out["b"][0] == 0, out
    assert out["a"][1] == "READY a\n" and out["b"][1] == "READY b\n"
    ra, rb = res["a"], res["b"]
    assert ra["complete"] and rb["complete"] and ra["reason"] == "done"
    w, s = ra["send"]
    assert w["complete"] and s["complete"] and w["status"] == "SUCCESS"
    assert [e["intact"] for e in rb["expect"]] == [True, True]
    assert [e["delivered_bytes"] for e in rb["expect"]] == [size, 20000]
    assert ra["expect"][0]["intact"] and ra["expect"][0]["complete"]
    # FCT consistent with the pacing: 4 MiB at 20 Mbit/s takes >= 1.81 s on the wire
    lower = ideal_ns(size, rate)
    assert lower > 1.8e9
    assert w["fct_ns"] >= lower * 0.999, (w["fct_ns"], lower)      # never above line rate
    # the SEND was queued behind the WRITE on the same QP
    assert s["complete_unix_ns"] >= w["complete_unix_ns"]
    na, nb = ra["nic"], rb["nic"]
    # On the real clock the upper bound holds only where the sender kept its
    # schedule (a loaded machine may start it late or starve its pacer).
    frame_ns = round((mtu_frame_bytes(1024) + WIRE_OVERHEAD_BYTES) * 8e9 / rate)
    if ra["ready_unix_ns"] < ra["start_at_unix_ns"] and not nic_verdict(na, 1, frame_ns)["behind"]:
        assert w["fct_ns"] <= lower * 1.3 + 150e6, (w["fct_ns"], lower)
    if rb["ready_unix_ns"] < ra["start_at_unix_ns"]:
        # a clean link and a receiver that was listening: nothing to resend
        # (on a loaded machine the receiver may come up late and miss the start)
        assert na["tx_retransmits"] == 0 and na["timeouts"] == 0 and nb["rx_out_of_order"] == 0
    assert nb["rx_data_payload_bytes"] == size + 20000
    assert nb["rx_ignored"] == 0 and nb["rx_icrc_errors"] == 0
    assert 0 < nb["tx_acks"] < na["tx_data_packets"] / 8     # coalesced every 16 packets
    assert na["tx_lag_mean_ns"] < 1_000_000
    # the flow is recognized by its address and the payload is the documented pattern
    assert rb["config"]["write_layout"] == {"1": 0}
    assert pattern_bytes(1, 65536, 8) != pattern_bytes(1, 0, 8)


def test_a_payload_is_checked_against_its_pattern_without_building_it():
    import random
    rng = random.Random(7)
    for _ in range(40):
        flow, off, n = rng.randrange(1, 50), rng.randrange(0, 300_000), rng.randrange(1, 200_000)
        region = bytearray(8) + pattern_bytes(flow, off, n) + bytearray(8)
        data = memoryview(region)[8:8 + n]            # as the NIC hands it: a view of its MR
        assert pattern_matches(flow, off, data) and pattern_matches(flow, off, bytes(data))
        region[8 + rng.randrange(n)] ^= 1 << rng.randrange(8)    # one bit anywhere
        assert not pattern_matches(flow, off, data)
        assert not pattern_matches(flow + 1, off, pattern_bytes(flow, off, n))
    assert pattern_matches(3, 0, b"")


@needs_root
def test_lossy_link_completes_with_go_back_n(veth):
    rate = 20_000_000
    size = 1 << 20
    # 2% loss on data (a -> b) and 2% on ACKs (b -> a)
    add_loss(veth, "a", one_in=50)
    add_loss(veth, "b", one_in=50)
    a = config(veth, "a", rate,
               send=[{"flow_id": 7, "qpn": QPN["a"], "op": "write", "size_bytes": size,
                      "rkey": 0x1234, "remote_addr": 0}], rto_ns=30_000_000)
    b = config(veth, "b", rate,
               expect=[{"flow_id": 7, "qpn": QPN["b"], "op": "write", "size_bytes": size}],
               rto_ns=30_000_000)
    res, out = run_pair(veth, a, b)
    ra, rb = res["a"], res["b"]
    assert ra["complete"] and rb["complete"], out
    assert rb["expect"][0]["intact"] and ra["send"][0]["complete"]
    na, nb = ra["nic"], rb["nic"]
    assert na["tx_retransmits"] > 0
    assert nb["rx_out_of_order"] > 0 and nb["tx_naks"] > 0 and na["nak_rewinds"] > 0
    assert nb["rx_data_payload_bytes"] == size          # each byte placed once
    assert ra["send"][0]["fct_ns"] >= ideal_ns(size, rate)


@needs_root
def test_sigterm_writes_partial_result(veth):
    """A receiver waiting for a flow that never comes exits promptly on
    SIGTERM and reports what it has."""
    b = config(veth, "b", 20_000_000, deadline_s=60, start_in_s=0,
               expect=[{"flow_id": 9, "qpn": QPN["b"], "op": "write", "size_bytes": 1000}])
    p = start_agent(veth, "b", b[1])
    try:
        # its handlers are in once it says READY (NIC up): not a guess of how
        # long its imports take on a loaded machine
        assert p.stdout.readline().startswith("READY"), p.stderr.read()
        assert p.poll() is None
        t0 = time.monotonic()
        # `ip netns exec` execs the agent in place, so p.pid is the agent itself
        os.kill(p.pid, signal.SIGTERM)
        p.communicate(timeout=5)
        assert time.monotonic() - t0 < 5.0     # promptly: its deadline is 60 s away
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 3
    with open(b[0]["result_path"]) as f:
        r = json.load(f)
    assert r["reason"] == "signal" and not r["complete"]
    assert r["expect"][0] == {**r["expect"][0], "complete": False, "delivered_bytes": 0}


def test_agent_rejects_bad_config(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"host": "x", "ifname": "lo", "mac": "02:00:00:00:00:01",
                                "ip": "10.0.0.1", "gateway_mac": "02:00:00:00:00:02",
                                "result_path": str(tmp_path / "r.json"),
                                "qps": [], "send": [{"flow_id": 1, "qpn": 5, "size_bytes": 1}]}))
    p = subprocess.run([PY, "-m", "emulator.agents.host", str(path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 2
    assert "send[0].qpn" in p.stderr and len(p.stderr.strip().splitlines()) == 1


RX_SCRIPT = r"""
import json, sys, time
from emulator.nic.nic import RoceNic
from emulator.schema.nic import NicConfig
class Logs:
    def __init__(self): self.pfc_rows = []
    def qp(self, *a): pass
    def cnp(self, *a): pass
    def pfc(self, *a): self.pfc_rows.append(a[1:])
logs = Logs()
nic = RoceNic(NicConfig(ifname=sys.argv[1], mac=sys.argv[2], ip=sys.argv[3],
                        gateway_mac=sys.argv[4], rate_bps=10_000_000), logs=logs)
nic.create_qp(32, sys.argv[5], 16)
nic.register_mr(4096, addr=0, rkey=9)
print("READY", flush=True)
nic.run_until(lambda: False, 1.5)
nic.poll_kernel_stats()
print(json.dumps({**nic.stats.as_dict(), "pfc_rows": logs.pfc_rows}), flush=True)
"""

TX_SCRIPT = r"""
import socket, sys
from scapy.compat import raw
from scapy.layers.inet import IP, UDP, TCP
from scapy.layers.l2 import ARP, Ether
from emulator.nic import roce
dev, src_mac, dst_mac, src_ip, dst_ip = sys.argv[1:6]
tpl = lambda dip: roce.FrameTemplate(src_mac, dst_mac, src_ip, dip, 49152, 32)
good = bytes(tpl(dst_ip).build(roce.RC_WRITE_ONLY, 0, b"abcd", ack_req=True, reth=(0, 9, 4)))
eth = Ether(src=src_mac, dst=dst_mac)
junk = [
    bytes(tpl("10.99.0.77").build(roce.RC_WRITE_ONLY, 0, b"abcd", reth=(0, 9, 4))),  # other IP
    raw(eth / IP(src=src_ip, dst=dst_ip) / UDP(sport=1, dport=4792) / (b"x" * 40)),
    raw(eth / IP(src=src_ip, dst=dst_ip) / TCP(sport=1, dport=4791) / (b"x" * 40)),
    raw(eth / IP(src=src_ip, dst=dst_ip, flags="MF") / UDP(sport=1, dport=4791) / (b"x" * 40)),
    raw(eth / ARP(psrc=src_ip, pdst=dst_ip)),
    # MAC control: 802.3x PAUSE (opcode 1), PFC to another address
    bytes.fromhex("0180c2000001") + bytes.fromhex(src_mac.replace(":", ""))
    + b"\x88\x08\x00\x01\xff\xff" + bytes(40),
    bytes.fromhex("0180c2000002") + bytes.fromhex(src_mac.replace(":", ""))
    + b"\x88\x08\x01\x01\x00\x08" + b"\x00\x00" * 3 + b"\x00\x07" + bytes(24),
]
# PFC: class-enable bit 3, timer[3] = 7 quanta
pfc = (bytes.fromhex("0180c2000001") + bytes.fromhex(src_mac.replace(":", ""))
       + b"\x88\x08\x01\x01\x00\x08" + b"\x00\x00" * 3 + b"\x00\x07" + bytes(24))
junk.append(pfc)
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((dev, 0))
for f in junk:
    s.send(f)
s.send(good)
"""


@needs_root
def test_kernel_filter_passes_only_rocev2_to_our_ip(veth):
    """The BPF filter on the NIC's socket keeps everything but unfragmented
    IPv4/UDP/4791 to our address in the kernel."""
    rx = subprocess.Popen(
        ["ip", "netns", "exec", veth["ns"]["b"], PY, "-c", RX_SCRIPT, veth["dev"]["b"], MAC["b"],
         IP["b"], MAC["a"], IP["a"]], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        assert rx.stdout.readline().strip() == "READY"
        subprocess.run(["ip", "netns", "exec", veth["ns"]["a"], PY, "-c", TX_SCRIPT,
                        veth["dev"]["a"], MAC["a"], MAC["b"], IP["a"], IP["b"]],
                       cwd=ROOT, check=True, capture_output=True, timeout=20)
        out, err = rx.communicate(timeout=20)
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()
    stats = json.loads(out.strip().splitlines()[-1])
    assert stats["rx_ignored"] == 0, stats      # nothing else reached Python
    assert stats["rx_packets"] == 1 and stats["rx_data_packets"] == 1
    assert stats["pfc_rx"] == 1 and stats["pfc_rows"] == [[3, 7]]   # via the ETH_P_PAUSE socket
    assert stats["tx_acks"] == 1 and stats["rx_socket_drops"] == 0
