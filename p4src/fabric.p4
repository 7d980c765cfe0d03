/*
 * ai-fabric-emulator: the leaf/spine fabric switch pipeline (P4_16, v1model).
 *
 * This program is the contract of the project. Its P4Info (fabric.p4info.txtpb,
 * every @id pinned below) is what the controller programs and what both
 * targets load: BMv2 (simple_switch_grpc) runs this source compiled by
 * p4c-bm2-ss; the embedded Python target (emulator/dataplane/) implements the
 * same pipeline, table by table.
 *
 * Forwarding part:
 *   packet-out from the controller  -> straight to the port it names
 *   my_station (exact, router MAC)  -> admits frames for routing
 *   ipv4_lpm (LPM + action selector) -> next hop; ECMP groups hash the
 *                                       5-tuple, so the RoCEv2 UDP source
 *                                       port (one per queue pair) spreads QPs
 *   acl (ternary)                   -> punt to CPU / drop / permit
 *   TTL decrement, MAC rewrite, per-port counters.
 *
 * Lossless part (traffic classes, PFC, ECN):
 *   dscp_to_priority (exact)   -> standard_metadata.priority (8 priorities,
 *                                 7 highest; no entry: priority 0, lossy)
 *   pfc_config (exact: ingress port, priority) -> a hit makes that class
 *                                 lossless: XOFF/XON/headroom in bytes for the
 *                                 traffic manager's per-ingress accounting
 *   received PFC frames (802.1Qbb, ethertype 0x8808, opcode 0x0101) are
 *                                 consumed: counted per port/priority
 *                                 (pfc_rx_counter) and handed to the traffic
 *                                 manager, which stops that egress queue
 *   ecn_config (exact: egress port, priority) -> RED marking of ECN-capable
 *                                 packets on queue depth: none below Kmin,
 *                                 probability rising to Pmax at Kmax, always
 *                                 above; marks counted in ecn_mark_counter
 * Generating pause frames needs the traffic manager's buffer occupancy: the
 * embedded target's traffic manager does it from pfc_config's thresholds and
 * counts them in pfc_tx_counter.
 *
 * Port drops in the traffic manager cannot be counted by P4 on BMv2, so the
 * program counts what ingress hands to each egress port (enq_port_counter)
 * and what egress sends (tx_port_counter): their difference is the traffic
 * manager's drops on that port, on either target.
 */
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_MAC_CONTROL = 0x8808;
const bit<8>  IP_PROTO_UDP = 17;
const bit<16> UDP_PORT_ROCEV2 = 4791;

#define CPU_PORT 255
#define MAX_PORTS 256
#define NUM_PRIORITIES 8
#define PORT_PRIO_CELLS 2048          // MAX_PORTS * NUM_PRIORITIES, index port*8+priority
const bit<16> MAC_CONTROL_OPCODE_PFC = 0x0101;
// BMv2 reports queue depth in packets; ECN thresholds are bytes. Depth in
// bytes is approximated as packets x this (a 1 KiB-MTU RoCE frame).
#define QDEPTH_CELL_BYTES 1100

typedef bit<9>  port_t;
typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;

// ---------------------------------------------------------------- headers

@controller_header("packet_in")
@id(0x04000001)
header packet_in_t {
    port_t  ingress_port;
    bit<7>  _pad;
}

@controller_header("packet_out")
@id(0x04000002)
header packet_out_t {
    port_t  egress_port;
    bit<7>  _pad;
}

header ethernet_t {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16>    ether_type;
}

// 802.3x / 802.1Qbb MAC control; opcode 0x0101 is priority flow control.
header mac_control_t {
    bit<16> opcode;
    bit<16> class_enable;      // one bit per priority, bit i = priority i
    bit<16> pause_time_0;      // quanta of 512 bit times
    bit<16> pause_time_1;
    bit<16> pause_time_2;
    bit<16> pause_time_3;
    bit<16> pause_time_4;
    bit<16> pause_time_5;
    bit<16> pause_time_6;
    bit<16> pause_time_7;
}

header ipv4_t {
    bit<4>      version;
    bit<4>      ihl;
    bit<6>      dscp;
    bit<2>      ecn;
    bit<16>     total_len;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     frag_offset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdr_checksum;
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
}

header udp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

