/*
 * ai-fabric-emulator: the InfiniBand switch pipeline (P4_16, v1model), the
 * second link layer beside fabric.p4 (issue 13; emulator/ib/).
 *
 * Its P4Info (ib.p4info.txtpb, every @id pinned below) is the contract
 * between the subnet manager that the controller plays (emulator/ib/sm.py:
 * LIDs, up-down (up*, then down*) linear forwarding tables) and the switches.
 *
 * Packets arrive on the veths behind a 14-byte Ethernet carrier whose type
 * stands for the IB start delimiter (emulator/wire.py): ETH_P_IB_DATA, a
 * data packet from its LRH; ETH_P_IB_LINK, a link flow-control packet.
 *
 *   link packets (flow control)      -> consumed by the link layer: they
 *                                       never reach forwarding (counted)
 *   anything not InfiniBand          -> dropped, counted
 *   lft (exact: DLID)                -> egress port (the LFT; no entry:
 *                                       dropped, counted, as a switch
 *                                       drops a DLID beyond its LFT)
 *   egress sl2vl (exact: port, SL)   -> the VL the packet takes on the next
 *                                       link (SL2VLMappingTable); no entry:
 *                                       VL 0
 *   egress cc_threshold (exact: port) -> FECN on packets that find the
 *                                       egress queue at or above the port's
 *                                       threshold, one eligible packet in
 *                                       marking_rate + 1 (IBA annex A10's
 *                                       Threshold and Marking_Rate: "the
 *                                       mean number of packets between
 *                                       markings"; here exactly that many)
 *
 * What a switch ASIC's link layer does and this program cannot:
 *   credits (FCTBS/FCCL per VL, IBA 7.9.4) and VL arbitration belong to the
 *   traffic manager: the embedded target implements them there
 *   (emulator/ib/credits.py, emulator/ib/port.py), as it implements PFC;
 *   BMv2 has neither credits nor per-VL queues (it sends what it queued).
 *   The VCRC (CRC-16, polynomial 0x100B) covers the VL, which changes per
 *   hop: the embedded target reseals it; v1model's crc16 is another
 *   polynomial, so on BMv2 the VCRC a packet leaves with is its sender's.
 *   The ICRC does not cover the VL nor FECN/BECN: it stays valid.
 */
#include <core.p4>
#include <v1model.p4>

const bit<16> ETH_P_IB_DATA = 0x88B5;
const bit<16> ETH_P_IB_LINK = 0x88B6;
const bit<2>  LNH_IBA_LOCAL = 2;

#define MAX_PORTS 256
#define LFT_SIZE 1024

/* Why a packet was dropped before forwarding (ib_drop_counter index). */
#define DROP_NOT_IB 0
#define DROP_LINK_PACKET 1
#define DROP_NO_LFT_ENTRY 2
#define DROP_REASONS 4

header carrier_t {
    bit<48> dst_addr;
    bit<48> src_addr;
    bit<16> ether_type;
}

/* Local Route Header, IBA 7.7 */
header lrh_t {
    bit<4>  vl;
    bit<4>  lver;
    bit<4>  sl;
    bit<2>  rsvd2;
    bit<2>  lnh;
    bit<16> dlid;
    bit<5>  rsvd5;
    bit<11> pkt_len;
    bit<16> slid;
}

/* Base Transport Header, IBA 9.2 */
header bth_t {
    bit<8>  opcode;
    bit<1>  se;
    bit<1>  migreq;
    bit<2>  pad_cnt;
    bit<4>  tver;
    bit<16> pkey;
    bit<1>  fecn;
    bit<1>  becn;
    bit<6>  resv6;
    bit<24> dest_qp;
    bit<1>  ack_req;
    bit<7>  resv7;
    bit<24> psn;
}

struct headers_t {
    carrier_t carrier;
    lrh_t     lrh;
    bth_t     bth;
}

struct metadata_t {
    bit<19> cc_threshold;
    bit<16> cc_marking_rate;
}

