"""The host agent's raw per-process logs: CSV files next to its
``result_path`` (buffered; flushed when the agent exits),
``t_ns`` = the agent's clock's ``now_ns()`` (wall: ``CLOCK_MONOTONIC`` in a run)::

    {host}.qp.csv     t_ns,qpn,rate_bps,alpha,event   one "init" row per QP (its
                      line rate), then a row per DCQCN rate change, event
                      cnp|rate_timer|byte_counter; rate_bps in wall bit/s
    {host}.cnp.csv    t_ns,local_qpn,remote_qpn,direction   tx (sent) | rx
    {host}.flows.csv  t_ns,flow_id,acked_bytes   per sent flow, every
                      sample_interval_ns from its post while unfinished,
                      plus a final row (at completion, failure or exit)
    {host}.pfc.csv    t_ns,priority,quanta   per enabled class of each PFC
                      frame received
    {host}.int.csv    t_ns,qpn,hop,qlen_bytes,tx_bytes,ts_ns,rate_mbps,u,window_bytes
                      per INT hop record an ACK brought back (HPCC), first
                      switch first, with the reaction point's U and window after it
    {host}.drops.csv  t_ns,priority,reason,bytes   per frame its link's faults
                      lost as it sent it (link_down, random_loss) and per
                      corrupted frame it dropped on arrival (icrc_error,
                      fcs_error; priority -1: not classified)
"""
from __future__ import annotations

import os


class RunLogs:
    """The agent's raw CSV logs (see the module docstring), block-buffered."""

    FILES = {"qp": "t_ns,qpn,rate_bps,alpha,event", "cnp": "t_ns,local_qpn,remote_qpn,direction",
             "flows": "t_ns,flow_id,acked_bytes", "pfc": "t_ns,priority,quanta",
             "int": "t_ns,qpn,hop,qlen_bytes,tx_bytes,ts_ns,rate_mbps,u,window_bytes",
             "drops": "t_ns,priority,reason,bytes"}

    def __init__(self, directory: str, host: str, buffer_bytes: int = 1 << 20):
        os.makedirs(directory or ".", exist_ok=True)
        self.paths = {k: os.path.join(directory, f"{host}.{k}.csv") for k in self.FILES}
        self._f = {}
        try:
            for k, header in self.FILES.items():
                f = open(self.paths[k], "w", buffering=buffer_bytes)
                f.write(header + "\n")
                self._f[k] = f
        except BaseException:
            self.close()
            raise
        self._qp, self._cnp = self._f["qp"].write, self._f["cnp"].write
        self._flows, self._pfc = self._f["flows"].write, self._f["pfc"].write
        self._int = self._f["int"].write
        self._drops = self._f["drops"].write

    def qp(self, t_ns, qpn, rate_bps, alpha, event):
        self._qp(f"{int(t_ns)},{qpn},{int(round(rate_bps))},{alpha:.6g},{event}\n")

    def cnp(self, t_ns, local_qpn, remote_qpn, direction):
        self._cnp(f"{int(t_ns)},{local_qpn},{remote_qpn},{direction}\n")

    def flow(self, t_ns, flow_id, acked_bytes):
        self._flows(f"{int(t_ns)},{flow_id},{acked_bytes}\n")

    def int_hops(self, t_ns, qpn, hops, u, window_bytes):
        """The INT records an ACK brought back (``int_md.Hop``s, first switch
        first) and the reaction point's U and window after it."""
        t = int(t_ns)
        for i, h in enumerate(hops):
            self._int(f"{t},{qpn},{i},{h.qlen_bytes},{h.tx_bytes},{h.ts_ns},{h.rate_mbps},"
                      f"{u:.6g},{int(window_bytes)}\n")

    def drop(self, t_ns, priority, reason, nbytes):
        self._drops(f"{int(t_ns)},{priority},{reason},{nbytes}\n")

    def pfc(self, t_ns, priority, quanta):
        self._pfc(f"{int(t_ns)},{priority},{quanta}\n")

    def flush(self):
        for f in self._f.values():
            f.flush()

    def close(self):
        for f in self._f.values():
            try:
                f.close()
            except OSError:
                pass
        self._f = {}


class DropLog:
    """The raw log ``{node}.drops.csv`` alone, for a NIC whose process keeps
    no other (a collective server's): ``drop`` is ``RunLogs.drop``."""

    def __init__(self, path: str, buffer_bytes: int = 1 << 16):
        self._f = open(path, "w", buffering=buffer_bytes)
        self._f.write(RunLogs.FILES["drops"] + "\n")

    def drop(self, t_ns, priority, reason, nbytes):
        self._f.write(f"{int(t_ns)},{priority},{reason},{nbytes}\n")

    def close(self):
        self._f.close()
