"""What a run on an InfiniBand fabric reports: its flows' ideal FCTs on the
subnet manager's routes with IB's frame sizes, and its ports' per-VL
counters (credit stalls in fabric ns, overruns as drops)."""
from __future__ import annotations

from emulator.experiment.ideal_fct import FabricPaths, frame_sizes, link_framing
from emulator.experiment.model import experiment_from_dict
from emulator.experiment.summary import _ib_port_entry
from emulator.ib.sm import sweep
from emulator.topo import load_fabric
from tests.conftest import REPO

IB_TOPO = REPO / "topologies/clos-2x2-h3-ib.yaml"


def test_the_shipped_ib_twin_is_the_roce_fabric_with_another_link_layer():
    ib, roce = load_fabric(IB_TOPO), load_fabric(REPO / "topologies/clos-2x2-h3.yaml")
    assert (ib.link_layer, roce.link_layer) == ("infiniband", "roce")
    assert ib.links == roce.links and [n.name for n in ib.nodes] == [n.name for n in roce.nodes]


def test_ideal_paths_follow_the_lfts_the_subnet_manager_installs():
    fabric = load_fabric(IB_TOPO)
    paths, subnet = FabricPaths(fabric), sweep(fabric)
    for src, dst in (("h4", "h1"), ("h5", "h1"), ("h2", "h1"), ("h1", "h6")):
        hops = paths.path(src, dst, sport=12345)
        assert [h.node for h in hops] + [hops[-1].peer] == subnet.path(src, dst)
        assert paths.path(src, dst, sport=54321) == hops       # no 5-tuple hash on IB


def test_ib_frames_are_the_packet_alone_and_cheaper_than_roce_on_the_wire():
    fabric = load_fabric(IB_TOPO)
    # carrier 14 + LRH 8 + BTH 12 + RETH 16 + 1024 + ICRC 4 + VCRC 2, less the carrier
    assert frame_sizes(4096, 1024, "write", link_framing(fabric)) == (4, 1066, 1050, 1050)
    # RoCE: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 (+ RETH) + 1024 + ICRC 4 + 24 on the wire
    assert frame_sizes(4096, 1024, "write") == (4, 1122, 1106, 1106)
    spec = {"name": "x", "dilation": 100,
            "traffic": [{"src": "h4", "dst": "h1", "op": "write", "size_bytes": 1 << 20}]}
    from emulator.experiment.ideal_fct import standalone_fct_ns
    ib = experiment_from_dict({**spec, "topology": str(IB_TOPO)}, REPO / "experiments/x.yaml")
    roce = experiment_from_dict({**spec, "topology": "../topologies/clos-2x2-h3.yaml"},
                                REPO / "experiments/x.yaml")
    t_ib, t_roce = (standalone_fct_ns(e, e.flows[0]) for e in (ib, roce))
    # 1024 packets at 25 Gbit/s: 1050 against 1106 bytes each
    assert t_roce - t_ib > 1024 * (1106 - 1050) * 8 / 25 * 0.99


def test_an_ib_port_reports_its_vls_credit_stalls_in_fabric_time_and_overruns_as_drops():
    stats = {"ports": [{"port": 3, "vls": [
        {"vl": 0, "tx_packets": 10, "tx_bytes": 10_500, "stalls": 2, "stalled_ns": 4_000_000,
         "overruns": 0, "fc_tx": 5, "fc_rx": 7},
        {"vl": 1, "tx_packets": 1, "tx_bytes": 100, "stalls": 0, "stalled_ns": 0,
         "overruns": 1, "fc_tx": 1, "fc_rx": 1}]}]}
    entry = _ib_port_entry(stats, 3, {"rx_packets": 4, "rx_bytes": 400, "fecn_mark_packets": 2},
                           d=1000)
    assert entry["tx_packets"] == 11 and entry["tx_bytes"] == 10_600
    assert entry["credit_stalled_ns"] == 4_000 and entry["vls"][0]["stalled_ns"] == 4_000
    assert entry["drops"] == 1 and entry["fecn_marks"] == 2 and entry["rx_packets"] == 4
    assert _ib_port_entry(stats, 9, {}, d=1)["tx_packets"] == 0          # a port not in the stats


def test_every_ib_nic_starts_holding_its_switch_ports_buffer_as_credit(tmp_path):
    # the links came up before the run: a NIC's first packet waits for no
    # flow-control packet (in virtual time it waited a link delay, in a
    # dilated run up to an update period: the port's credit sent at its own
    # start found no NIC yet)
    from emulator.experiment.agents import agent_configs
    from emulator.schema.switch import IbLinkConfig
    spec = {"name": "x", "dilation": 100, "topology": str(IB_TOPO),
            "traffic": [{"src": "h4", "dst": "h1", "op": "write", "size_bytes": 1 << 20}]}
    exp = experiment_from_dict(spec, REPO / "experiments/x.yaml")
    cfgs = agent_configs(exp, tmp_path, 0)
    assert {c.ib.peer_buffer_blocks for c in cfgs.values()} == {IbLinkConfig().buffer_blocks}
