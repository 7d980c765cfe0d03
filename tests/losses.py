"""Where a run lost frames and what its senders resent, for "no drops =>
no retransmissions" checks of integration runs: a run without a single
drop has nothing to recover, so any retransmission or ACK timeout in it
means queueing or a pause was taken for loss."""
from __future__ import annotations

import json
from pathlib import Path

NIC_DROPS = ("rx_socket_drops", "tenant_drops", "cpu_rx_drops", "rx_icrc_errors")


def drops(summary: dict, out_dir: Path) -> dict[str, int]:
    """Frames lost anywhere: switch queues, switch pipelines, switch port
    sockets (the kernel's, unread), and the NICs (kernel socket overflow,
    tenant filter, CPU queue, bad ICRC) as the host agents' results under
    ``out_dir/run`` count them."""
    out = {"switch_queue": sum(p["drops"] for p in summary["ports"]),
           "switch_pipeline": sum(p["pipeline_drops"] for p in summary["ports"]),
           "switch_socket": sum(p.get("rx_socket_drops") or 0 for p in summary["ports"])}
    for k in NIC_DROPS:
        out[k] = 0
    for path in sorted((Path(out_dir) / "run").glob("*.result.json")):
        nic = json.loads(path.read_text()).get("nic") or {}
        for k in NIC_DROPS:
            out[k] += int(nic.get(k, 0))
    return out


def recovery(summary: dict) -> dict[str, int]:
    """What the flows' senders went through, summed over the flows."""
    return {k: sum(f[k] for f in summary["flows"])
            for k in ("retransmitted_packets", "timeouts", "naks")}


def assert_no_drops_no_retransmissions(summary: dict, out_dir: Path) -> None:
    lost = drops(summary, out_dir)
    assert not any(lost.values()), lost
    assert recovery(summary) == {"retransmitted_packets": 0, "timeouts": 0, "naks": 0}, \
        [(f["flow_id"], f["src"], f["dst"], f["retransmitted_packets"], f["timeouts"], f["naks"])
         for f in summary["flows"] if f["retransmitted_packets"] or f["timeouts"] or f["naks"]]