parser IbParser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.carrier);
        transition select(hdr.carrier.ether_type) {
            ETH_P_IB_DATA: parse_lrh;
            default: accept;
        }
    }
    state parse_lrh {
        pkt.extract(hdr.lrh);
        transition select(hdr.lrh.lnh) {
            LNH_IBA_LOCAL: parse_bth;
            default: accept;          // a GRH (global) packet: forwarded on its LRH alone
        }
    }
    state parse_bth {
        pkt.extract(hdr.bth);
        transition accept;
    }
}

control IbVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control IbIngress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    @id(0x12000101)
    counter(DROP_REASONS, CounterType.packets) ib_drop_counter;
    @id(0x12000102)
    counter(MAX_PORTS, CounterType.packets_and_bytes) ib_rx_port_counter;

    @id(0x01000101)
    action forward(bit<9> port) {
        standard_metadata.egress_spec = port;
    }
    @id(0x01000102)
    action lft_miss() {
        ib_drop_counter.count((bit<32>) DROP_NO_LFT_ENTRY);
        mark_to_drop(standard_metadata);
    }

    /* The linear forwarding table the subnet manager computes. */
    @id(0x02000101)
    table lft {
        key = {
            hdr.lrh.dlid: exact @name("dlid");
        }
        actions = {
            forward;
            @defaultonly lft_miss;
        }
        const default_action = lft_miss();
        size = LFT_SIZE;
    }

    apply {
        ib_rx_port_counter.count((bit<32>) standard_metadata.ingress_port);
        if (hdr.carrier.ether_type == ETH_P_IB_LINK) {
            ib_drop_counter.count((bit<32>) DROP_LINK_PACKET);   // the link layer's
            mark_to_drop(standard_metadata);
        } else if (!hdr.lrh.isValid()) {
            ib_drop_counter.count((bit<32>) DROP_NOT_IB);
            mark_to_drop(standard_metadata);
        } else {
            lft.apply();
        }
    }
}

control IbEgress(inout headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    @id(0x12000103)
    counter(MAX_PORTS, CounterType.packets) fecn_mark_counter;

    @id(0x01000103)
    action set_vl(bit<4> vl) {
        hdr.lrh.vl = vl;
    }
    /* Per port: eligible packets still to pass unmarked before the next FECN. */
    @id(0x16000101)
    register<bit<16>>(MAX_PORTS) cc_marking_countdown;

    @id(0x01000104)
    action set_cc_threshold(bit<19> packets, bit<16> marking_rate) {
        meta.cc_threshold = packets;
        meta.cc_marking_rate = marking_rate;
    }

    /* SL to VL on the link this port drives (SL2VLMappingTable). */
    @id(0x02000102)
    table sl2vl {
        key = {
            standard_metadata.egress_port: exact @name("port");
            hdr.lrh.sl: exact @name("sl");
        }
        actions = {
            set_vl;
        }
        default_action = set_vl(0);
        size = 4096;
    }

    /* The queue depth (packets) from which this port marks FECN (annex A10). */
    @id(0x02000103)
    table cc_threshold {
        key = {
            standard_metadata.egress_port: exact @name("port");
        }
        actions = {
            set_cc_threshold;
        }
        default_action = set_cc_threshold(0, 0);
        size = MAX_PORTS;
    }

    apply {
        if (hdr.lrh.isValid()) {
            sl2vl.apply();
            if (hdr.bth.isValid()) {
                cc_threshold.apply();
                if (meta.cc_threshold != 0 && standard_metadata.enq_qdepth >= meta.cc_threshold) {
                    bit<16> left;
                    cc_marking_countdown.read(left, (bit<32>) standard_metadata.egress_port);
                    if (left == 0) {
                        hdr.bth.fecn = 1;
                        fecn_mark_counter.count((bit<32>) standard_metadata.egress_port);
                        cc_marking_countdown.write((bit<32>) standard_metadata.egress_port,
                                                   meta.cc_marking_rate);
                    } else {
                        cc_marking_countdown.write((bit<32>) standard_metadata.egress_port,
                                                   left - 1);
                    }
                }
            }
        }
    }
}

control IbComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control IbDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.carrier);
        pkt.emit(hdr.lrh);
        pkt.emit(hdr.bth);
    }
}

V1Switch(IbParser(), IbVerifyChecksum(), IbIngress(), IbEgress(), IbComputeChecksum(),
         IbDeparser()) main;
