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
 *   malformed IPv4 (bad version, IHL, options, total length, header
 *   checksum; truncated UDP or BTH) -> dropped before any lookup, counted
 *                                 per (ingress port, reason) in
 *                                 malformed_drop_counter
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
 * In-band telemetry for HPCC (INT over UDP; emulator/int_md.py):
 *   a RoCE packet to UDP port UDP_PORT_INT carries a shim and up to
 *   INT_MAX_HOPS records between UDP and BTH. Egress fills the next record
 *   of a collecting stack (queue depth left at dequeue, the port's tx-bytes
 *   register, the egress time in fabric ns, the link rate) from int_port;
 *   an echo (an ACK carrying the records back) passes untouched. A stack
 *   that does not fit its packet is dropped as malformed.
 * Generating and honouring pauses is a traffic-manager job, and the two
 * targets' traffic managers differ (docs/lossless.md, "BMv2 target"):
 *   embedded target: its traffic manager accounts buffer per (ingress port,
 *     priority), sends XOFF/XON from pfc_config's thresholds and stops paused
 *     egress queues, as a switch ASIC does; it skips the P4 blocks below
 *     marked [BMv2 TM], which it implements natively.
 *   BMv2: [BMv2 TM] blocks in this program do it. Egress compares the depth
 *     a lossless packet leaves behind (deq_qdepth) with XOFF/XON, clones the
 *     packet (E2E) to the per-port session PFC_SESSION_BASE + ingress port,
 *     whose copy egress rewrites into a pause frame (XOFF with pfc_port's
 *     quanta, refreshed while the depth stays above XOFF; XON when it drops
 *     below). BMv2 cannot stop an egress queue, so a received pause is
 *     recorded per (port, priority) in pfc_paused_until and honoured one hop
 *     upstream: a lossless packet routed to a paused (port, priority) makes
 *     ingress clone (I2E) a pause toward the port it came from, so the
 *     senders stop, and the packet itself still leaves; the downstream
 *     switch's headroom absorbs it.
 * The controller sets all of it through tables (pfc_config, pfc_port) and
 * clone sessions; the registers are the data plane's own state.
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
// In-band telemetry for HPCC (emulator/int_md.py defines the layout): a shim
// and INT_MAX_HOPS records between UDP and BTH, announced by this port.
const bit<16> UDP_PORT_INT = 4792;
const bit<8>  INT_KIND_COLLECT = 1;           // a data packet: each switch fills a record
const bit<16> INT_SHIM_BYTES = 8;
const bit<16> BTH_BYTES = 12;
#define INT_MAX_HOPS 5
const bit<32> ETH_HDR_BYTES = 14;
const bit<16> IPV4_HDR_BYTES = 20;            // IHL 5: the only IPv4 header this fabric takes
const bit<16> IPV4_UDP_BYTES = 28;            // IPv4 + UDP headers
const bit<16> IPV4_UDP_BTH_BYTES = 40;        // IPv4 + UDP + BTH headers

