"""The NIC an agent config describes (``schema.agent.NicConfig``): a
``RoceNic``, or an ``ib.nic.IbNic`` when the config has ``ib`` -- one
factory for the host agents and the collective and storage agents."""
from __future__ import annotations

from emulator.clock import MONOTONIC, Clock
from emulator.schema.agent import NicConfig

from .nic import RoceNic


def make_nic(n: NicConfig, clock: Clock | None = None, **extra) -> RoceNic:
    """``clock``: None: the process's, from its config (``vtime.member.process_clock``:
    virtual time's, or ``MONOTONIC``). ``extra``: ``RoceNic`` keywords beyond ``NicConfig``'s (the host
    agent's ``ack_every_n``, ``verify_icrc``, ``honor_pfc``, ``logs``, its
    parsed ``dcqcn``); the Ethernet-only ones are left out on InfiniBand."""
    if clock is None:
        from emulator.vtime.member import process_clock
        clock = process_clock(getattr(n, "vtime_socket", None), n.ifname, agent=True,
                              default=MONOTONIC)
    common = dict(rate_bps=n.rate_bps, mtu_bytes=n.mtu_bytes, tx_delay_ns=n.tx_delay_ns,
                  retry_cnt=n.retry_cnt, rto_ns=n.rto_ns, dilation=n.dilation, clock=clock)
    ib = n.ib
    if ib is None:
        cc = {"dcqcn": n.dcqcn, **extra}
        if n.hpcc is not None:               # HPCC instead of DCQCN, fed by INT
            from .hpcc import HpccParams
            cc["dcqcn"] = HpccParams.from_config(n.hpcc)
        return RoceNic(n.ifname, n.mac, n.ip, n.gateway_mac, dscp=n.dscp, priority=n.priority,
                       cnp_dscp=n.cnp_dscp, cnp_priority=n.cnp_priority,
                       cnp_interval_ns=n.cnp_interval_ns, int_max_hops=n.int_max_hops,
                       **{**common, **cc})
    from emulator.ib.cc import IbCcParams
    from emulator.ib.credits import CreditParams
    from emulator.ib.nic import IbNic
    for ethernet_only in ("honor_pfc", "dcqcn", "int_max_hops"):
        extra.pop(ethernet_only, None)
    cc = IbCcParams.from_config({**ib.cc, "dilation": n.dilation}) if ib.cc else None
    return IbNic(n.ifname, n.mac, n.ip, n.gateway_mac, lid=ib.lid, lids=ib.lids, sl=ib.sl,
                 vl=ib.vl, cc=cc, credit=CreditParams(buffer_blocks=ib.buffer_blocks,
                                                      update_blocks=ib.update_blocks,
                                                      update_period_ns=ib.update_period_ns,
                                                      peer_buffer_blocks=ib.peer_buffer_blocks),
                 **common, **extra)
