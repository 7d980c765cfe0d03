"""Wire constants: the one place for facts of the frames and ports that the
pipeline, the traffic manager, the NIC, the results and the tests share.

Header lengths are the Scapy layers' that define the formats
(``fields_desc``), so a layout has one definition: each is written here as
the integer the fast paths use, and ``HEADER_LAYERS`` names the layer it is
the length of, which tests/unit/test_roce_layers.py measures with
``layer_len_bytes``. (Not computed here at import: Scapy's import is 0.13 s
of every process that needs only a constant -- the plots' process imports
this module through the topology and would spend it after the traffic.)
Values fixed by ``p4src/fabric.p4`` say so (its P4Info is the contract:
change both together).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scapy.packet import Packet


def layer_len_bytes(layer: type[Packet], *, exclude: tuple[str, ...] = ()) -> int:
    """Fixed length of a Scapy layer from its ``fields_desc`` (bit fields
    count in fractions of a byte), leaving out the fields named in
    ``exclude`` (e.g. a trailer that Scapy keeps in the header's layer)."""
    n = sum(f.sz for f in layer.fields_desc if f.name not in exclude)
    if n != int(n):
        raise ValueError(f"{layer.__name__} is not a whole number of bytes")
    return int(n)


# --- Ethernet ---------------------------------------------------------------
ETH_HDR_BYTES = 14
DOT1Q_TAG_BYTES = 4
ETH_P_ALL = 0x0003                               # every ethertype (a packet socket)
ETH_P_IP = 0x0800
ETH_P_8021Q = 0x8100
ETH_P_PAUSE = 0x8808                             # MAC control (802.3x / 802.1Qbb)
# Preamble (7) + SFD (1) + FCS (4) + minimum inter-frame gap (12): bytes a
# frame occupies on the wire beyond what a raw socket carries.
WIRE_OVERHEAD_BYTES = 24
MIN_FRAME_BYTES = 60                             # without FCS

# --- PFC (IEEE 802.1Qbb) ----------------------------------------------------
NUM_PRIORITIES = 8                               # 802.1p classes = queues per port
PFC_DST_MAC = bytes.fromhex("0180c2000001")
PFC_OPCODE = 0x0101
PFC_QUANTUM_BITS = 512                           # one pause quantum: 512 bit times

# --- IPv4 / UDP / RoCEv2 ----------------------------------------------------
IPV4_HDR_BYTES = 20                              # IHL 5, no options
UDP_HDR_BYTES = 8
ROCEV2_UDP_DPORT = 4791
# UDP source port of a QP: 49152 + (QPN & 0x3FFF), the RoCE entropy range
ROCE_SPORT_BASE = 0xC000
ROCE_SPORT_MASK = 0x3FFF
BTH_BYTES = 12                                   # Scapy keeps the ICRC in BTH
ICRC_BYTES = 4
AETH_BYTES = 4
RETH_BYTES = 16                                  # VA (8) + R_Key (4) + DMA length (4); IBA 9.3.3
CNP_PAD_BYTES = 16                               # reserved bytes of a CNP (RoCEv2 annex A17.9.3)

# the Scapy layer (module, class, fields left out) each header length is of
HEADER_LAYERS = {
    "ETH_HDR_BYTES": ("scapy.layers.l2", "Ether", ()),
    "DOT1Q_TAG_BYTES": ("scapy.layers.l2", "Dot1Q", ()),
    "IPV4_HDR_BYTES": ("scapy.layers.inet", "IP", ("options",)),
    "UDP_HDR_BYTES": ("scapy.layers.inet", "UDP", ()),
    "BTH_BYTES": ("scapy.contrib.roce", "BTH", ("icrc",)),
    "AETH_BYTES": ("scapy.contrib.roce", "AETH", ()),
    "INT_SHIM_BYTES": ("emulator.int_md", "IntShim", ("hops",)),
    "INT_HOP_BYTES": ("emulator.int_md", "IntHop", ()),
    "IB_FC_PACKET_BYTES": ("emulator.ib.headers", "IBFlowControl", ()),
}

# Ethernet + IPv4 + UDP + BTH: every RoCEv2 frame starts with these
ROCE_HDR_BYTES = ETH_HDR_BYTES + IPV4_HDR_BYTES + UDP_HDR_BYTES + BTH_BYTES   # 54


@dataclass(frozen=True)
class Framing:
    """What a link layer puts around the shared transport (BTH onwards), as
    the NIC's pacer counts it: ``hdr_bytes`` of a frame as the socket takes
    it precede the BTH's extended headers (BTH included), ``trailer_bytes``
    follow the payload and its pad, and ``wire_overhead_bytes`` is what the
    wire adds to such a frame -- Ethernet's preamble, SFD, FCS and gap; or,
    negative, the carrier a veth needs and an InfiniBand link does not have.
    ``ROCE_FRAMING`` here, ``emulator.ib.headers.IB_FRAMING`` for IB."""
    hdr_bytes: int
    trailer_bytes: int
    wire_overhead_bytes: int

    def frame_bytes(self, ext_bytes: int, payload_bytes: int) -> int:
        """A packet's frame: headers, extended headers, payload padded to 4 bytes, trailer."""
        return self.hdr_bytes + ext_bytes + payload_bytes + (-payload_bytes & 3) + self.trailer_bytes

    @property
    def ack_frame_bytes(self) -> int:
        return self.hdr_bytes + AETH_BYTES + self.trailer_bytes

    @property
    def cnp_frame_bytes(self) -> int:
        return self.hdr_bytes + CNP_PAD_BYTES + self.trailer_bytes

    @property
    def read_request_frame_bytes(self) -> int:
        return self.hdr_bytes + RETH_BYTES + self.trailer_bytes   # a RETH, no payload


ROCE_FRAMING = Framing(ROCE_HDR_BYTES, ICRC_BYTES, WIRE_OVERHEAD_BYTES)
ACK_FRAME_BYTES = ROCE_FRAMING.ack_frame_bytes                               # 62
CNP_FRAME_BYTES = ROCE_FRAMING.cnp_frame_bytes                               # 74

# Byte offsets inside an untagged RoCEv2 frame
IPV4_OFFSET = ETH_HDR_BYTES
UDP_OFFSET = IPV4_OFFSET + IPV4_HDR_BYTES
BTH_OFFSET = UDP_OFFSET + UDP_HDR_BYTES

# --- INT for HPCC (``emulator.int_md``: its layers and fast paths) -----------
# UDP destination port that announces an INT shim. Not IANA-assigned for
# this (INT leaves the value to the operator); next to RoCEv2's 4791.
# fabric.p4 INT_UDP_DPORT: change both together.
INT_UDP_DPORT = 4792
INT_KIND_COLLECT = 1        # a data packet: each switch fills a record
INT_KIND_ECHO = 2           # an ACK carrying the records back: switches leave it
INT_MAX_HOPS = 5            # fabric.p4's header stack: a 3-tier CLOS's diameter
INT_SHIM_BYTES = 8          # between UDP and the records
INT_HOP_BYTES = 16          # one switch's record
INT_OFFSET = UDP_OFFSET + UDP_HDR_BYTES          # 42: the shim, in an untagged frame


def int_bytes(max_hops: int) -> int:
    """Bytes an INT stack of ``max_hops`` records adds to a frame."""
    return INT_SHIM_BYTES + max_hops * INT_HOP_BYTES


def roce_sport(qpn: int) -> int:
    """The UDP source port the emulator gives QP ``qpn`` (ECMP entropy)."""
    return ROCE_SPORT_BASE + (qpn & ROCE_SPORT_MASK)


# --- InfiniBand (layouts: emulator/ib/headers.py) ---------------------------
# A veth carries Ethernet frames: an InfiniBand packet rides behind a 14-byte
# Ethernet header whose type stands for the start delimiter it would have had
# on an IB link (IBA 6.3): IEEE 802's two Local Experimental Ethertypes.
ETH_P_IB_DATA = 0x88B5                           # SDP: a data packet, from its LRH
ETH_P_IB_LINK = 0x88B6                           # LDP: a link (flow-control) packet
IB_FC_PACKET_BYTES = 6                           # a flow-control packet on the IB wire (IBA 7.9.4)
IB_CREDIT_BLOCK_BYTES = 64                       # flow control counts 64-byte blocks (IBA 7.9.4)
IB_CREDIT_MOD = 4096                             # FCTBS, FCCL, ABR: 12-bit counters


def ib_credit_blocks(packet_bytes: int) -> int:
    """Credit blocks an InfiniBand packet uses: its length (LRH through
    VCRC) in 64-byte blocks, rounded up (IBA 7.9.4.1)."""
    return -(-packet_bytes // IB_CREDIT_BLOCK_BYTES)
IB_VL15 = 15                                     # management VL: never flow controlled

# --- The switch ports (p4src/fabric.p4) --------------------------------------
CPU_PORT = 255                                   # fabric.p4 CPU_PORT: packet-in/out
MAX_SWITCH_PORTS = CPU_PORT - 1                  # data ports 1..254