#define CPU_PORT 255
#define MAX_PORTS 256
#define NUM_PRIORITIES 8
#define PORT_PRIO_CELLS 2048          // MAX_PORTS * NUM_PRIORITIES, index port*8+priority
const bit<16> MAC_CONTROL_OPCODE_PFC = 0x0101;
// BMv2 reports queue depth in packets; ECN thresholds are bytes. Depth in
// bytes is approximated as packets x this (a 1 KiB-MTU RoCE frame).
#define QDEPTH_CELL_BYTES 1100
// Clone session of port p for the pause frames it sends: PFC_SESSION_BASE + p.
#define PFC_SESSION_BASE 512
const bit<48> PFC_DST_MAC = 0x0180C2000001;   // 802.1Qbb MAC-control multicast
// v1model instance types (BMv2 PKT_INSTANCE_TYPE_*) of clones.
const bit<32> INSTANCE_INGRESS_CLONE = 1;
const bit<32> INSTANCE_EGRESS_CLONE = 2;
// A pause frame: Ethernet (14) + MAC control (20) + pad (26) = 60 bytes
// (the minimum frame without its FCS).
#define PFC_FRAME_BYTES 60
// malformed_drop_counter: MALFORMED_SLOTS cells per ingress port, cell =
// port * MALFORMED_SLOTS + reason. The reason codes are one fact, defined in
// emulator/dataplane/malformed.py (Malformed) and mirrored here; change both
// together (tests/unit/test_p4info.py compares them).
#define MALFORMED_SLOTS 16
#define MALFORMED_CELLS 4096          // MAX_PORTS * MALFORMED_SLOTS
const bit<32> MALFORMED_IPV4_TRUNCATED = 1;
const bit<32> MALFORMED_IPV4_VERSION = 2;
const bit<32> MALFORMED_IPV4_IHL = 3;
const bit<32> MALFORMED_IPV4_OPTIONS = 4;
const bit<32> MALFORMED_IPV4_TOTAL_LENGTH = 5;
const bit<32> MALFORMED_IPV4_CHECKSUM = 6;
const bit<32> MALFORMED_UDP_TRUNCATED = 7;
const bit<32> MALFORMED_BTH_TRUNCATED = 8;
const bit<32> MALFORMED_INT_STACK = 9;

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

