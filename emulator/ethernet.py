"""Ethernet facts shared by the switches, the NICs and the results."""

# Preamble (7) + SFD (1) + FCS (4) + minimum inter-frame gap (12): bytes a
# frame occupies on the wire beyond what a raw socket carries.
WIRE_OVERHEAD_BYTES = 24
