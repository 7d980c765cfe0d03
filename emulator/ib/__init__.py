"""InfiniBand as a second link layer: packets, credit-based flow control, the subnet manager."""
