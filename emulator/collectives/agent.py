"""Server agent: one server (G GPUs <-> G NICs) running a collective workload.

Run inside the server's network namespace::

    python -m emulator.collectives.agent CONFIG.json

Config: ``emulator.schema.agent.CollectiveAgentConfig`` (rates and times
already dilated, like the host agent's): its NICs (NIC g serves GPU g, with
GPUDirect RDMA on or off, ``staging.py``), every rank's NIC IP, the NVLink
domain, the workload (``emulator.schema.workload``) and optional checkpoint
reads during training (``storage.StorageReader``).

Every server derives the same connections (QPNs, receive-slot addresses and
rkeys) from the workload, so nothing is exchanged out of band. Result JSON:
``{"server", "complete", "error", "failure" (a QP failed: rank, peer, qpn,
opcode, WC status, fabric ns from the start; else absent), "records": [bench.measure records],
"training": [bench.train records], "nics": [NicStats], "gpudirect": [per GPU
null (on) | StagingCopies.report()], "storage": null | StorageReader.report()}``; ``report`` merges
the servers' records. Exit 0 when complete, 3 on a failure, 2 on a bad config.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from emulator.agents.make import make_nic
from emulator.agents.run_logs import DropLog
from emulator.agents.start_gate import ready_then_start
from emulator.clock import MONOTONIC, Clock
from emulator.rundir import RawDir
from emulator.schema.agent import CollectiveAgentConfig
from emulator.vtime.member import join_virtual_time, process_clock

from . import algorithms, bench, step, training
from .agent_io import agent_main
from .data import periodic_inputs
from .engine import CollectiveEngine, drive, quiescent
from .dtypes import elem_bytes
from .staging import staging_from_config
from .storage import StorageReader
from .transport import TransportError
from .workload import params_of, runs, training_params, validate_for


def run(cfg: CollectiveAgentConfig, path: str = "config", clock: Clock = MONOTONIC) -> dict:
    """The server's workload; ``clock`` is its NICs', engine's and reader's
    (in virtual time the process's ``VirtualClock``: then the process is
    done, for the coordinator, once its work is; it answers its peers until
    the run ends, and leaves before its result is written)."""
    spec = cfg.workload
    validate_for(spec, path, cfg.servers, len(cfg.nics))
    staging = [staging_from_config(n.model_dump()) for n in cfg.nics]   # before opening sockets
    nics = [make_nic(n, clock) for n in cfg.nics]
    drop_logs = _drop_logs(cfg, nics)
    out = {"server": cfg.server, "complete": False, "error": None, "records": [],
           "training": [], "storage": None}
    reader = None
    stop = [False]              # virtual time: the run has ended (the coordinator's END)
    finished = [False]          # virtual time: this process's work is done
    leave = lambda: None        # noqa: E731  (virtual time: the process leaves the run)
    start = [0]                 # the clock at the common start
    try:
        eng = CollectiveEngine(server=cfg.server, servers=cfg.servers, nics=nics,
                               rank_ips={int(k): v for k, v in cfg.rank_ips.items()},
                               nvlink_rate_bps=cfg.nvlink.rate_bps,
                               nvlink_delay_ns=cfg.nvlink.delay_ns,
                               slice_bytes=spec.slice_bytes, slots=spec.slots,
                               staging=staging, clock=clock)
        eng.stop_flag = stop
        if hasattr(clock, "leave"):
            # virtual time: a piece of background work (a result's check) costs
            # no fabric time, so any wait may take one -- behind DCQCN's timers
            # (every few tens of us while a rate recovers) the checks of a
            # training step waited for gaps of 100 us, 30 ms of fabric time
            eng.background_min_idle_ns = 0
        shaped = _step(spec, cfg)
        eng.connect(bench.connections_for(cfg.servers, len(cfg.nics), runs(spec))
                    | _step_connections(spec, cfg.servers, len(cfg.nics), shaped))
        reader = _storage_reader(cfg, eng, nics, clock)
        _prepare(spec, eng, shaped)
        # the common start: a Unix time, the one clock all servers' processes share
        start_at = ready_then_start(f"server{cfg.server}", cfg.ready_path, cfg.start_at_unix_ns)
        leave = join_virtual_time(clock, lambda: finished[0], stop)
        start[0] = _wait_for_start(clock, start_at)
        deadline_ns = start[0] + int(cfg.deadline_s * 1e9)
        left = lambda: max(0.1, (deadline_ns - clock.now_ns()) / 1e9)   # noqa: E731
        _run_tests(spec, eng, out, left)
        _run_training(spec, eng, out, left, reader, cfg.dilation, shaped)
        # the last credits and ACKs are still in flight: let them land (the
        # results' checks run meanwhile), then keep answering a little (a
        # peer's last WRITE may need our ACK again)
        drive([eng], [], left(), until=lambda: quiescent([eng]) and not eng.background)
        bench.finish_checks([eng])
        wrong = [r["wrong"] for r in out["records"] + out["training"] if r["wrong"]]
        out["complete"] = not wrong and not (reader is not None and reader.wrong_blocks)
        finished[0] = True
        _answer_peers(clock, eng, nics, left, stop, deadline_ns)
    except TransportError as e:
        out["error"] = str(e)
        out["failure"] = {"rank": e.rank, "peer": e.peer, "qpn": e.qpn, "opcode": e.opcode,
                          "status": e.status, "at_ns": round((e.at_ns - start[0]) / cfg.dilation)}
    except (TimeoutError, RuntimeError) as e:
        out["error"] = str(e)
    finally:
        leave()                     # virtual time: nobody waits for this process any more
        _report(out, reader, nics, staging)
        for log in drop_logs:
            log.close()
    return out


def _drop_logs(cfg: CollectiveAgentConfig, nics: list) -> list[DropLog]:
    """Each NIC's raw log of the frames its link's faults took and the
    corrupted ones it dropped (drops.csv's rows), next to the result."""
    logs = []
    run_dir = os.path.dirname(cfg.result_path)
    for nic, node in zip(nics, cfg.nic_nodes):
        log = DropLog(str(RawDir(run_dir).log(node, "drops")))
        nic.drop_log = log.drop
        logs.append(log)
    return logs


def _storage_reader(cfg: CollectiveAgentConfig, eng: CollectiveEngine, nics: list,
                    clock: Clock) -> StorageReader | None:
    """The checkpoint reader, if the config has one, attached to the engine (on a NIC
    of its own, appended to ``nics`` to be closed and reported, or on NIC 0)."""
    st = cfg.storage
    if st is None:
        return None
    snic = make_nic(st.nic, clock) if st.nic is not None else nics[0]
    if snic is not nics[0]:
        nics.append(snic)           # closed and reported with the others
    reader = StorageReader(snic, st.qpn, st.target_ip, st.block_bytes, st.blocks,
                           st.queue_depth)
    eng.attach(snic, reader.qpn, reader)
    return reader


def _step(spec, cfg: CollectiveAgentConfig) -> step.Step | None:
    """A parallelism-shaped training step's schedules (every rank's), if the workload has one."""
    tr = spec.training
    if tr is None or not tr.parallel:
        return None
    G = len(cfg.nics)
    shape = step.shape_of(tr, cfg.servers * G, spec.dtype, spec.op, cfg.dilation)
    return step.build(shape, cfg.servers, G, spec.slice_bytes)


def _step_connections(spec, servers: int, G: int, shaped: step.Step | None) -> set:
    """The step's connections and its barrier's (none without a step)."""
    if shaped is None:
        return set()
    return (algorithms.channel_connections(shaped.schedules)
            | bench.connections_for(servers, G, [("all_reduce", spec.algorithm)]))


def _prepare(spec, eng: CollectiveEngine, shaped: step.Step | None = None) -> None:
    """Build every input and schedule before the start, not inside the event loop."""
    if shaped is not None:          # its schedules are built: the inputs of its group sizes
        sh = shaped.shape
        for m in {sh.tp, sh.dp, sh.ep, 2}:
            periodic_inputs(max(sh.tp_bytes, sh.pp_bytes, sh.dp_bytes, sh.ep_bytes)
                            // elem_bytes(sh.dtype), sh.dtype, m)
    # every input (and expected output) is a slice of one array: built for the
    # largest before the start, not inside the event loop when a row grows
    n = eng.servers * eng.G
    for _, _, p in runs(spec):
        periodic_inputs(max([s for t in spec.tests for s in t.size_list()]
                            + [(spec.training.size_bytes or 0) if spec.training else 0])
                        // elem_bytes(p.dtype), p.dtype, n)
    # and every schedule: built between two phases, one stalled the NICs for 0.5-1 ms
    rows = [(t.collective, t.algorithm or spec.algorithm, size, in_place, params_of(t, spec))
            for t in spec.tests for size in t.size_list() for in_place in (False, True)]
    if spec.training is not None and not spec.training.parallel:
        rows.append((spec.training.collective, spec.training.algorithm or spec.algorithm,
                     spec.training.size_bytes, False, training_params(spec)))
    bench.prepare([eng], rows)


def _wait_for_start(clock: Clock, start_at: int | None) -> int:
    """Sleep until the common start (Unix ns; None: now); returns ``clock``'s time then."""
    # virtual time: into the first window before the first frame goes out
    # (a frame sent before it would be in no window's count: its receiver
    # would take it at a time of its own choosing); MONOTONIC: no wait
    clock.sleep_until_ns(clock.now_ns())
    wait_ns = (start_at or 0) - clock.unix_ns()
    if wait_ns > 0:
        clock.sleep_until_ns(clock.now_ns() + wait_ns)
    return clock.now_ns()


def _run_tests(spec, eng: CollectiveEngine, out: dict, left) -> None:
    """nccl-tests' rows: each size out of place, then in place; records into ``out``."""
    for t in spec.tests:
        alg = t.algorithm or spec.algorithm
        for size in t.size_list():
            # nccl-tests' two halves of a row; as there, the warm-up runs once,
            # before the out-of-place half
            for in_place, warmup in ((False, t.warmup_iters), (True, 0)):
                out["records"] += bench.measure([eng], t.collective, alg, size, t.iters,
                                                warmup, spec.check, left(), in_place,
                                                background_check=True,
                                                params=params_of(t, spec))


def _run_training(spec, eng: CollectiveEngine, out: dict, left, reader, D,
                  shaped: step.Step | None) -> None:
    """The training loop, if any, with the checkpoint reads running alongside."""
    if spec.training is None:
        return
    tr = spec.training
    if reader is not None:
        reader.start()              # reads run for as long as the training loop
    if shaped is not None:
        out["training"] = training.train([eng], shaped, tr.steps, tr.warmup_steps, spec.check,
                                         left(), background_check=True,
                                         barrier_algorithm=spec.algorithm)
    else:
        out["training"] = bench.train([eng], tr.collective, tr.algorithm or spec.algorithm,
                                      tr.size_bytes, tr.steps, tr.warmup_steps,
                                      int(tr.compute_us * 1000 * D), spec.check, left(),
                                      background_check=True, params=training_params(spec))
    if reader is not None:
        reader.stop()


def _answer_peers(clock: Clock, eng: CollectiveEngine, nics: list, left, stop: list,
                  deadline_ns: int) -> None:
    """After this server's work: keep answering its peers (their last frames may need it)."""
    if hasattr(clock, "leave"):
        # virtual time: answer until every process is done (the run's end)
        drive([eng], [], left() + 1, until=lambda: stop[0] or clock.now_ns() >= deadline_ns)
    else:
        end_ns = clock.now_ns() + 200_000_000
        while clock.now_ns() < end_ns:
            for nic in nics:
                nic.run_once(0.01)


def _report(out: dict, reader, nics: list, staging: list) -> None:
    """The storage, NIC and GPUDirect reports into ``out``; the NICs closed."""
    if reader is not None:
        out["storage"] = reader.report()
    for nic in nics:
        nic.poll_kernel_stats()     # frames the kernel dropped at its sockets, before as_dict
    out["nics"] = [nic.stats.as_dict() for nic in nics]
    out["gpudirect"] = [None if cp is None else cp.report() for cp in staging]
    for nic in nics:
        nic.log_fcs_drops()
        nic.close()


def _clock(cfg: CollectiveAgentConfig, path: str) -> Clock:
    """The process's clock: virtual time's when the run has it, else ``MONOTONIC``."""
    return process_clock(cfg.vtime_socket, f"collectives:{Path(path).stem}", agent=True)


def main(argv=None) -> int:
    done = agent_main("emulator.collectives.agent", CollectiveAgentConfig,
                      lambda cfg, path: run(cfg, path, _clock(cfg, path)), argv)
    if isinstance(done, int):
        return done
    cfg, res = done
    if res["error"]:
        print(f"error: server{cfg.server}: {res['error']}", file=sys.stderr)
    return 0 if res["complete"] else 3


if __name__ == "__main__":
    sys.exit(main())
