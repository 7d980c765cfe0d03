"""Checkpoint reads next to the collectives: a storage server that serves
blocks by RDMA READ, and the reader a server agent runs in its event loop.

Storage server agent (in the storage server's namespace; config
``emulator.schema.agent.StorageAgentConfig``: its NIC, the blocks, the READ
clients, dilated like the server agents')::

    python -m emulator.collectives.storage CONFIG.json

It answers READs until SIGTERM or the deadline, then writes ``{"nic": stats}``.
In virtual time (``emulator.vtime``) it is a member whose end does not
matter: it serves until the run ends (the coordinator's END, once every
collective agent is done).
Block k holds ``block_pattern(k)``, so a reader checks every byte it got.

Both ends derive QPNs, address and rkey from the experiment (no exchange
out of band): the reader of compute server i uses QPN ``READ_QPN_BASE + i``
on both sides (``emulator/experiment/servers.py``).
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path

import numpy as np

from emulator.agents.dpu import StorageClient, StorageTarget
from emulator.agents.make import make_nic
from emulator.nic.qp import WcOpcode, WcStatus
from emulator.agents.start_gate import ready_then_start
from emulator.clock import MONOTONIC, Clock
from emulator.schema.agent import StorageAgentConfig
from emulator.vtime.member import join_virtual_time, process_clock
from emulator.wire import roce_sport

from .agent_io import agent_main

READ_QPN_BASE = 0x600          # below the collectives' 0x800 + peer on a shared NIC 0
STORAGE_RKEY = 0x5107
STORAGE_BASE_ADDR = 0x1000_0000


def block_pattern(k: int, nbytes: int) -> np.ndarray:
    """Block ``k``'s bytes: byte i is (i + 97 k) mod 251, distinct per block
    and offset (251, a prime not dividing any power-of-two size, so shifted
    data never matches); read-only. A slice of one sequence of period 251
    built once per size: a reader checks each block in the server's event
    loop, where computing 256 KiB took ~1 ms beside its NICs."""
    k = 97 * k % PATTERN_PERIOD
    return _periodic_bytes(nbytes)[k:k + nbytes]


PATTERN_PERIOD = 251
_PERIODIC = np.empty(0, np.uint8)


def _periodic_bytes(nbytes: int) -> np.ndarray:
    """0, 1, ..., 250, 0, 1, ...: long enough for ``nbytes`` from any start
    (built again only when a longer one is asked for: the reader asks for its
    block size when it is made, before the traffic)."""
    global _PERIODIC
    if len(_PERIODIC) < nbytes + PATTERN_PERIOD:
        out = (np.arange(nbytes + PATTERN_PERIOD, dtype=np.int64) % PATTERN_PERIOD).astype(np.uint8)
        out.flags.writeable = False
        _PERIODIC = out
    return _PERIODIC


class StorageReader:
    """Keeps ``depth`` block READs outstanding on one QP from ``start`` until
    ``stop``; completions come from the engine's loop (``engine.attach``).
    The window is stamped with the NIC's clock, like its completions."""

    def __init__(self, nic, qpn: int, target_ip: str, block_bytes: int, blocks: int,
                 depth: int, base_addr: int = STORAGE_BASE_ADDR, rkey: int = STORAGE_RKEY):
        self.nic, self.qpn, self.depth, self.blocks = nic, qpn, depth, blocks
        self.block_bytes = block_bytes
        self.clock = nic.clock
        qp = nic.create_qp(qpn, target_ip, qpn, roce_sport(qpn))
        self.client = StorageClient(nic, qp, base_addr, rkey, block_bytes)
        self.local = nic.register_mr(block_bytes * depth)
        self.next_block = 0
        self.outstanding: dict[int, int] = {}     # slot -> block
        self.done_blocks = self.wrong_blocks = 0
        self.error: str | None = None
        self.t_start = self.t_stop = self.t_last = 0
        _periodic_bytes(block_bytes)     # the checks' pattern, built before the traffic
        self.running = False

    def start(self) -> None:
        self.running, self.t_start = True, self.clock.now_ns()
        for slot in range(self.depth):
            self._post(slot)

    def stop(self) -> None:
        """Post no more READs; those outstanding still complete (and count
        only towards ``bytes_total``)."""
        if self.running:
            self.running, self.t_stop = False, self.clock.now_ns()
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


def serve(cfg: StorageAgentConfig, clock: Clock = MONOTONIC) -> dict:
    nic = make_nic(cfg.nic, clock)
    stop = [False]              # SIGTERM, or virtual time's END
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    leave = lambda: None        # noqa: E731  (virtual time: the process leaves the run)
    try:
        target = StorageTarget(nic, cfg.block_bytes, cfg.blocks,
                               storage_latency_ns=cfg.storage_latency_ns,
                               rkey=STORAGE_RKEY, addr=STORAGE_BASE_ADDR)
        for k in range(target.blocks):
            target.block(k)[:] = block_pattern(k, target.block_bytes).tobytes()
        for c in cfg.clients:
            target.serve(nic.create_qp(c.qpn, c.remote_ip, c.remote_qpn, roce_sport(c.qpn)))
        ready_then_start("storage", cfg.ready_path, None)    # serves from now on
        leave = join_virtual_time(clock, lambda: True, stop)
        deadline_ns = clock.now_ns() + int(cfg.deadline_s * 1e9)
        while not stop[0] and clock.now_ns() < deadline_ns:
            nic.run_once(0.05)
            nic.poll_cq(1024)           # a responder has no completions; keep the CQ empty
        leave()
        nic.poll_kernel_stats()         # frames the kernel dropped at its sockets
        return {"nic": nic.stats.as_dict(), "reason": "signal" if stop[0] else "deadline"}
    finally:
        leave()
        nic.close()


def main(argv=None) -> int:
    done = agent_main("emulator.collectives.storage", StorageAgentConfig,
                      lambda cfg, path: serve(cfg, process_clock(cfg.vtime_socket, f"storage:{Path(path).stem}")),
                      argv)
    return done if isinstance(done, int) else 0


if __name__ == "__main__":
    sys.exit(main())
