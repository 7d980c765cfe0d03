"""Host agent: one RoCEv2 NIC in a Mininet host, driven by a JSON file.

Run inside the host's network namespace::

    python -m emulator.agents.host CONFIG.json

Config: ``emulator.schema.agent.HostAgentConfig``, written by the runner
and read back here with the same model; its rates and times are wall
(fabric x D). What a config generator must follow (payload pattern, WRITE
layout, SEND order): ``payload.py``; the raw logs: ``run_logs.py``; the
result and progress files: docs/lossless.md, "Raw logs → results".

Exit: when every send completed and every expected message arrived, the
agent keeps answering (re-ACKing retransmissions whose ACK was lost) until
no frame has arrived for ``linger_s`` (default max(0.5 s, 3 RTOs)), then
writes the result and exits 0 if everything succeeded ("complete"), else
3 (a send failed: see its "status"; or data arrived corrupted). At the
deadline it writes what it has and exits 3. SIGTERM/SIGINT: write what it
has, exit 0 if complete, else 3 (the runner stops the agents this way as
soon as all of them are done: then no retransmission can still come). A
bad config: one line on stderr, exit 2.

Startup: importing scapy and building payloads takes ~0.3 s on an idle
machine (more under load); set ``start_at_unix_ns`` comfortably later than
the launch. When ready the agent prints ``READY <host>`` on stdout (its only
stdout line) and, if start_at has already passed, a warning on stderr.
One progress line per second at most goes to stderr.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time

from ..atomic import atomic_write_text
from ..errors import FabricEmuError
from ..schema.agent import HostAgentConfig
from emulator.nic.dcqcn import DcqcnParams
from emulator.nic.hpcc import HpccParams
from .dpu import Endpoint
from .make import make_nic
from .gpudirect import GpuNic
from emulator.nic.nic import RNR_TIMER_US, QpState, RoceNic, WcOpcode, WcStatus
from emulator.lifeline import die_with_runner, stop_on_signals
from emulator.vtime.member import join_virtual_time
from .payload import pattern_bytes, pattern_matches, write_layout
from .run_logs import RunLogs
from .start_gate import ready_then_start


class HostAgent:
    def __init__(self, cfg: HostAgentConfig, nic: RoceNic | None = None,
                 logs: RunLogs | None = None, clock=None):
        """``nic``: use this NIC (tests) instead of opening one from ``cfg``
        (it should have been made with ``logs=`` the same ``logs``).
        ``logs``: default ``RunLogs`` in the directory of ``result_path``.
        ``clock``: the process's (a pack's members share one); None: the config's."""
        self.cfg = cfg
        self.host = cfg.host
        self.sample_interval_ns = cfg.sample_interval_ns or 1_000_000
        if logs is None:
            logs = RunLogs(os.path.dirname(cfg.result_path), self.host)
        self.logs = logs
        try:
            self.nic = nic or make_nic(cfg, clock, logs=logs)
        except BaseException:
            logs.close()
            raise
        nic = self.nic
        # the NIC's clock is the agent's: what it posts and stamps is on the
        # time its NIC serializes on (a test's manual clock included)
        self.clock = nic.clock
        self.qps = {}
        for q in cfg.qps:
            self.qps[q.qpn] = nic.create_qp(q.qpn, q.remote_ip, q.remote_qpn, q.udp_sport,
                                            sq_psn=q.sq_psn, rq_psn=q.rq_psn, rate_bps=q.rate_bps)
        # DPU / plain-NIC endpoint (per-packet CPU work, tenant): only if asked
        self.endpoint = None
        if cfg.is_endpoint():
            self.endpoint = Endpoint(nic, dpu=bool(cfg.dpu), tenant=cfg.tenant,
                                     host_cpu=cfg.host_cpu, dpu_cpu=cfg.dpu_cpu)
            for qpn in cfg.storage_qpns or []:
                self.endpoint.mark_storage(self.qps[qpn])
        # GPUDirect off: the agent's buffers are GPU memory staged via the host
        self.gpu = None
        if cfg.gpudirect is not None:
            self.gpu = GpuNic(nic, cfg.gpudirect, cfg.staging_rate_bps, cfg.staging_latency_ns)
        # receive side
        self.expect = cfg.expect
        mr_addr = cfg.mr_addr
        self.layout = write_layout([e.model_dump() for e in self.expect], mr_addr)
        mr_end = max([mr_addr] + [self.layout[e.flow_id] + e.size_bytes
                                  for e in self.expect if e.op == "write"])
        self.rx_mr = nic.register_mr(mr_end - mr_addr, addr=mr_addr, rkey=cfg.mr_rkey)
        self._gpu_mem(self.rx_mr)
        self.exp_state = []
        self.addr_to_exp = {}
        for i, e in enumerate(self.expect):
            st = {"flow_id": e.flow_id, "qpn": e.qpn, "op": e.op,
                  "bytes": e.size_bytes, "delivered_bytes": 0, "intact": False,
                  "complete": False, "first_rx_unix_ns": None, "complete_unix_ns": None}
            self.exp_state.append(st)
            if e.op == "write":
                self.addr_to_exp[self.layout[e.flow_id]] = i
            elif self.gpu is not None:
                self.gpu.post_recv(self.qps[e.qpn], i, e.size_bytes, gpu=True)
            else:
                nic.post_recv(self.qps[e.qpn], i, e.size_bytes)
        # send side: one MR per flow, holding its pattern
        self.sends = sorted(enumerate(cfg.send), key=lambda ie: (ie[1].start_offset_ns, ie[0]))
        self.send_state = [None] * len(cfg.send)
        self.send_mr = {}
        for i, s in enumerate(cfg.send):
            self.send_mr[i] = nic.register_mr(s.size_bytes,
                                              buf=pattern_bytes(s.flow_id, 0, s.size_bytes))
            self._gpu_mem(self.send_mr[i])
            self.send_state[i] = {"flow_id": s.flow_id, "qpn": s.qpn, "op": s.op,
                                  "bytes": s.size_bytes, "complete": False, "status": None,
                                  "fct_ns": None, "failed_after_ns": None,
                                  "post_unix_ns": None, "complete_unix_ns": None,
                                  "scheduled_unix_ns": None, "acked_bytes": 0}
        self.active_sends: dict[int, tuple] = {}   # send index -> (qp, wqe) while unfinished
        self.n_sent_done = 0
        self.n_exp_done = 0
        self.stop_reason = None
        self._result: dict | None = None     # taken by conclude(), written by release()
        self.start_at_unix_ns = None
        self.ready_unix_ns = None

    def _gpu_mem(self, mr) -> None:
        if self.gpu is not None:
            self.gpu._gpu_rkeys.add(mr.rkey)

    # -- progress --------------------------------------------------------------
    def all_done(self) -> bool:
        """Nothing left to wait for (sends may have failed)."""
        return self.n_sent_done == len(self.send_state) and self.n_exp_done == len(self.exp_state)

    def all_complete(self) -> bool:
        """Every send acknowledged and every expected message arrived intact."""
        return (all(s["complete"] for s in self.send_state)
                and all(e["complete"] and e["intact"] for e in self.exp_state))

    def _acked_bytes(self, i: int) -> int:
        """Bytes of send ``i`` acknowledged so far (while it is unfinished)."""
        qp, w = self.active_sends[i]
        if qp.state != QpState.RTS:              # failed: its PSN state was reset
            return self.send_state[i]["acked_bytes"]
        if w is None:                            # still staging (GPUDirect off)
            w = next((x for x in qp.sq if x.wr_id == i), None)
            if w is None:
                return self.send_state[i]["acked_bytes"]
            self.active_sends[i] = (qp, w)
        n = min(max(0, qp.snd_una - w.first_psn), w.npkts)
        return min(w.length, n * self.nic.mtu_bytes)

    def _sample_flows(self, now: int) -> None:
        log = self.logs.flow
        for i in self.active_sends:
            st = self.send_state[i]
            st["acked_bytes"] = n = self._acked_bytes(i)
            log(now, st["flow_id"], n)

    def _handle(self, c) -> None:
        if c.opcode in (WcOpcode.RDMA_WRITE, WcOpcode.SEND):
            i = c.wr_id
            st = self.send_state[i]
            st["status"] = c.status.name
            st["complete_unix_ns"] = c.complete_unix_ns
            if c.status == WcStatus.SUCCESS:
                st["complete"] = True
                st["acked_bytes"] = st["bytes"]
                st["fct_ns"] = c.complete_ns - c.post_ns
            else:                                # its QP failed: when, from the post
                st["failed_after_ns"] = c.complete_ns - c.post_ns
            # (a failed QP's PSN state is reset: keep the last sampled acked_bytes)
            if self.active_sends.pop(i, None) is not None:
                self.logs.flow(c.complete_ns, st["flow_id"], st["acked_bytes"])
            self.n_sent_done += 1
        elif c.opcode == WcOpcode.RECV_RDMA_WRITE:
            i = self.addr_to_exp.get(c.remote_addr)
            if i is None or c.rkey != self.rx_mr.rkey:
                return
            st = self.exp_state[i]
            if st["complete"]:
                return
            off = c.remote_addr - self.rx_mr.addr
            got = self.rx_mr.mv[off:off + c.byte_len]
            self._finish_expect(st, got, c)
        elif c.opcode == WcOpcode.RECV:
            st = self.exp_state[c.wr_id]
            self._finish_expect(st, c.data, c)

    def _finish_expect(self, st, got, c) -> None:
        st["delivered_bytes"] = len(got)
        st["complete"] = len(got) == st["bytes"]
        st["intact"] = st["complete"] and pattern_matches(st["flow_id"], 0, got)
        st["first_rx_unix_ns"] = c.first_rx_unix_ns
        st["complete_unix_ns"] = c.complete_unix_ns
        self.n_exp_done += 1

    def _partial_progress(self) -> None:
        """Fill in bytes acked / delivered so far for unfinished flows."""
        for i, st in enumerate(self.send_state):
            if not st["complete"] and st["post_unix_ns"] is not None:
                prog = self.qps[st["qpn"]].send_progress()
                st["acked_bytes"] = prog.get(i, st["acked_bytes"])
        for i, st in enumerate(self.exp_state):
            if st["complete"]:
                continue
            p = self.qps[st["qpn"]].rx_progress()
            e = self.expect[i]
            if p is None:
                continue
            if p[0] == "write" and e.op == "write" and p[1] == self.layout[e.flow_id]:
                n = p[2]
                off = p[1] - self.rx_mr.addr
                got = self.rx_mr.mv[off:off + n]
            elif p[0] == "send" and e.op == "send" and p[1] == i:
                n = p[2]
                got = None
            else:
                continue
            st["delivered_bytes"] = n
            st["intact"] = got is not None and pattern_matches(st["flow_id"], 0, got)

    def result(self) -> dict:
        self._partial_progress()
        for st in self.send_state:       # what each flow's QP sent and went through
            qp = self.qps[st["qpn"]]
            st["tx_packets"] = qp.tx_data_packets
            st["retransmitted_packets"] = qp.retransmits
            st["timeouts"] = qp.timeouts
            st["naks"] = qp.naks
        nic = self.nic
        d = nic.dilation

        def fabric_ns(wall_ns):
            return None if wall_ns is None else round(wall_ns / d)
        nic.poll_kernel_stats()
        nic.update_pause_stats()
        params = nic.cc_params              # the reaction point's: DCQCN's, HPCC's or IB CC's
        if isinstance(params, DcqcnParams):
            cc = {"dcqcn": params.as_dict()}
            cc_fabric = {"dcqcn_alpha_timer_ns": fabric_ns(params.alpha_timer_ns),
                         "dcqcn_rate_timer_ns": fabric_ns(params.rate_timer_ns)}
        elif isinstance(params, HpccParams):
            cc = {"hpcc": params.as_dict()}
            cc_fabric = {"hpcc_base_rtt_ns": params.base_rtt_ns}     # already fabric
        else:
            cc = {"ib_cc": params.as_dict()}
            cc_fabric = {"ib_cc_ccti_timer_ns": fabric_ns(params.ccti_timer_ns)}
        return {
            "host": self.host, "complete": self.all_complete(), "reason": self.stop_reason,
            "start_at_unix_ns": self.start_at_unix_ns, "ready_unix_ns": self.ready_unix_ns,
            "end_unix_ns": self.clock.unix_ns(),
            "cpu_s": round(time.process_time(), 3),
            "send": self.send_state, "expect": self.exp_state, "nic": nic.stats.as_dict(),
            "endpoint": self.endpoint.report() if self.endpoint is not None else None,
            "gpudirect": None if self.gpu is None else {
                "enabled": self.gpu.gpudirect, "staging_rate_bps": self.gpu.staging_rate_bps,
                "staging_latency_ns": self.gpu.staging_latency_ns,
                "staged_bytes": self.gpu.staged_bytes},
            "config": {"rate_bps": nic.rate_bps, "mtu_bytes": nic.mtu_bytes,
                       "tx_delay_ns": nic.tx_delay_ns, "rto_ns": nic.rto_ns,
                       "ack_every_n": nic.ack_every_n, "dscp": nic.dscp,
                       "priority": nic.priority, "cnp_dscp": nic.cnp_dscp,
                       "cnp_priority": nic.cnp_priority, "cnp_interval_ns": nic.cnp_interval_ns,
                       "honor_pfc": nic.honor_pfc, "sample_interval_ns": self.sample_interval_ns,
                       **cc, "dilation": d,
                       "fabric": {"rto_ns": fabric_ns(nic.rto_ns),
                                  "cnp_interval_ns": fabric_ns(nic.cnp_interval_ns),
                                  "min_rnr_timer_ns": RNR_TIMER_US[nic.responder.min_rnr_timer]
                                  * 1000, **cc_fabric},
                       "mr_rkey": self.rx_mr.rkey, "mr_addr": self.rx_mr.addr,
                       "write_layout": {str(k): v for k, v in self.layout.items()}},
        }

    def finish(self) -> None:
        """The run is over: write the result, close the NIC and the logs, say how it ended."""
        self.conclude()
        self.release()

    def conclude(self) -> None:
        """The first half of ``finish``, what must happen when the run ends:
        the result as it is now, the logs closed. (An agent pack concludes a
        member when it ends and ``release``s it with the others when all
        have: writing the result and closing the NIC's sockets took ~24 ms,
        which stalled the members still sending.)"""
        try:
            self._result = self.result()
        finally:
            self.finish_logs()

    def release(self) -> None:
        """The second half of ``finish``: write the result ``conclude`` took,
        close the NIC, say how the run ended."""
        try:
            self.write_result(self._result)
        finally:
            self.nic.close()
        print(f"[{self.host}] {self.stop_reason}: complete={self.all_complete()} "
              f"{self.nic.stats!r}", file=sys.stderr, flush=True)

    def finish_logs(self) -> None:
        """Final flows.csv rows for unfinished sends; flush and close the logs."""
        now = self.clock.now_ns()
        for i in list(self.active_sends):
            self.logs.flow(now, self.send_state[i]["flow_id"], self._acked_bytes(i))
        self.active_sends.clear()
        self.nic.log_fcs_drops()
        self.logs.close()

    def write_progress(self) -> None:
        """``progress_path``: payload delivered here so far, and whether done."""
        path = self.cfg.progress_path
        if path is None:
            return
        tmp = f"{path}.tmp{os.getpid()}"
        try:
            with open(tmp, "w") as f:
                json.dump({"host": self.host,
                           "delivered_bytes": self.nic.stats.rx_data_payload_bytes,
                           "done": self.all_done()}, f)
            os.replace(tmp, path)
        except OSError:                  # progress only: never the run's end
            with contextlib.suppress(OSError):
                os.unlink(tmp)           # a full disk: no half-written file left behind

    def write_result(self, result: dict | None = None) -> None:
        """``result`` (by default the result now) into ``result_path``, whole or not at all."""
        path = self.cfg.result_path
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        atomic_write_text(path, json.dumps(self.result() if result is None else result, indent=1))

    # -- main loop -------------------------------------------------------------
    def run(self, stop_flag: list | None = None) -> bool:
        """The agent's whole run in this process: the start gate, then the
        loop until done, the deadline or ``stop_flag[0]``."""
        stop_flag = stop_flag if stop_flag is not None else [False]
        clock = self.clock
        self.ready_unix_ns = clock.unix_ns()
        self.begin(ready_then_start(self.host, self.cfg.ready_path, self.cfg.start_at_unix_ns))
        io = self.io
        leave = join_virtual_time(clock, self.all_done, stop_flag)
        try:
            while (wake := self.step(stop_flag[0])) is not None:
                io.run_once(max(0.0, (wake - clock.now_ns()) / 1e9))
        finally:
            leave()
        return self.all_complete()

    @property
    def io(self):
        """What posts, completes and runs the loop: the NIC, or the GPU staging in front of it."""
        return self.gpu if self.gpu is not None else self.nic

    def begin(self, start_at_unix_ns: int | None) -> None:
        """Start the run's clock at ``start_at_unix_ns`` (None: now)."""
        cfg, nic = self.cfg, self.nic
        clock = self.clock
        now_unix = clock.unix_ns()
        self.start_at_unix_ns = start_at_unix_ns or now_unix
        if self.start_at_unix_ns < now_unix:
            print(f"[{self.host}] warning: ready {(now_unix - self.start_at_unix_ns) / 1e6:.1f} ms "
                  f"after start_at_unix_ns: its peers may have sent into the void",
                  file=sys.stderr, flush=True)
        self._t0 = t0 = clock.now_ns() + (self.start_at_unix_ns - now_unix)
        if self.endpoint is not None:
            self.endpoint.reset(t0)
        self._deadline = t0 + int(cfg.deadline_s * 1e9)
        linger_s = cfg.linger_s
        self._linger_ns = int((linger_s if linger_s is not None
                               else max(0.5, 3 * nic.rto_ns / 1e9)) * 1e9)
        self._pending = [(t0 + s.start_offset_ns, i, s) for i, s in self.sends]
        self._pi = 0
        self._next_sample = t0 + self.sample_interval_ns
        self._next_progress = clock.now_ns() + 1_000_000_000
        self._done_at = None

    def step(self, stop: bool = False) -> int | None:
        """One turn of the loop, without waiting: post the sends that are
        due, take completions, end the run when it is over (``stop``: the
        runner said so). Returns the monotonic ns by which to turn again
        (the NIC's own wake-ups aside: its ``run_once`` waits for those),
        None once ended (``stop_reason`` says why)."""
        io, nic, clock = self.io, self.nic, self.clock
        now = clock.now_ns()
        pending = self._pending
        while self._pi < len(pending) and pending[self._pi][0] <= now:
            _, i, s = pending[self._pi]
            self._pi += 1
            qp = self.qps[s.qpn]
            mr = self.send_mr[i]
            if s.op == "write":
                io.post_write(qp, i, (mr, 0, mr.size_bytes), s.remote_addr or 0, s.rkey)
            else:
                io.post_send(qp, i, (mr, 0, mr.size_bytes))
            self.active_sends[i] = (qp, qp.sq[-1] if qp.sq and qp.sq[-1].wr_id == i
                                    else None)
            self.logs.flow(clock.now_ns(), s.flow_id, 0)
            st = self.send_state[i]
            st["post_unix_ns"] = clock.unix_ns()
            st["scheduled_unix_ns"] = self.start_at_unix_ns + s.start_offset_ns
        for c in io.poll_cq(256):
            self._handle(c)
        if stop:
            self.stop_reason = "done" if self.all_done() else "signal"
            return None
        if self.all_done():
            if self._done_at is None:
                self._done_at = now
                self.write_progress()
            if now - max(self._done_at, nic.last_rx_ns) >= self._linger_ns and io.idle():
                self.stop_reason = "done"
                return None
        if now >= self._deadline:
            self.stop_reason = "deadline"
            return None
        if now >= self._next_progress:
            self._next_progress = now + 1_000_000_000
            self._progress(now, self._t0)
            self.write_progress()
        sample_ns = self.sample_interval_ns
        if now >= self._next_sample:
            if self.active_sends:
                self._sample_flows(now)
            self._next_sample += sample_ns
            if self._next_sample <= now:                  # woke late: skip, don't burst
                self._next_sample = now + sample_ns - (now - self._next_sample) % sample_ns
        wake = now + 50_000_000
        if self._pi < len(pending):
            wake = min(wake, max(now, pending[self._pi][0]))
        if self.active_sends:
            wake = min(wake, max(now, self._next_sample))
        if self._done_at is not None:
            # the linger's end (a frame meanwhile moves it on); once past, with
            # the NIC still busy, its own wake-ups bring the next look
            linger_end = max(self._done_at, nic.last_rx_ns) + self._linger_ns
            if linger_end > now:
                wake = min(wake, linger_end)
        return wake

    def _progress(self, now, t0) -> None:
        s = self.nic.stats
        print(f"[{self.host}] t={(now - t0) / 1e9:.1f}s sent {self.n_sent_done}/{len(self.send_state)}"
              f" expect {self.n_exp_done}/{len(self.exp_state)} tx={s.tx_packets} rx={s.rx_packets}"
              f" delivered={s.rx_data_payload_bytes}B retx={s.tx_retransmits}"
              f" naks={s.rx_naks + s.rx_rnr_naks} timeouts={s.timeouts}",
              file=sys.stderr, flush=True)


def load_agent(path: str, clock=None) -> HostAgent:
    """The agent of config ``path``, its NIC open (on ``clock``; None: the
    config's); ``AgentConfigError`` (one line naming the file) if it cannot be."""
    try:
        return HostAgent(HostAgentConfig.load(path), clock=clock)
    except FabricEmuError as e:
        raise AgentConfigError(str(e)) from None
    except (ValueError, TypeError, KeyError) as e:   # a value the NIC cannot use
        raise AgentConfigError(f"{path}: {e}") from None
    except OSError as e:
        raise AgentConfigError(f"{path}: cannot open the NIC: {e}") from None


class AgentConfigError(Exception):
    """An agent that cannot start: its message is the line to print."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m emulator.agents.host CONFIG.json", file=sys.stderr)
        return 2
    die_with_runner()
    stop = stop_on_signals()
    try:
        agent = load_agent(argv[0])
    except AgentConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        ok = agent.run(stop)
    finally:
        agent.finish()
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
