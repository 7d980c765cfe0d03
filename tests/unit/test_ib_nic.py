"""The InfiniBand NIC (a ``RoceNic`` given ``emulator/ib/link.py``'s
``IbLink``) on a ``ManualClock``: two NICs back to back over a socketpair
(an HCA-to-HCA link: each one's flow control is the other's credit), and
one NIC facing a test that plays its switch port and hands out credit by
hand."""
from __future__ import annotations

import socket

import pytest

from tests.nics import ib_nic
from emulator.nic.host_cpu import CpuServers
from emulator.nic.nic import WcOpcode, WcStatus
from emulator.nic.roce import RC_WRITE_FIRST, RC_WRITE_LAST, RC_WRITE_MIDDLE
from emulator.ib.credits import blocks
from emulator.ib.frames import IbFrameTemplate, fc_frame, parse_fc, parse_ib, verify_icrc
from emulator.ib.headers import IB_FRAMING, check_crcs, fc_wire_ns
from emulator.ib.link import IbLink
from emulator.wire import ETH_HDR_BYTES, ETH_P_IB_DATA
from tests.nic_sim import NicLoop, manual_clock

MAC_A, MAC_B = "02:00:00:00:0a:01", "02:00:00:00:0b:01"
IP_A, IP_B = "10.0.1.1", "10.0.2.1"
LID_A, LID_B = 5, 9
LIDS = {IP_A: LID_A, IP_B: LID_B}
RATE = 1_000_000_000                   # 1 Gbit/s: 8 ns a byte
MTU = 1024


def socket_pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    return a, b


def nic(sock, mac, ip, lid, peer_mac, clock, **kw):
    kw.setdefault("rto_ns", 300_000_000)
    return ib_nic(None, mac, ip, peer_mac, lid=lid, lids=LIDS, rate_bps=RATE, mtu_bytes=MTU,
                 sock=sock, clock=clock, **kw)


def back_to_back(buffer_blocks: int, delay_ns: int):
    """Two NICs on one link, each with a QP to the other: (clock, a, b, qa, qb)."""
    clock = manual_clock()
    sa, sb = socket_pair()
    kw = {"buffer_blocks": buffer_blocks, "tx_delay_ns": delay_ns}
    a = nic(sa, MAC_A, IP_A, LID_A, MAC_B, clock, **kw)
    b = nic(sb, MAC_B, IP_B, LID_B, MAC_A, clock, **kw)
    return clock, a, b, a.create_qp(0x11, IP_B, 0x22), b.create_qp(0x22, IP_A, 0x11)


def test_an_rdma_write_crosses_a_credit_controlled_link_intact():
    # 4 KiB of buffer against 1 Gbit/s x 2 x 20 us of round trip (5 KB):
    # credit returns too late to keep the link busy
    clock, a, b, qa, _ = back_to_back(64, 20_000)
    data = bytes(range(256)) * 100                     # 25 600 bytes: 25 packets
    src = a.register_mr(len(data), buf=bytearray(data))
    dst = b.register_mr(len(data), rkey=0x77)
    a.post_write(qa, 1, (src, 0, len(data)), dst.addr, 0x77)
    loop = NicLoop([a, b], clock)
    done = []
    loop.after_pass.append(lambda: done.extend(a.poll_cq()))
    assert loop.wait(lambda: done, timeout_s=1.0)
    assert done[0].status == WcStatus.SUCCESS
    assert bytes(dst.buf) == data
    # the sender ran out of credit and waited, and nothing was lost or sent again
    a.update_pause_stats()
    assert a.stats.credit_stalls >= 2 and a.stats.credit_stalled_ns > 40_000
    assert a.stats.tx_retransmits == 0 and b.link.credits.overruns == 0
    assert a.stats.fc_rx > 0 and b.stats.fc_tx > 0


