"""One typed NIC config (``schema.nic.NicConfig``): each default and bound
once, a bad value is one line naming the field, the NIC takes it as is and
``nic.wall`` is where fabric units become the NIC clock's."""
from __future__ import annotations

import json
import socket

import pytest
from pydantic import ValidationError

from emulator.errors import ConfigError
from emulator.nic.dcqcn import DcqcnParams
from emulator.nic.hpcc import HpccParams
from emulator.nic.ib_cc import IbCcParams
from emulator.nic.nic import RoceNic
from emulator.schema.nic import DEFAULT_RTO_FABRIC_NS
from emulator.nic.wall import nic_wall
from emulator.schema.agent import HostAgentConfig
from emulator.schema.endpoints import CpuCostSpec
from emulator.schema.experiment import NicSpec
from emulator.schema.nic import HostCpuConfig, IbNicConfig, NicConfig
from emulator.schema.switch import IbLinkConfig
from emulator.wire import ROCE_FRAMING

ADDR = {"mac": "02:00:00:00:00:01", "ip": "10.0.0.1", "gateway_mac": "02:00:00:00:00:02"}


def test_the_experiment_file_and_the_nic_share_defaults_and_bounds():
    nic, spec = NicConfig(**ADDR), NicSpec()
    assert (nic.retry_cnt, nic.mtu_bytes) == (spec.retry_cnt, spec.mtu_bytes) == (7, 1024)
    for bad in (0, 1001):
        with pytest.raises(ValidationError, match="retry_cnt"):
            NicConfig(**ADDR, retry_cnt=bad)
        with pytest.raises(ValidationError, match="retry_cnt"):
            NicSpec(retry_cnt=bad)
    NicConfig(**ADDR, retry_cnt=1000)
    NicSpec(retry_cnt=1000)
    link, sw = IbNicConfig(lid=1, lids={}), IbLinkConfig()
    assert (link.buffer_blocks, link.update_blocks, link.update_period_ns) == \
        (sw.buffer_blocks, sw.update_blocks, sw.update_period_ns) == (512, 16, 16_000)
    for k, v in (("cores", 0), ("cores", 1025), ("rx_backlog_pkts", 0)):
        with pytest.raises(ValidationError, match=k):
            HostCpuConfig(**{k: v})
        with pytest.raises(ValidationError, match=k):
            CpuCostSpec(**{k: v})


@pytest.mark.parametrize("field, value", [
    ("mtu_bytes", 255), ("mtu_bytes", 9004), ("mtu_bytes", 1026), ("rate_bps", 0),
    ("dilation", 0.5), ("priority", 8), ("cnp_dscp", 64), ("int_max_hops", 99),
    ("min_rnr_timer", 32), ("ack_every_n", 0)])
def test_bounds(field, value):
    with pytest.raises(ValidationError, match=field):
        NicConfig(**ADDR, **{field: value})


@pytest.mark.parametrize("extra, where", [
    ({"retry_cnt": 0}, "retry_cnt"),
    ({"dcqcn": {"g": 0}}, "dcqcn.g"),
    ({"dcqcn": {"alpha_timer_ns": 1}}, "dcqcn.alpha_timer_ns"),
    ({"hpcc": {"eta": 0.9}}, "hpcc.base_rtt_us"),
    ({"ib": {"lid": 1, "lids": {}, "cc": {"ccti_timer": 0}}}, "ib.cc.ccti_timer"),
    ({"host_cpu": {"cores": 0}}, "host_cpu.cores"),
])
def test_a_bad_value_is_one_line_naming_the_field(tmp_path, extra, where):
    cfg = {"host": "h", "ifname": "x", **ADDR, "result_path": str(tmp_path / "r.json"), **extra}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as e:
        HostAgentConfig.load(path)
    first = str(e.value).splitlines()[0]
    assert f"{path}: {where}" in first


def test_wall_puts_fabric_units_on_the_nics_clock():
    d = 1000.0
    c = NicConfig(**ADDR, dilation=d, rate_bps=100_000_000_000, tx_delay_ns=1500)
    w = nic_wall(c)
    assert (w.rate_bps, w.tx_delay_ns) == (100_000_000, 1_500_000)
    assert w.rto_ns == DEFAULT_RTO_FABRIC_NS * 1000 and w.cnp_interval_ns == 50_000_000
    assert isinstance(w.cc, DcqcnParams) and w.cc.enabled
    assert (w.cc.alpha_timer_ns, w.cc.rate_timer_ns) == (55_000_000, 55_000_000)
    assert w.cc.rai_frac == pytest.approx(0.04e9 / 100e9)      # of the fabric line rate
    off = nic_wall(NicConfig(**ADDR, dcqcn={"cnp_interval_us": None, "enabled": False}))
    assert off.cnp_interval_ns is None and not off.cc.enabled
    h = nic_wall(NicConfig(**ADDR, dilation=d, hpcc={"base_rtt_us": 12.5})).cc
    assert isinstance(h, HpccParams) and (h.base_rtt_ns, h.dilation) == (12_500, d)
    ib = nic_wall(NicConfig(**ADDR, dilation=d, ib={"lid": 1, "lids": {},
                                                    "cc": {"enabled": True}}))
    assert isinstance(ib.cc, IbCcParams) and ib.cc.ccti_timer_ns == 1024 * 150 * 1000
    assert ib.cnp_interval_ns == 0                              # every FECN answered
    assert not nic_wall(NicConfig(**ADDR, ib={"lid": 1, "lids": {}})).cc.enabled


def test_the_nic_takes_the_config_as_is_and_wires_its_parts_at_construction():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    cfg = NicConfig(**ADDR, rate_bps=1_000_000_000, int_max_hops=3, timer_slack_ns=None)
    nic = RoceNic(cfg, sock=a)
    try:
        assert nic.config is cfg and nic.rate_bps == cfg.rate_bps
        tx = nic.transmitter
        assert tx.int_max_hops == 3 and tx.on_data_tx == nic.reaction.on_tx
        assert tx.cnp_template == nic.link.cnp_template
        assert nic.framing.hdr_bytes > ROCE_FRAMING.hdr_bytes       # room for INT
    finally:
        nic.close()
        b.close()
    with pytest.raises(ValueError, match="interface"):
        RoceNic(NicConfig(**ADDR))                         # no ifname, no socket
