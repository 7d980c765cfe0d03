"""The RDMA QPs the server agents of a ``workload:`` (and ``storage:``) open,
as the runner sees them before the run: what HPCC's T and the INT records
a source reserves (``ideal_fct.base_rtt_ns``, ``ideal_fct.int_max_hops``)
range over next to the plain flows' QPs, so that the collective, storage
and host NICs of one run get one T, from one computation.

The connections are the agents' own (``collectives.bench.connections_for``
on the workload's runs, as ``collectives.agent`` opens them): rank r of
server i is GPU g = r mod G, on the server's NIC g; its QP towards peer p
on channel c is ``engine.QPN_BASE + schedule.conn_key(p, c)``. A storage
reader j reads on QP ``storage.READ_QPN_BASE + j`` at both ends.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from emulator.wire import roce_sport

if TYPE_CHECKING:  # pragma: no cover
    from emulator.experiment.resolved import Experiment


class QpEnds(NamedTuple):
    """One requester QP: its NIC ``src``, the peer NIC ``dst`` and both QPNs
    (what ``ideal_fct.FabricPaths.flow_path``/``ack_path`` read of a flow)."""
    src: str
    dst: str
    src_qpn: int
    dst_qpn: int

    @property
    def udp_sport(self) -> int:
        return roce_sport(self.src_qpn)


def workload_qps(exp: "Experiment") -> tuple[QpEnds, ...]:
    """Every RDMA QP of the workload's collectives and storage reads, both
    directions of each connection (the collectives send data both ways; a
    READ's responses come back on the target's QP); () without a workload."""
    wp = exp.workload
    if wp is None or exp.spec.workload is None:
        return ()
    # deferred: the collectives' modules bring NumPy, which a run without a workload never needs
    from emulator.collectives.bench import connections_for
    from emulator.collectives.engine import QPN_BASE
    from emulator.collectives.schedule import RDMA, conn_key
    from emulator.collectives.workload import runs
    fabric = exp.fabric
    nics = [fabric.server(s).nics for s in wp.servers]
    G = len(nics[0])
    out: list[QpEnds] = []
    for a, b, link, *chan in sorted(connections_for(len(nics), G, runs(exp.spec.workload))):
        if link != RDMA:
            continue
        c = chan[0] if chan else 0
        na, nb = nics[a // G][a % G], nics[b // G][b % G]
        qa, qb = QPN_BASE + conn_key(b, c), QPN_BASE + conn_key(a, c)
        out += [QpEnds(na, nb, qa, qb), QpEnds(nb, na, qb, qa)]
    if wp.storage_nic is not None:
        # deferred: the storage agent's module, NumPy and the agents' NIC with it
        from emulator.collectives.storage import READ_QPN_BASE
        for j, (_server, nic) in enumerate(wp.readers):
            qpn = READ_QPN_BASE + j
            out += [QpEnds(nic, wp.storage_nic, qpn, qpn), QpEnds(wp.storage_nic, nic, qpn, qpn)]
    return tuple(out)


__all__ = ["QpEnds", "workload_qps"]
