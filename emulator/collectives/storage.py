"""Checkpoint reads next to the collectives: a storage server that serves
blocks by RDMA READ, and the reader a server agent runs in its event loop.

Storage server agent (in the storage server's namespace)::

    python -m emulator.collectives.storage CONFIG.json

    {"nic": {"ifname", "mac", "ip", "gateway_mac", "rate_bps", "tx_delay_ns",
             "mtu_bytes", ...NIC_KEYS},          # dilated, like the server agents
     "block_bytes": 262144, "blocks": 16, "rkey": 0x5107, "base_addr": 0x10000000,
     "storage_latency_ns": 0,                    # wall (fabric x D)
     "clients": [{"qpn": 0x600, "remote_ip": "10.0.1.1", "remote_qpn": 0x600}],
     "deadline_s": 60, "result_path": "..."}

It answers READs until SIGTERM or the deadline, then writes ``{"nic": stats}``.
Block k holds ``block_pattern(k)``, so a reader checks every byte it got.

Both ends derive QPNs, address and rkey from the experiment (no exchange
out of band): the reader of compute server i uses QPN ``READ_QPN_BASE + i``
on both sides (``emulator/experiment/servers.py``).
"""
from __future__ import annotations

import signal
import sys
import time

import numpy as np

from emulator.agents.dpu import StorageClient, StorageTarget
from emulator.agents.qp import WcOpcode, WcStatus

from .agent_io import agent_main

READ_QPN_BASE = 0x600          # below the collectives' 0x800 + peer on a shared NIC 0
STORAGE_RKEY = 0x5107
STORAGE_BASE_ADDR = 0x1000_0000
ROCE_SPORT_BASE = 0xC000
# RoceNic keyword arguments a config may carry besides the addresses and rate.
NIC_KEYS = ("dscp", "priority", "cnp_dscp", "cnp_priority", "cnp_interval_ns", "retry_cnt",
            "dcqcn")


def block_pattern(k: int, nbytes: int) -> np.ndarray:
    """Block ``k``'s bytes: distinct per block and offset (mod 251, a prime
    not dividing any power-of-two size, so shifted data never matches)."""
    return ((np.arange(nbytes, dtype=np.int64) + 97 * k) % 251).astype(np.uint8)


def make_nic(n: dict):
    from emulator.agents.nic import RoceNic
    return RoceNic(n["ifname"], n["mac"], n["ip"], n["gateway_mac"], rate_bps=int(n["rate_bps"]),
                   mtu_bytes=int(n.get("mtu_bytes", 1024)), tx_delay_ns=int(n.get("tx_delay_ns", 0)),
                   **{k: n[k] for k in NIC_KEYS if k in n})


class StorageReader:
    """Keeps ``depth`` block READs outstanding on one QP from ``start`` until
    ``stop``; completions come from the engine's loop (``engine.attach``)."""

    def __init__(self, nic, qpn: int, target_ip: str, block_bytes: int, blocks: int,
                 depth: int, base_addr: int = STORAGE_BASE_ADDR, rkey: int = STORAGE_RKEY):
        self.nic, self.qpn, self.depth, self.blocks = nic, qpn, depth, blocks
        self.block_bytes = block_bytes
        qp = nic.create_qp(qpn, target_ip, qpn, ROCE_SPORT_BASE + (qpn & 0x3FFF))
        self.client = StorageClient(nic, qp, base_addr, rkey, block_bytes)
        self.local = nic.register_mr(block_bytes * depth)
        self.next_block = 0
        self.outstanding: dict[int, int] = {}     # slot -> block
        self.done_blocks = self.wrong_blocks = 0
        self.error: str | None = None
        self.t_start = self.t_stop = self.t_last = 0
        self.running = False

    def start(self) -> None:
        self.running, self.t_start = True, time.monotonic_ns()
        for slot in range(self.depth):
            self._post(slot)

    def stop(self) -> None:
        """Post no more READs; those outstanding still complete (and count
        only towards ``bytes_total``)."""
        if self.running:
            self.running, self.t_stop = False, time.monotonic_ns()
            self.bytes_in_window = self.done_blocks * self.block_bytes

    def _post(self, slot: int) -> None:
        k = self.next_block % self.blocks
        self.next_block += 1
        self.outstanding[slot] = k
        self.client.read_block(slot, k, (self.local, slot * self.block_bytes))

    def on_completion(self, c) -> None:
        if c.opcode != WcOpcode.RDMA_READ:
            return
        if c.status != WcStatus.SUCCESS:
            self.error = f"storage READ on QP {self.qpn:#x} failed: {WcStatus(c.status).name}"
            raise RuntimeError(self.error)
        k = self.outstanding.pop(c.wr_id)
        b = self.block_bytes
        got = np.frombuffer(self.local.mv[c.wr_id * b:(c.wr_id + 1) * b], np.uint8)
        self.wrong_blocks += int(not np.array_equal(got, block_pattern(k, b)))
        self.done_blocks += 1
        self.t_last = c.complete_ns
        if self.running:
            self._post(c.wr_id)

    def report(self) -> dict:
        """Wall times; the runner converts (bytes in the window / window)."""
        return {"qpn": self.qpn, "block_bytes": self.block_bytes, "blocks_read": self.done_blocks,
                "wrong_blocks": self.wrong_blocks, "bytes_total": self.done_blocks * self.block_bytes,
                "bytes_in_window": getattr(self, "bytes_in_window", 0),
                "window_ns": (self.t_stop - self.t_start) if self.t_stop else 0,
                "error": self.error}


def serve(cfg: dict) -> dict:
    nic = make_nic(cfg["nic"])
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        target = StorageTarget(nic, int(cfg["block_bytes"]), int(cfg["blocks"]),
                               storage_latency_ns=int(cfg.get("storage_latency_ns", 0)),
                               rkey=int(cfg.get("rkey", STORAGE_RKEY)),
                               addr=int(cfg.get("base_addr", STORAGE_BASE_ADDR)))
        for k in range(target.blocks):
            target.block(k)[:] = block_pattern(k, target.block_bytes).tobytes()
        for c in cfg["clients"]:
            target.serve(nic.create_qp(int(c["qpn"]), c["remote_ip"], int(c["remote_qpn"]),
                                       ROCE_SPORT_BASE + (int(c["qpn"]) & 0x3FFF)))
        print("READY storage", flush=True)
        deadline = time.monotonic() + float(cfg.get("deadline_s", 60))
        while not stop and time.monotonic() < deadline:
            nic.run_once(0.05)
            nic.poll_cq(1024)           # a responder has no completions; keep the CQ empty
        return {"nic": nic.stats.as_dict(), "reason": "signal" if stop else "deadline"}
    finally:
        nic.close()


def main(argv=None) -> int:
    done = agent_main("emulator.collectives.storage", lambda cfg, path: serve(cfg), argv)
    return done if isinstance(done, int) else 0


if __name__ == "__main__":
    sys.exit(main())