def test_send_and_read_run_over_infiniband_as_over_roce():
    # the same verbs: a SEND into a posted receive, a READ of the peer's
    # memory (requests one way, responses the other, both under credit)
    clock, a, b, qa, qb = back_to_back(64, 5_000)
    message = bytes(range(251)) * 20                   # 5020 bytes: 5 packets
    b.post_recv(qb, 77, len(message))
    a.post_send(qa, 1, message)
    remote = b.register_mr(9000, buf=bytearray((i * 7) % 256 for i in range(9000)), rkey=0x99)
    local = a.register_mr(9000)
    a.post_read(qa, 2, (local, 0, 9000), remote.addr, 0x99)
    loop = NicLoop([a, b], clock)
    done_a, done_b = [], []
    loop.after_pass.append(lambda: (done_a.extend(a.poll_cq()), done_b.extend(b.poll_cq())))
    assert loop.wait(lambda: len(done_a) == 2 and done_b, timeout_s=1.0)
    assert [(c.opcode, c.status) for c in done_a] == \
        [(WcOpcode.SEND, WcStatus.SUCCESS), (WcOpcode.RDMA_READ, WcStatus.SUCCESS)]
    (recv,) = done_b
    assert (recv.opcode, recv.wr_id, recv.byte_len) == (WcOpcode.RECV, 77, len(message))
    assert bytes(recv.data) == message
    assert bytes(local.buf) == bytes(remote.buf)
    assert a.stats.tx_retransmits == 0 and b.stats.tx_retransmits == 0
    assert a.link.credits.overruns == 0 and b.link.credits.overruns == 0


class SwitchPort:
    """The test plays the switch port facing one NIC: it logs what the NIC
    sends (clock time, frame) and grants credit by hand."""

    def __init__(self, sock, clock):
        self.sock, self.clock = sock, clock
        self.data: list[tuple[int, bytes]] = []
        self.fc: list[tuple[int, tuple]] = []
        self.stream: list[bytes] = []                  # everything, in arrival order
        self.fctbs = 0                                 # our FCTBS (we send no data)

    def on_frame(self, t_ns, frame):
        self.stream.append(frame)
        if parse_fc(frame) is not None:
            self.fc.append((t_ns, parse_fc(frame)))
        else:
            self.data.append((t_ns, frame))

    def grant(self, fccl: int):
        """A flow-control packet: the NIC may send up to ``fccl`` blocks in all."""
        self.sock.send(fc_frame(bytes(6), 0, self.fctbs, fccl % 4096))


def test_a_sender_stalls_exactly_while_it_has_no_credit():
    clock = manual_clock()
    sn, sp = socket_pair()
    sp.setblocking(False)
    a = nic(sn, MAC_A, IP_A, LID_A, MAC_B, clock)
    port = SwitchPort(sp, clock)
    t0 = clock.now_ns()
    loop = NicLoop([a], clock, peers=[sp], on_peer_frame=port.on_frame)
    qa = a.create_qp(0x11, IP_B, 0x22)
    payload = bytes(10 * MTU)                           # 10 WRITE packets
    mr = a.register_mr(len(payload), buf=bytearray(payload))
    a.post_write(qa, 1, (mr, 0, len(payload)), 0x1000, 0x77)
    loop.run_for(0.001)
    assert port.data == []                             # no credit yet: nothing sent
    # but its own buffer advertised at once: a flow-control packet's 6 bytes later
    assert port.fc[0] == (t0 + fc_wire_ns(RATE), (0, 0, 512)) and fc_wire_ns(RATE) == 48

    first = IB_FRAMING.frame_bytes(16, MTU) - ETH_HDR_BYTES    # WRITE FIRST: RETH + 1 KiB
    middle = IB_FRAMING.frame_bytes(0, MTU) - ETH_HDR_BYTES
    t_grant = clock.now_ns()
    port.grant(blocks(first) + 2 * blocks(middle))     # exactly three packets' worth
    loop.run_for(0.001)
    assert [parse_ib(f).opcode for _, f in port.data] == \
        [RC_WRITE_FIRST, RC_WRITE_MIDDLE, RC_WRITE_MIDDLE]
    # back to back from the grant, at 8 ns a byte, no carrier on the wire
    # (a frame leaves the nanosecond its serialization ends: whole ns here)
    ends = [t_grant + (first + k * middle) * 8 for k in range(3)]
    assert [t - end for (t, _), end in zip(port.data, ends)] == [0, 0, 0]
    stall_from = ends[-1]                              # the 4th packet's slot: no credit for it
    a.update_pause_stats()
    assert a.stats.credit_stalls == 2                  # before the grant, and now
    stalled_before = t_grant - t0                      # the first stall: from the post to the grant

    t_more = clock.now_ns() + 5_000
    loop.run(t_more)
    t_more = clock.now_ns()                            # the loop may wake a nanosecond late
    port.grant(blocks(first) + 10 * blocks(middle))    # credit for the rest
    loop.run_for(0.001)
    assert len(port.data) == 10
    assert port.data[3][0] - (t_more + middle * 8) == 0   # it started the moment the credit came
    a.update_pause_stats()
    assert a.stats.credit_stalled_ns == stalled_before + (t_more - stall_from)
    assert a.stats.tx_retransmits == 0