// InfiniBand Base Transport Header, carried by RoCEv2 in UDP port 4791.
header bth_t {
    bit<8>  opcode;
    bit<1>  solicited;
    bit<1>  mig_req;
    bit<2>  pad_count;
    bit<4>  tver;
    bit<16> pkey;
    bit<1>  fecn;
    bit<1>  becn;
    bit<6>  resv6;
    bit<24> dst_qp;
    bit<1>  ack_req;
    bit<7>  resv7;
    bit<24> psn;
}

// RDMA Extended Transport Header (RDMA WRITE first/only, READ request).
header reth_t {
    bit<64> virtual_addr;
    bit<32> rkey;
    bit<32> dma_length;
}

// ACK Extended Transport Header (ACK/NAK, READ responses).
header aeth_t {
    bit<8>  syndrome;
    bit<24> msn;
}

struct headers_t {
    packet_out_t  packet_out;
    packet_in_t   packet_in;
    ethernet_t    ethernet;
    mac_control_t mac_control;
    ipv4_t        ipv4;
    udp_t         udp;
    bth_t         bth;
    reth_t        reth;
    aeth_t        aeth;
}

struct metadata_t {
    bit<16> l4_src_port;
    bit<16> l4_dst_port;
    bit<3>  priority;          // 802.1p priority (7 highest) from dscp_to_priority
    bool    lossless;          // pfc_config hit: PFC protects (ingress port, priority)
    bit<32> pfc_xoff_bytes;
    bit<32> pfc_xon_bytes;
    bit<32> pfc_headroom_bytes;
}

// ---------------------------------------------------------------- parser

