"""Server agent: one server (G GPUs <-> G NICs) running a collective workload.

Run inside the server's network namespace::

    python -m emulator.collectives.agent CONFIG.json

Config (rates and times already dilated, like ``agents/host.py``)::

    {"server": 0, "servers": 2, "dilation": 100,
     "nics": [{"ifname": "s0-eth0", "mac": "02:..", "ip": "10.0.1.1",
               "gateway_mac": "02:..", "rate_bps": 1000000000, "mtu_bytes": 1024,
               "tx_delay_ns": 0}, ...],             # NIC g serves GPU g
     "rank_ips": {"0": "10.0.1.1", ...},           # every global rank's NIC IP
     "nvlink": {"rate_bps": 7.2e9, "delay_ns": 1000},
     "workload": {... workload.WorkloadSpec ...},
     "start_at_unix_ns": ..., "deadline_s": 60, "result_path": "/tmp/s0.json",
     "storage": {"nic": {...} | null,              # optional: checkpoint reads during
                 "qpn": 1536, "target_ip": "..",    #   training over this NIC (null: NIC 0;
                 "block_bytes": 262144,             #   see storage.StorageReader)
                 "blocks": 16, "queue_depth": 2}}

A NIC entry may also carry ``storage.NIC_KEYS`` (DSCP, priorities, CNP and
DCQCN parameters, as the host agent's config has them) and GPUDirect RDMA
for its GPU: ``"gpudirect": false, "staging_rate_bps", "staging_latency_ns"``
(dilated; ``staging.py``; absent: GPUDirect on).

Every server derives the same connections (QPNs, receive-slot addresses and
rkeys) from the workload, so nothing is exchanged out of band. Result JSON:
``{"server", "complete", "error", "records": [bench.measure records],
"training": [bench.train records], "nics": [NicStats], "gpudirect": [per GPU
null (on) | StagingCopies.report()], "storage": null | StorageReader.report()}``; ``report`` merges
the servers' records. Exit 0 when complete, 3 on a failure, 2 on a bad config.
"""
from __future__ import annotations

import sys
import time


from . import bench
from .agent_io import agent_main
from .engine import CollectiveEngine, drive, quiescent
from .staging import staging_from_config
from .storage import StorageReader, make_nic
from .workload import parse_workload, validate_for


def run(cfg: dict, path: str = "config") -> dict:
    spec = parse_workload(cfg["workload"], path)
    S, G = int(cfg["servers"]), len(cfg["nics"])
    validate_for(spec, path, S, G)
    D = float(cfg.get("dilation", 1))
    staging = [staging_from_config(n) for n in cfg["nics"]]     # before opening sockets
    nics = [make_nic(n) for n in cfg["nics"]]
    out = {"server": cfg["server"], "complete": False, "error": None, "records": [],
           "training": [], "storage": None}
    st = cfg.get("storage")
    reader = None
    try:
        eng = CollectiveEngine(server=int(cfg["server"]), servers=S, nics=nics,
                               rank_ips={int(k): v for k, v in cfg["rank_ips"].items()},
                               nvlink_rate_bps=float(cfg["nvlink"]["rate_bps"]),
                               nvlink_delay_ns=float(cfg["nvlink"]["delay_ns"]),
                               slice_bytes=spec.slice_bytes, slots=spec.slots,
                               staging=staging)
        eng.connect(bench.connections_for(S, G, spec.pairs()))
        if st is not None:
            snic = make_nic(st["nic"]) if st.get("nic") else nics[0]
            if snic is not nics[0]:
                nics.append(snic)           # closed and reported with the others
            reader = StorageReader(snic, int(st["qpn"]), st["target_ip"], int(st["block_bytes"]),
                                   int(st["blocks"]), int(st.get("queue_depth", 2)))
            eng.attach(snic, reader.qpn, reader)
        print(f"READY server{cfg['server']}", flush=True)
        wait = (int(cfg.get("start_at_unix_ns") or 0) - time.time_ns()) / 1e9
        if wait > 0:
            time.sleep(wait)
        deadline = time.monotonic() + float(cfg.get("deadline_s", 60))
        left = lambda: max(0.1, deadline - time.monotonic())   # noqa: E731
        for t in spec.tests:
            alg = t.algorithm or spec.algorithm
            for size in t.size_list():
                out["records"] += bench.measure([eng], t.collective, alg, size, t.iters,
                                                t.warmup_iters, spec.check, left())
        if spec.training is not None:
            tr = spec.training
            if reader is not None:
                reader.start()              # reads run for as long as the training loop
            out["training"] = bench.train([eng], tr.collective, tr.algorithm or spec.algorithm,
                                          tr.size_bytes, tr.steps, tr.warmup_steps,
                                          int(tr.compute_us * 1000 * D), spec.check, left())
            if reader is not None:
                reader.stop()
        wrong = [r["wrong"] for r in out["records"] + out["training"] if r["wrong"]]
        out["complete"] = not wrong and not (reader is not None and reader.wrong_blocks)
        # the last credits and ACKs are still in flight: let them land, then keep
        # answering a little (a peer's last WRITE may need our ACK again)
        drive([eng], [], left(), until=lambda: quiescent([eng]))
        end = time.monotonic() + 0.2
        while time.monotonic() < end:
            for nic in nics:
                nic.run_once(0.01)
    except (TimeoutError, RuntimeError) as e:
        out["error"] = str(e)
    finally:
        if reader is not None:
            out["storage"] = reader.report()
        out["nics"] = [nic.stats.as_dict() for nic in nics]
        out["gpudirect"] = [None if cp is None else cp.report() for cp in staging]
        for nic in nics:
            nic.close()
    return out


def main(argv=None) -> int:
    done = agent_main("emulator.collectives.agent", run, argv)
    if isinstance(done, int):
        return done
    cfg, res = done
    if res["error"]:
        print(f"error: server{cfg['server']}: {res['error']}", file=sys.stderr)
    return 0 if res["complete"] else 3


if __name__ == "__main__":
    sys.exit(main())