def test_a_nic_whose_link_came_up_before_the_run_sends_at_once_on_its_peers_buffer():
    # The switch port's credit sent at its own start finds no NIC yet: the
    # NIC holds the port's empty buffer as credit from the start (a link
    # carries no data before its ends exchanged credit). Without it the
    # first packet waited for the port's next flow-control packet: a link
    # delay in virtual time, up to an update period in a dilated run.
    clock = manual_clock()
    sn, sp = socket_pair()
    sp.setblocking(False)
    first = IB_FRAMING.frame_bytes(16, MTU) - ETH_HDR_BYTES    # WRITE FIRST: RETH + 1 KiB
    middle = IB_FRAMING.frame_bytes(0, MTU) - ETH_HDR_BYTES
    peer_blocks = blocks(first) + 2 * blocks(middle)          # the port's buffer: three packets
    a = nic(sn, MAC_A, IP_A, LID_A, MAC_B, clock,
            peer_buffer_blocks=peer_blocks)
    port = SwitchPort(sp, clock)
    loop = NicLoop([a], clock, peers=[sp], on_peer_frame=port.on_frame)
    qa = a.create_qp(0x11, IP_B, 0x22)
    mr = a.register_mr(10 * MTU, buf=bytearray(10 * MTU))
    t0 = clock.now_ns()
    a.post_write(qa, 1, (mr, 0, 10 * MTU), 0x1000, 0x77)
    loop.run_for(0.001)
    # no flow-control packet came: the first three go back to back from the post, then a stall
    assert [parse_ib(f).opcode for _, f in port.data] == \
        [RC_WRITE_FIRST, RC_WRITE_MIDDLE, RC_WRITE_MIDDLE]
    assert [t for t, _ in port.data] == [t0 + (first + k * middle) * 8 for k in range(3)]
    a.update_pause_stats()
    assert a.link.credits.credit_blocks() == 0 and a.stats.credit_stalls == 1


def test_a_flow_control_packet_counts_exactly_the_blocks_sent_before_it_on_the_wire():
    # The peer resets its ABR to our FCTBS: a flow-control packet that
    # overtook a packet already counted would make it count those blocks
    # twice, and grant credit it does not have (overruns downstream).
    clock = manual_clock()
    sn, sp = socket_pair()
    sp.setblocking(False)
    a = nic(sn, MAC_A, IP_A, LID_A, MAC_B, clock, tx_delay_ns=3_000,
            update_blocks=1, update_period_ns=3_000)   # an update mid-frame
    port = SwitchPort(sp, clock)
    loop = NicLoop([a], clock, peers=[sp], on_peer_frame=port.on_frame)
    qa = a.create_qp(0x11, IP_B, 0x22)
    port.grant(2000)
    mr = a.register_mr(20 * MTU, buf=bytearray(20 * MTU))
    a.post_write(qa, 1, (mr, 0, 20 * MTU), 0x1000, 0x77)
    loop.run_for(0.001)
    sent_blocks, checked = 0, 0
    for frame in port.stream:
        fc = parse_fc(frame)
        if fc is None:
            sent_blocks += blocks(len(frame) - ETH_HDR_BYTES)
        else:
            assert fc[1] == sent_blocks % 4096
            checked += sent_blocks > 0
    assert sent_blocks >= 20 * blocks(MTU) and checked >= 20


def test_time_without_credit_does_not_count_against_the_ack_timeout():
    clock = manual_clock()
    sn, sp = socket_pair()
    sp.setblocking(False)
    a = nic(sn, MAC_A, IP_A, LID_A, MAC_B, clock, rto_ns=1_000_000, ack_every_n=1)
    port = SwitchPort(sp, clock)
    loop = NicLoop([a], clock, peers=[sp], on_peer_frame=port.on_frame)
    qa = a.create_qp(0x11, IP_B, 0x22)
    mr = a.register_mr(4 * MTU, buf=bytearray(4 * MTU))
    a.post_write(qa, 1, (mr, 0, 4 * MTU), 0x1000, 0x77)
    port.grant(blocks(IB_FRAMING.frame_bytes(16, MTU) - ETH_HDR_BYTES))   # the first packet only
    loop.run_for(0.010)                                # 10 ACK timeouts, no ACK: but stalled
    assert len(port.data) == 1 and a.stats.timeouts == 0
    port.grant(2000)                                   # credit for the rest
    loop.run_for(0.005)                                # still no ACK, and no stall now
    assert len(port.data) >= 4 and a.stats.timeouts >= 1