parser FabricParser(packet_in packet,
                    out headers_t hdr,
                    inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {
    state start {
        transition select(standard_metadata.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }
    state parse_packet_out {
        packet.extract(hdr.packet_out);
        transition parse_ethernet;
    }
    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_MAC_CONTROL: parse_mac_control;
            default: accept;
        }
    }
    state parse_mac_control {
        packet.extract(hdr.mac_control);
        transition accept;
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (4w5, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        packet.extract(hdr.udp);
        meta.l4_src_port = hdr.udp.src_port;
        meta.l4_dst_port = hdr.udp.dst_port;
        transition select(hdr.udp.dst_port) {
            UDP_PORT_ROCEV2: parse_bth;
            default: accept;
        }
    }
    state parse_bth {
        packet.extract(hdr.bth);
        // RC opcodes (IBTA vol. 1, table 38) that carry a RETH or an AETH.
        transition select(hdr.bth.opcode) {
            0x06: parse_reth;   // RDMA WRITE First
            0x0A: parse_reth;   // RDMA WRITE Only
            0x0B: parse_reth;   // RDMA WRITE Only with Immediate
            0x0C: parse_reth;   // RDMA READ Request
            0x0D: parse_aeth;   // RDMA READ Response First
            0x0F: parse_aeth;   // RDMA READ Response Last
            0x10: parse_aeth;   // RDMA READ Response Only
            0x11: parse_aeth;   // Acknowledge
            default: accept;
        }
    }
    state parse_reth {
        packet.extract(hdr.reth);
        transition accept;
    }
    state parse_aeth {
        packet.extract(hdr.aeth);
        transition accept;
    }
}

control FabricVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn,
              hdr.ipv4.total_len, hdr.ipv4.identification, hdr.ipv4.flags,
              hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol,
              hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

// ---------------------------------------------------------------- ingress

control FabricIngress(inout headers_t hdr,
                      inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {

    @id(0x12000001)
    counter(MAX_PORTS, CounterType.packets_and_bytes) rx_port_counter;
    @id(0x12000002)
    counter(MAX_PORTS, CounterType.packets_and_bytes) enq_port_counter;
    @id(0x12000003)
    counter(MAX_PORTS, CounterType.packets_and_bytes) pipeline_drop_counter;
    @id(0x12000005)
    counter(PORT_PRIO_CELLS, CounterType.packets_and_bytes) enq_prio_counter;
    @id(0x12000006)
    counter(PORT_PRIO_CELLS, CounterType.packets_and_bytes) pfc_rx_counter;

    @id(0x01000004)
    action set_priority(bit<3> priority) {
        standard_metadata.priority = priority;
        meta.priority = priority;
    }

    @id(0x02000004)
    table dscp_to_priority {
        key = {
            hdr.ipv4.dscp: exact @name("dscp");
        }
        actions = {
            set_priority;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = 64;
    }

    @id(0x01000005)
    action set_pfc_thresholds(bit<32> xoff_bytes, bit<32> xon_bytes, bit<32> headroom_bytes) {
        meta.lossless = true;
        meta.pfc_xoff_bytes = xoff_bytes;
        meta.pfc_xon_bytes = xon_bytes;
        meta.pfc_headroom_bytes = headroom_bytes;
    }

    @id(0x02000005)
    table pfc_config {
        key = {
            standard_metadata.ingress_port: exact @name("ig_port");
            meta.priority: exact @name("priority");
        }
        actions = {
            set_pfc_thresholds;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = PORT_PRIO_CELLS;
    }


    @id(0x01000001)
    action drop() {
        mark_to_drop(standard_metadata);
    }

    @id(0x01000002)
    action set_nexthop(port_t port, mac_addr_t smac, mac_addr_t dmac) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.src_addr = smac;
        hdr.ethernet.dst_addr = dmac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    @id(0x01000003)
    action punt_to_cpu() {
        standard_metadata.egress_spec = CPU_PORT;
    }

    @id(0x02000001)
    table my_station {
        key = {
            hdr.ethernet.dst_addr: exact @name("eth_dst");
        }
        actions = {
            NoAction;
        }
        size = 64;
    }

    @id(0x11000001)
    @max_group_size(64)
    action_selector(HashAlgorithm.crc16, 32w1024, 32w16) ecmp_selector;

    @id(0x02000002)
    table ipv4_lpm {
        key = {
            hdr.ipv4.dst_addr: lpm @name("ipv4_dst");
            // The 5-tuple feeds the ECMP hash (selector keys are not matched).
            hdr.ipv4.src_addr: selector;
            hdr.ipv4.dst_addr: selector;
            hdr.ipv4.protocol: selector;
            meta.l4_src_port: selector;
            meta.l4_dst_port: selector;
        }
        actions = {
            set_nexthop;
            drop;
            @defaultonly NoAction;
        }
        implementation = ecmp_selector;
        const default_action = NoAction();
        size = 1024;
    }

    @id(0x02000003)
    table acl {
        key = {
            standard_metadata.ingress_port: ternary @name("ig_port");
            hdr.ethernet.ether_type: ternary @name("eth_type");
            hdr.ipv4.src_addr: ternary @name("ipv4_src");
            hdr.ipv4.dst_addr: ternary @name("ipv4_dst");
            hdr.ipv4.protocol: ternary @name("ip_proto");
            meta.l4_dst_port: ternary @name("l4_dst_port");
        }
        actions = {
            punt_to_cpu;
            drop;
            NoAction;
        }
        const default_action = NoAction();
        size = 256;
    }

    apply {
        if (hdr.packet_out.isValid()) {
            // The controller chose the port: no lookup, no rewrite.
            standard_metadata.egress_spec = hdr.packet_out.egress_port;
            hdr.packet_out.setInvalid();
            enq_port_counter.count((bit<32>)standard_metadata.egress_spec);
            return;
        }
        rx_port_counter.count((bit<32>)standard_metadata.ingress_port);

        if (hdr.mac_control.isValid()) {
            // A pause frame ends here: it acts on this port's egress queues.
            if (hdr.mac_control.opcode == MAC_CONTROL_OPCODE_PFC) {
                bit<16> ce = hdr.mac_control.class_enable;
                bit<32> cell = (bit<32>)standard_metadata.ingress_port * NUM_PRIORITIES;
                if (ce[0:0] == 1) { pfc_rx_counter.count(cell + 0); }
                if (ce[1:1] == 1) { pfc_rx_counter.count(cell + 1); }
                if (ce[2:2] == 1) { pfc_rx_counter.count(cell + 2); }
                if (ce[3:3] == 1) { pfc_rx_counter.count(cell + 3); }
                if (ce[4:4] == 1) { pfc_rx_counter.count(cell + 4); }
                if (ce[5:5] == 1) { pfc_rx_counter.count(cell + 5); }
                if (ce[6:6] == 1) { pfc_rx_counter.count(cell + 6); }
                if (ce[7:7] == 1) { pfc_rx_counter.count(cell + 7); }
            }
            mark_to_drop(standard_metadata);
            return;
        }

        meta.priority = 0;
        meta.lossless = false;
        if (hdr.ipv4.isValid()) {
            dscp_to_priority.apply();
        }
        pfc_config.apply();

        bool routed = false;
        if (hdr.ipv4.isValid() && my_station.apply().hit) {
            if (hdr.ipv4.ttl > 1) {
                routed = ipv4_lpm.apply().hit;
            }
        }
        if (!routed) {
            mark_to_drop(standard_metadata);
        }
        acl.apply();

        if (standard_metadata.egress_spec == 511) {   // v1model drop port
            pipeline_drop_counter.count((bit<32>)standard_metadata.ingress_port);
        } else if (standard_metadata.egress_spec != CPU_PORT) {
            enq_port_counter.count((bit<32>)standard_metadata.egress_spec);
            enq_prio_counter.count((bit<32>)standard_metadata.egress_spec * NUM_PRIORITIES
                                   + (bit<32>)meta.priority);
        }
    }
}

// ---------------------------------------------------------------- egress

control FabricEgress(inout headers_t hdr,
                     inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {

    @id(0x12000004)
    counter(MAX_PORTS, CounterType.packets_and_bytes) tx_port_counter;
    @id(0x12000007)
    counter(PORT_PRIO_CELLS, CounterType.packets_and_bytes) tx_prio_counter;
    @id(0x12000008)
    counter(PORT_PRIO_CELLS, CounterType.packets_and_bytes) ecn_mark_counter;
    @id(0x12000009)
    counter(PORT_PRIO_CELLS, CounterType.packets_and_bytes) pfc_tx_counter;

    bit<32> ecn_kmin_bytes = 0;
    bit<32> ecn_kmax_bytes = 0;
    bit<16> ecn_pmax_per_mille = 0;

    @id(0x01000006)
    action set_ecn_thresholds(bit<32> kmin_bytes, bit<32> kmax_bytes, bit<16> pmax_per_mille) {
        ecn_kmin_bytes = kmin_bytes;
        ecn_kmax_bytes = kmax_bytes;
        ecn_pmax_per_mille = pmax_per_mille;
    }

    @id(0x02000006)
    table ecn_config {
        key = {
            standard_metadata.egress_port: exact @name("eg_port");
            meta.priority: exact @name("priority");
        }
        actions = {
            set_ecn_thresholds;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = PORT_PRIO_CELLS;
    }

    apply {
        if (standard_metadata.egress_port == CPU_PORT) {
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = standard_metadata.ingress_port;
            return;
        }
        bit<32> cell = (bit<32>)standard_metadata.egress_port * NUM_PRIORITIES + (bit<32>)meta.priority;
        tx_port_counter.count((bit<32>)standard_metadata.egress_port);
        tx_prio_counter.count(cell);

        // RED-style ECN marking on the depth this packet found at enqueue.
        if (hdr.ipv4.isValid() && hdr.ipv4.ecn != 0 && ecn_config.apply().hit) {
            bit<32> depth = (bit<32>)standard_metadata.enq_qdepth * QDEPTH_CELL_BYTES;
            bool mark = false;
            if (depth >= ecn_kmax_bytes) {
                mark = true;
            } else if (depth > ecn_kmin_bytes) {
                // P(mark) = pmax * (depth - kmin) / (kmax - kmin), without division.
                bit<32> r;
                random<bit<32>>(r, 0, 999);
                mark = r * (ecn_kmax_bytes - ecn_kmin_bytes)
                       < (bit<32>)ecn_pmax_per_mille * (depth - ecn_kmin_bytes);
            }
            if (mark) {
                hdr.ipv4.ecn = 3;   // CE
                ecn_mark_counter.count(cell);
            }
        }
    }
}

control FabricComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn,
              hdr.ipv4.total_len, hdr.ipv4.identification, hdr.ipv4.flags,
              hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol,
              hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control FabricDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.packet_in);
        packet.emit(hdr.ethernet);
        packet.emit(hdr.mac_control);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.bth);
        packet.emit(hdr.reth);
        packet.emit(hdr.aeth);
    }
}

V1Switch(FabricParser(),
         FabricVerifyChecksum(),
         FabricIngress(),
         FabricEgress(),
         FabricComputeChecksum(),
         FabricDeparser()) main;