// Zero padding of a generated pause frame up to the 60-byte minimum.
header pfc_pad_t {
    bit<208> zeros;
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

// INT shim (INT over UDP): what follows, and the UDP port it displaced.
header int_shim_t {
    bit<8>  kind;              // INT_KIND_COLLECT, or 2: an echo (an ACK carrying it back)
    bit<8>  hop_count;         // records filled
    bit<8>  max_hops;          // records present (the source reserves them)
    bit<8>  reserved;
    bit<16> orig_dport;
    bit<16> reserved2;
}

// One switch's INT record, filled at egress (HPCC's IntHop).
header int_hop_t {
    bit<32> qlen_bytes;        // depth of the packet's egress queue left at dequeue
    bit<32> tx_bytes;          // bytes the port sent, this packet included (wraps)
    bit<32> ts_ns;             // egress time, fabric ns (wraps)
    bit<32> rate_mbps;         // the port's link rate, fabric Mbit/s
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
    pfc_pad_t     pfc_pad;
    ipv4_t        ipv4;
    udp_t         udp;
    int_shim_t    int_shim;
    int_hop_t[INT_MAX_HOPS] int_hops;
    bth_t         bth;
    reth_t        reth;
    aeth_t        aeth;
}

struct metadata_t {
    bit<16> l4_src_port;
    bit<16> l4_dst_port;
    bit<8>  int_left;          // INT records still to parse
    bit<3>  priority;          // 802.1p priority (7 highest) from dscp_to_priority
    bool    lossless;          // pfc_config hit: PFC protects (ingress port, priority)
    bit<32> pfc_xoff_bytes;
    bit<32> pfc_xon_bytes;
    bit<32> pfc_headroom_bytes;
    // pfc_port of the ingress port [BMv2 TM]: what a pause sent out of it
    // carries, how often it is refreshed, and how long a quantum lasts there.
    bit<16> pfc_pause_quanta;
    bit<48> pfc_refresh_us;
    bit<32> pfc_quantum_us_q10;    // one quantum (512 bit times) in 1/1024 us
    // What a clone needs to become a pause frame (kept across the clone).
    @field_list(1) bit<3>  pfc_clone_priority;
    @field_list(1) bit<16> pfc_clone_quanta;
    @field_list(1) bit<48> pfc_clone_src_mac;
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
        // UDP only behind a 20-byte header: ingress drops IPv4 options.
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
            UDP_PORT_INT: parse_int_shim;
            default: accept;
        }
    }
    state parse_int_shim {
        packet.extract(hdr.int_shim);
        meta.int_left = hdr.int_shim.max_hops;
        // More records than the stack holds: left unparsed, ingress drops it.
        transition select(hdr.int_shim.max_hops) {
            0: parse_bth;
            1: parse_int_hop;
            2: parse_int_hop;
            3: parse_int_hop;
            4: parse_int_hop;
            5: parse_int_hop;
            default: accept;
        }
    }
    state parse_int_hop {
        packet.extract(hdr.int_hops.next);
        meta.int_left = meta.int_left - 1;
        transition select(meta.int_left) {
            0: parse_bth;
            default: parse_int_hop;
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

// A wrong checksum only sets standard_metadata.checksum_error (BMv2 does not
// drop on it); ingress drops the packet as MALFORMED_IPV4_CHECKSUM.
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
    @id(0x1200000A)
    counter(MALFORMED_CELLS, CounterType.packets_and_bytes) malformed_drop_counter;

    // [BMv2 TM] until when (ingress_global_timestamp, us) a received pause
    // stops (port, priority); index port*8+priority.
    @id(0x16000001)
    register<bit<48>>(PORT_PRIO_CELLS) pfc_paused_until;
    // [BMv2 TM] when the pause relayed out of (port, priority) is refreshed.
    @id(0x16000002)
    register<bit<48>>(PORT_PRIO_CELLS) pfc_relay_refresh_at;

    @id(0x01000007)
    action set_pfc_port(bit<16> pause_quanta, bit<32> refresh_us, bit<32> quantum_us_q10) {
        meta.pfc_pause_quanta = pause_quanta;
        meta.pfc_refresh_us = (bit<48>)refresh_us;
        meta.pfc_quantum_us_q10 = quantum_us_q10;
    }

    // [BMv2 TM] per ingress port: the pause frames this switch sends out of
    // it, and the length of a pause quantum at its (dilated) rate.
    @id(0x02000007)
    table pfc_port {
        key = {
            standard_metadata.ingress_port: exact @name("port");
        }
        actions = {
            set_pfc_port;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = MAX_PORTS;
    }

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

        // Malformed IPv4 ends here, before any lookup (no ACL can punt or
        // permit it): a real fabric does not route what it cannot trust.
        // BMv2 does not drop on parser or checksum errors by itself, so each
        // check is spelled out; the embedded target makes the same ones in
        // the same order (ipv4_checks.py, malformed_reason).
        bit<32> malformed = 0;
        if (hdr.ipv4.isValid()) {
            if (hdr.ipv4.version != 4) {
                malformed = MALFORMED_IPV4_VERSION;
            } else if (hdr.ipv4.ihl < 5) {
                malformed = MALFORMED_IPV4_IHL;
            } else if (hdr.ipv4.ihl != 5) {
                // IPv4 options are not supported, so dropped (and counted)
                // rather than parsed: RoCEv2 NICs never send them, switch
                // ASICs trap them off the fast path to a CPU this fabric does
                // not have, and without them UDP and the BTH sit at fixed
                // offsets on both targets.
                malformed = MALFORMED_IPV4_OPTIONS;
            } else if (hdr.ipv4.total_len < IPV4_HDR_BYTES
                       || (bit<32>)hdr.ipv4.total_len
                          > standard_metadata.packet_length - ETH_HDR_BYTES) {
                // A frame longer than that is legal: Ethernet pads to 60 bytes.
                malformed = MALFORMED_IPV4_TOTAL_LENGTH;
            } else if (standard_metadata.checksum_error == 1) {
                // FabricVerifyChecksum flagged it; not repaired, dropped.
                malformed = MALFORMED_IPV4_CHECKSUM;
            } else if (hdr.ipv4.protocol == IP_PROTO_UDP
                       && hdr.ipv4.total_len < IPV4_UDP_BYTES) {
                // Judged by the total length, not the frame: the parser may
                // have read the UDP header out of Ethernet padding.
                malformed = MALFORMED_UDP_TRUNCATED;
            } else if (hdr.udp.isValid() && hdr.udp.dst_port == UDP_PORT_ROCEV2
                       && hdr.ipv4.total_len < IPV4_UDP_BTH_BYTES) {
                malformed = MALFORMED_BTH_TRUNCATED;
            } else if (hdr.udp.isValid() && hdr.udp.dst_port == UDP_PORT_INT
                       && (hdr.ipv4.total_len < IPV4_UDP_BYTES + INT_SHIM_BYTES
                           || hdr.int_shim.max_hops > INT_MAX_HOPS
                           || hdr.int_shim.hop_count > hdr.int_shim.max_hops
                           || hdr.ipv4.total_len < IPV4_UDP_BYTES + INT_SHIM_BYTES
                                                   + ((bit<16>)hdr.int_shim.max_hops << 4)
                                                   + BTH_BYTES)) {
                // An INT stack that does not fit its packet, or says it has
                // more records than it holds or than the stack can (judged
                // by the total length, like UDP's).
                malformed = MALFORMED_INT_STACK;
            }
        } else if (hdr.ethernet.isValid() && hdr.ethernet.ether_type == ETHERTYPE_IPV4) {
            malformed = MALFORMED_IPV4_TRUNCATED;    // parse_ipv4: PacketTooShort
        }
        if (malformed != 0) {
            mark_to_drop(standard_metadata);
            pipeline_drop_counter.count((bit<32>)standard_metadata.ingress_port);
            malformed_drop_counter.count((bit<32>)standard_metadata.ingress_port * MALFORMED_SLOTS
                                         + malformed);
            return;
        }

        meta.pfc_pause_quanta = 0;
        pfc_port.apply();

        if (hdr.mac_control.isValid()) {
            // A pause frame ends here: it acts on this port's egress queues.
            if (hdr.mac_control.opcode == MAC_CONTROL_OPCODE_PFC) {
                bit<16> ce = hdr.mac_control.class_enable;
                bit<32> cell = (bit<32>)standard_metadata.ingress_port * NUM_PRIORITIES;
                bit<48> now = standard_metadata.ingress_global_timestamp;
                bit<48> q10 = (bit<48>)meta.pfc_quantum_us_q10;
                // Pause time 0 (XON) resumes at once: paused_until = now.
#define PFC_RX_CLASS(i) \
                if (ce[i:i] == 1) { \
                    pfc_rx_counter.count(cell + i); \
                    pfc_paused_until.write(cell + i, \
                        now + (((bit<48>)hdr.mac_control.pause_time_##i * q10) >> 10)); \
                }
                PFC_RX_CLASS(0)
                PFC_RX_CLASS(1)
                PFC_RX_CLASS(2)
                PFC_RX_CLASS(3)
                PFC_RX_CLASS(4)
                PFC_RX_CLASS(5)
                PFC_RX_CLASS(6)
                PFC_RX_CLASS(7)
#undef PFC_RX_CLASS
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

        // The frame's destination is this switch's MAC: pauses come from it.
        meta.pfc_clone_src_mac = hdr.ethernet.dst_addr;
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
            if (meta.lossless && meta.pfc_pause_quanta != 0) {
                // [BMv2 TM] The packet is headed for a (port, priority) that
                // a received pause stops: hold its sender instead, by a pause
                // toward the port it came in on (refreshed while such packets
                // keep coming). The packet itself still leaves.
                bit<48> now = standard_metadata.ingress_global_timestamp;
                bit<48> until;
                pfc_paused_until.read(until, (bit<32>)standard_metadata.egress_spec * NUM_PRIORITIES
                                             + (bit<32>)meta.priority);
                bit<32> in_cell = (bit<32>)standard_metadata.ingress_port * NUM_PRIORITIES
                                  + (bit<32>)meta.priority;
                bit<48> refresh_at;
                pfc_relay_refresh_at.read(refresh_at, in_cell);
                if (until > now && now >= refresh_at) {
                    pfc_relay_refresh_at.write(in_cell, now + meta.pfc_refresh_us);
                    meta.pfc_clone_priority = meta.priority;
                    meta.pfc_clone_quanta = meta.pfc_pause_quanta;
                    clone_preserving_field_list(CloneType.I2E,
                        PFC_SESSION_BASE + (bit<32>)standard_metadata.ingress_port, 1);
                }
            }
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

    // [BMv2 TM] per (ingress port, priority): whether an XOFF is out, and
    // when it is refreshed (egress_global_timestamp, us).
    @id(0x16000003)
    register<bit<1>>(PORT_PRIO_CELLS) pfc_xoff_sent;
    @id(0x16000004)
    register<bit<48>>(PORT_PRIO_CELLS) pfc_xoff_refresh_at;

    // Bytes each port has sent (INT's tx_bytes; P4 cannot read a counter).
    @id(0x16000005)
    register<bit<32>>(MAX_PORTS) int_tx_bytes;

    bit<32> int_rate_mbps = 0;
    bit<32> int_ts_q16 = 0;

    // Per egress port: its rate for INT records, and how to turn the
    // target's egress timestamp (BMv2: wall-clock us) into fabric ns:
    // fabric ns = timestamp x ts_q16 / 65536 (in a run dilated D times,
    // ts_q16 = 65536 x 1000 / D).
    @id(0x01000008)
    action set_int_port(bit<32> rate_mbps, bit<32> ts_q16) {
        int_rate_mbps = rate_mbps;
        int_ts_q16 = ts_q16;
    }

    @id(0x02000008)
    table int_port {
        key = {
            standard_metadata.egress_port: exact @name("eg_port");
        }
        actions = {
            set_int_port;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = MAX_PORTS;
    }

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
        if (standard_metadata.instance_type == INSTANCE_INGRESS_CLONE
                || standard_metadata.instance_type == INSTANCE_EGRESS_CLONE) {
            // [BMv2 TM] A clone made to pause its port: rewrite it into an
            // 802.1Qbb frame for one priority, then cut it to 60 bytes.
            hdr.packet_in.setInvalid();
            hdr.ipv4.setInvalid();
            hdr.udp.setInvalid();
            hdr.int_shim.setInvalid();
            hdr.int_hops[0].setInvalid();
            hdr.int_hops[1].setInvalid();
            hdr.int_hops[2].setInvalid();
            hdr.int_hops[3].setInvalid();
            hdr.int_hops[4].setInvalid();
            hdr.bth.setInvalid();
            hdr.reth.setInvalid();
            hdr.aeth.setInvalid();
            hdr.ethernet.dst_addr = PFC_DST_MAC;
            hdr.ethernet.src_addr = meta.pfc_clone_src_mac;
            hdr.ethernet.ether_type = ETHERTYPE_MAC_CONTROL;
            hdr.mac_control.setValid();
            hdr.mac_control.opcode = MAC_CONTROL_OPCODE_PFC;
            hdr.mac_control.class_enable = (bit<16>)1 << meta.pfc_clone_priority;
            bit<16> q = meta.pfc_clone_quanta;
            bit<3> p = meta.pfc_clone_priority;
            hdr.mac_control.pause_time_0 = p == 0 ? q : 0;
            hdr.mac_control.pause_time_1 = p == 1 ? q : 0;
            hdr.mac_control.pause_time_2 = p == 2 ? q : 0;
            hdr.mac_control.pause_time_3 = p == 3 ? q : 0;
            hdr.mac_control.pause_time_4 = p == 4 ? q : 0;
            hdr.mac_control.pause_time_5 = p == 5 ? q : 0;
            hdr.mac_control.pause_time_6 = p == 6 ? q : 0;
            hdr.mac_control.pause_time_7 = p == 7 ? q : 0;
            hdr.pfc_pad.setValid();
            hdr.pfc_pad.zeros = 0;
            truncate(PFC_FRAME_BYTES);
            pfc_tx_counter.count((bit<32>)standard_metadata.egress_port * NUM_PRIORITIES + (bit<32>)p);
            return;
        }
        if (standard_metadata.egress_port == CPU_PORT) {
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = standard_metadata.ingress_port;
            return;
        }
        bit<32> cell = (bit<32>)standard_metadata.egress_port * NUM_PRIORITIES + (bit<32>)meta.priority;
        tx_port_counter.count((bit<32>)standard_metadata.egress_port);
        tx_prio_counter.count(cell);

        // INT: every packet counts in its port's tx bytes; a collecting
        // stack with room gets this port's record in its next slot.
        bit<32> tx_bytes;
        int_tx_bytes.read(tx_bytes, (bit<32>)standard_metadata.egress_port);
        tx_bytes = tx_bytes + standard_metadata.packet_length;
        int_tx_bytes.write((bit<32>)standard_metadata.egress_port, tx_bytes);
        if (hdr.int_shim.isValid() && hdr.int_shim.kind == INT_KIND_COLLECT
                && hdr.int_shim.hop_count < hdr.int_shim.max_hops && int_port.apply().hit) {
            bit<32> qlen = (bit<32>)standard_metadata.deq_qdepth * QDEPTH_CELL_BYTES;
            bit<32> ts = (bit<32>)(((bit<64>)standard_metadata.egress_global_timestamp
                                    * (bit<64>)int_ts_q16) >> 16);
#define INT_FILL(i) \
            if (hdr.int_shim.hop_count == i) { \
                hdr.int_hops[i].qlen_bytes = qlen; \
                hdr.int_hops[i].tx_bytes = tx_bytes; \
                hdr.int_hops[i].ts_ns = ts; \
                hdr.int_hops[i].rate_mbps = int_rate_mbps; \
            }
            INT_FILL(0)
            INT_FILL(1)
            INT_FILL(2)
            INT_FILL(3)
            INT_FILL(4)
#undef INT_FILL
            hdr.int_shim.hop_count = hdr.int_shim.hop_count + 1;
        }

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

        // [BMv2 TM] PFC generation. BMv2 has no per-ingress buffer
        // accounting, so the depth of the egress queue this lossless packet
        // leaves behind stands for what its ingress port has in the buffer:
        // XOFF toward that port at or above the XOFF threshold (refreshed
        // before the pause runs out), XON once the depth is down to XON.
        // The depth at dequeue (deq_qdepth), not the one the packet found at
        // enqueue: the latter is a queueing delay old, and a late XOFF lets
        // the queue overflow.
        if (meta.lossless && meta.pfc_pause_quanta != 0) {
            bit<32> depth = (bit<32>)standard_metadata.deq_qdepth * QDEPTH_CELL_BYTES;
            bit<32> in_cell = (bit<32>)standard_metadata.ingress_port * NUM_PRIORITIES
                              + (bit<32>)meta.priority;
            bit<48> now = standard_metadata.egress_global_timestamp;
            bit<1> sent;
            bit<48> refresh_at;
            pfc_xoff_sent.read(sent, in_cell);
            pfc_xoff_refresh_at.read(refresh_at, in_cell);
            meta.pfc_clone_priority = meta.priority;
            if (depth >= meta.pfc_xoff_bytes) {
                if (sent == 0 || now >= refresh_at) {
                    pfc_xoff_sent.write(in_cell, 1);
                    pfc_xoff_refresh_at.write(in_cell, now + meta.pfc_refresh_us);
                    meta.pfc_clone_quanta = meta.pfc_pause_quanta;
                    clone_preserving_field_list(CloneType.E2E,
                        PFC_SESSION_BASE + (bit<32>)standard_metadata.ingress_port, 1);
                }
            } else if (sent == 1 && depth <= meta.pfc_xon_bytes) {
                pfc_xoff_sent.write(in_cell, 0);
                meta.pfc_clone_quanta = 0;
                clone_preserving_field_list(CloneType.E2E,
                    PFC_SESSION_BASE + (bit<32>)standard_metadata.ingress_port, 1);
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
        packet.emit(hdr.pfc_pad);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.int_shim);
        packet.emit(hdr.int_hops);
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