def test_a_fecn_marked_request_is_answered_with_a_becn_cnp_and_ib_cc_slows_the_sender():
    clock = manual_clock()
    sa, sb = socket_pair()
    cc = {"enabled": True}                            # IB CC with its defaults
    a = nic(sa, MAC_A, IP_A, LID_A, MAC_B, clock, cc=cc)
    b = nic(sb, MAC_B, IP_B, LID_B, MAC_A, clock, cc=cc)
    qa = a.create_qp(0x11, IP_B, 0x22)
    b.create_qp(0x22, IP_A, 0x11)
    # a packet from A that a switch marked: FECN set (the ICRC does not cover it)
    tpl = IbFrameTemplate(MAC_A, MAC_B, LID_A, LID_B, 0x22, max_payload_bytes=MTU)
    marked = bytes(tpl.build(RC_WRITE_FIRST, 0, bytes(MTU), reth=(0, 0x77, 2 * MTU), fecn=True))
    assert verify_icrc(marked) and check_crcs(marked[ETH_HDR_BYTES:]) == (True, True)
    loop = NicLoop([a, b], clock)
    loop.pump()                                       # flow control both ways: credit
    sa.send(marked)
    loop.run_for(0.0001)
    assert b.stats.ecn_ce_rx == 1 and b.stats.cnp_tx == 1
    assert a.stats.cnp_rx == 1
    assert qa.cc.ccti == 1 and qa.rate_bps == pytest.approx(RATE / 1.25)


def test_a_qp_to_an_ip_without_a_lid_is_refused():
    clock = manual_clock()
    sa, _ = socket_pair()
    a = nic(sa, MAC_A, IP_A, LID_A, MAC_B, clock)
    with pytest.raises(ValueError, match="no path to 10.9.9.9"):
        a.create_qp(0x11, "10.9.9.9", 0x22)


def test_frames_on_another_vl_or_for_another_lid_are_not_taken():
    clock = manual_clock()
    sa, sb = socket_pair()
    a = nic(sa, MAC_A, IP_A, LID_A, MAC_B, clock)
    b = nic(sb, MAC_B, IP_B, LID_B, MAC_A, clock)
    b.create_qp(0x22, IP_A, 0x11)
    loop = NicLoop([a, b], clock)
    for kw in ({"vl": 1}, {"dlid": 77}):
        args = {"slid": LID_A, "dlid": LID_B, **{k: v for k, v in kw.items() if k != "vl"}}
        tpl = IbFrameTemplate(MAC_A, MAC_B, args["slid"], args["dlid"], 0x22, vl=kw.get("vl", 0))
        sa.send(bytes(tpl.build(RC_WRITE_LAST, 0, b"x" * 8)))
    loop.run_for(0.0001)
    assert b.link.vl_errors == 1 and b.stats.rx_ignored == 2 and b.stats.rx_packets == 0
    assert ETH_P_IB_DATA == 0x88B5


def test_the_infiniband_link_runs_no_host_parts_and_pauses_nothing():
    clock = manual_clock()
    sa, sb = socket_pair()
    a = nic(sa, MAC_A, IP_A, LID_A, MAC_B, clock)
    assert isinstance(a.link, IbLink) and a.framing == IB_FRAMING and not a.honor_pfc
    with pytest.raises(ValueError, match="host-CPU"):
        a.set_packet_cpu(CpuServers(clock=clock))
    with pytest.raises(ValueError, match="tenant partitions"):
        a.set_partition(5)
    a.set_packet_cpu(None)
    a.set_partition(None)
    assert a.cpu_gate is None and a.tenant_filter is None and a.pkey == 0xFFFF
    assert not any(a.paused(p) for p in range(8)) and a.update_pause_stats() == 0
    with pytest.raises(ValueError, match="ib part"):
        IbLink(a.config.model_copy(update={"ib": None}), clock)
    a.close()
    sb.close()
